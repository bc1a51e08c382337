"""The one home of forensics' state: every file forensics writes on this machine is under it.

``home()`` is ``--store DIR`` while a command runs with it (the CLI sets it through
``using``), else ``$FORENSICS_HOME``, else ``./.forensics``. Under it:

    manifest.json, tables/, store.lock   the store (forensics.store)
    models/phase-model.json              a retrained classifier (forensics.classifier)
    known_hosts                          host keys accepted with --trust-new-host
    evidence/LAUNCH/                     command outputs past their cap (forensics.launcher)
    logs/NAME.log                        the log of a local `forensics launch` without --log

Configuration is read, never written, so ``--store`` does not move it: ``./forensics.toml``,
then ``config.toml`` in ``default_home()`` ($FORENSICS_HOME, else ./.forensics). Keys
accepted under the default home stay trusted under ``--store DIR`` (both files are read; new
ones are written to the current home).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

_OVERRIDE: ContextVar[Path | None] = ContextVar("forensics_home", default=None)


def default_home() -> Path:
    """``$FORENSICS_HOME``, else ``./.forensics`` (absolute)."""
    env = os.environ.get("FORENSICS_HOME")
    return Path(env).expanduser() if env else Path.cwd() / ".forensics"


def home() -> Path:
    """Where forensics writes its state now (see the module doc)."""
    return _OVERRIDE.get() or default_home()


@contextlib.contextmanager
def using(path: str | os.PathLike[str] | None) -> Iterator[Path]:
    """Make ``path`` the home while the block runs (``None``: leave it as it is)."""
    if path is None:
        yield home()
        return
    token = _OVERRIDE.set(Path(path).expanduser())
    try:
        yield home()
    finally:
        _OVERRIDE.reset(token)
