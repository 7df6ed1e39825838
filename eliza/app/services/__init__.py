"""What the sessions and the check runners share: building cells, prebuilt cells, evidence
recording, input hashes, report rendering, the ABI baseline files, the bundle."""
