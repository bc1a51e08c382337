"""The staging folder: parts written by ingest's worker processes (forensics/ingest/pool.py)
before the ingest's transaction adopts them (``Transaction.adopt``, renamed into ``tables/``
at its commit).

Each ingest that starts workers has a folder of its own, ``staging/<pid>-<random>/``, removed
when the ingest ends. A process killed with ``kill -9`` leaves its folder behind: the next
commit to the store (``Store._gc``) removes the folders whose process is gone. Nothing in
``staging/`` is ever read as part of the store: a part counts once a manifest lists it.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

STAGING = "staging"


def new_staging(root: Path) -> Path:
    """A staging folder of this process (created)."""
    d = Path(root) / STAGING / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    d.mkdir(parents=True, mode=0o700)
    return d


def remove_staging(folder: Path) -> None:
    import shutil  # (~7 ms: not for a commit that finds no folder to remove)

    shutil.rmtree(folder, ignore_errors=True)


def clean_staging(root: Path) -> None:
    """Remove the staging folders whose ingest process is gone (killed before it cleaned)."""
    try:
        entries = list((Path(root) / STAGING).iterdir())
    except OSError:
        return
    for d in entries:
        pid = d.name.split("-", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        remove_staging(d)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True
