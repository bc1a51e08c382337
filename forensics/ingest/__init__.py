"""Inputs (local paths, globs, directories, ssh:// and NAME:/path) -> parser -> store.

Idempotent and incremental. Each log file is a *source* with a stable id (sha1 of host and
real path). The manifest keeps, per source, its size, mtime, a hash of its first bytes and
the offset of the last complete line parsed; the parser's state at that point is a row of
the ``states`` table (read only when the log has grown):

* unchanged (same size, mtime, head and content hash) -> not parsed (read once to hash it);
* grown (its first bytes hash as the whole file did) -> only the new bytes are parsed, from
  the saved state;
* rewritten or truncated (anything else)  -> its rows are dropped and it is re-parsed.

The content hash (xxh3_128 of the file's bytes; an older store's sha1, compared as such) is
the one cache key of a source: the verdict cache of ``runs`` is keyed on it too, so every view
agrees after a rewrite that kept the size and mtime. The same file reached twice (a hard link:
same device and inode) is ingested once; the store's own files are never ingested as logs.

Rows of complete lines are immutable rows of the source. The run summaries (``<sid>~runs``),
the records of an unfinished last line (``<sid>~tail``) and the resume state (``<sid>~state``)
are replaced at every ingest. The files of a batch share their parts (one per table and kind,
forensics/store/transaction.py), so a small log costs rows, not parquet files. Files are
committed in batches (``BATCH_FILES`` files or ``BATCH_SECONDS`` seconds, whichever first,
spaced so that commits take at most ``COMMIT_SHARE`` of the time on a large store): a
crash or ``kill -9`` loses at most the batch being built, never duplicates, and the next
ingest picks up from the last commit; Ctrl-C or an error commits the files finished before it
(each file is in the store fully or not at all).
"""

from __future__ import annotations

from forensics.ingest.batch import BATCH_FILES, BATCH_SECONDS, COMMIT_SHARE, ingest
from forensics.ingest.file import PER_SOURCE_TABLES
from forensics.ingest.identity import STORE_FILES, source_id
from forensics.ingest.inputs import DIR_PATTERNS, DIR_SKIP, expand_inputs
from forensics.ingest.outcome import (
    CHANGED,
    SKIP_REASONS,
    FileOutcome,
    IngestSummary,
    exit_code_for,
)

__all__ = [
    "BATCH_FILES",
    "BATCH_SECONDS",
    "CHANGED",
    "COMMIT_SHARE",
    "DIR_PATTERNS",
    "DIR_SKIP",
    "PER_SOURCE_TABLES",
    "SKIP_REASONS",
    "STORE_FILES",
    "FileOutcome",
    "IngestSummary",
    "exit_code_for",
    "expand_inputs",
    "ingest",
    "source_id",
]
