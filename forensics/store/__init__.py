"""The embedded store: a folder of parquet tables plus one atomic manifest.

Layout::

    <root>/manifest.json              schema version, sources, and the parts of each table
    <root>/tables/<table>/<part>.parquet
    <root>/store.lock                 writers hold an fcntl lock on it

Readers see only the parts listed in the manifest. A transaction writes its parts under
temporary names, renames them into place and then replaces ``manifest.json`` atomically
(write + fsync + ``os.replace``), so a crash or Ctrl-C at any point leaves the previous state.
A writer removes only files it can account for: the parts a committed transaction dropped
(the manifest's ``trash``), parts named with a generation the manifest never reached (a
crashed commit) and ``*.parquet.tmp``; any other unlisted file is an orphan, kept and reported
by ``forensics store check``. A store with parts but no usable manifest is *damaged*: reads
and writes refuse it (exit 7) until ``forensics store repair`` rebuilds the manifest from the
parts. Reads never write unless the store is writable (no lock is needed to read).
The tables are plain parquet: ``polars.read_parquet`` and DuckDB's ``read_parquet`` read them
without forensics (see docs/store.md).
"""

from __future__ import annotations

from forensics.store.folder import (
    CORRUPT_MARK,
    DEFAULT_LOCK_TIMEOUT,
    LOCK,
    QUARANTINE_KEY,
    QUARANTINE_LOCK_TIMEOUT,
    Store,
    default_root,
)
from forensics.store.manifest import (
    MANIFEST,
    PART_NAME,
    PART_SUFFIX,
    REPAIR_HINT,
    SHARED,
    Manifest,
    StoreDamaged,
    _crashed_part,
    safe_part_name,
)
from forensics.store.transaction import WRITE_ERRORS, StoreReadOnly, Transaction, _write_error

__all__ = [
    "CORRUPT_MARK",
    "DEFAULT_LOCK_TIMEOUT",
    "LOCK",
    "MANIFEST",
    "PART_NAME",
    "PART_SUFFIX",
    "QUARANTINE_KEY",
    "QUARANTINE_LOCK_TIMEOUT",
    "REPAIR_HINT",
    "SHARED",
    "WRITE_ERRORS",
    "Manifest",
    "Store",
    "StoreDamaged",
    "StoreReadOnly",
    "Transaction",
    "_crashed_part",
    "_write_error",
    "default_root",
    "safe_part_name",
]
