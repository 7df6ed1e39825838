"""The sessions that build and write evidence run one at a time per checkout, and clean up
after a run that was killed (`kill -9`, a lost CI runner) before they start.

What a killed run can leave behind, and why the next one recovers:
- evidence, the report and the tiny bundle are written atomically (a temporary beside the
  target, then a rename), so a target is the old file or the new one, never half of one;
  the temporaries of a writer that is gone are removed here;
- the lock is an `flock`, released by the kernel when its holder dies;
- the build trees are Ninja's, which re-runs whatever command did not finish, and the
  Conan cache is checked by `eliza.adapters.conan` (a package whose build was interrupted
  has no manifest and is built again).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from eliza.adapters.checkout_lock import checkout_lock
from eliza.app.project import current
from eliza.formats.files import remove_stale_temporaries

Log = Callable[[str], None]


@contextlib.contextmanager
def exclusive(what: str, log: Log) -> Iterator[None]:
    """Holds the checkout's lock (waiting, and saying so, while another session holds it),
    then removes temporaries that killed runs left under build/."""
    project = current()
    with checkout_lock(project.build_root, what, log):
        removed = remove_stale_temporaries([project.build_root])
        if removed:
            names = ", ".join(str(p.relative_to(project.repo)) for p in removed[:5])
            more = f" and {len(removed) - 5} more" if len(removed) > 5 else ""
            log(f"removed {len(removed)} temporary file(s) an interrupted run left: {names}{more}")
        yield
