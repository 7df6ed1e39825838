"""Byte-identity bench: records of e2e_loop_bench / reference_runner, the diff engine,
and the runs nox drives per cell."""
