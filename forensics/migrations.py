"""The store's migrations: an ordered table, applied on open and recorded in the manifest.

Each row takes the manifest of the version before it to its own ``version``. Opening a store
applies, in order, every row newer than the manifest's ``schema_version`` (in memory: a read
never writes); the next write commits the migrated manifest with one entry per applied row
under ``migrations`` (version, name, when), as simonw/llm records its own. A manifest newer
than the last row was written by a newer forensics and is refused (exit 7).

A migration is a pure function of the manifest's JSON object; one that had to touch parts
would do it through a transaction at the next write, never on a read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Migration:
    version: int  # the schema version this migration produces
    name: str
    apply: Callable[[dict[str, Any]], None]  # changes the manifest object in place


def _trash_and_log(raw: dict[str, Any]) -> None:
    # v1 removed every unlisted part at each commit; v2 removes only what it dropped itself
    # (the trash list, committed with the manifest) or what a crashed commit left
    raw.setdefault("trash", [])
    raw.setdefault("migrations", [])


def _content_hash(raw: dict[str, Any]) -> None:
    # v1 knew a source by size, mtime and a hash of its first 4 KiB: a log rewritten with the
    # same size and mtime looked unchanged. v3 keeps a hash of the whole content; a v1 source
    # has none, so the next ingest of it reads it again (once) and records one.
    for rec in (raw.get("sources") or {}).values():
        if isinstance(rec, dict):
            rec.setdefault("content_hash", None)
            rec.setdefault("dev", None)


def _states_out(raw: dict[str, Any]) -> None:
    # v3 kept each log's parser resume state in its source record: 95 % of a 51 MB manifest
    # at 10,000 logs, parsed by every reading command. v4 keeps it in the ``states`` table
    # (one row per log, read only by ingest when the log has grown) and lets a part hold the
    # rows of several logs (``shared``). The states move out under ``legacy_states`` here
    # (in memory); the next write stores them in the states table and drops them from the
    # manifest (forensics/store/transaction.py, Transaction.settle).
    legacy = raw.get("legacy_states")
    legacy = dict(legacy) if isinstance(legacy, dict) else {}
    for sid, rec in (raw.get("sources") or {}).items():
        if isinstance(rec, dict) and "state" in rec:
            state = rec.pop("state")
            rec["resume"] = state is not None
            if state is not None:
                legacy[sid] = state
    raw["legacy_states"] = legacy
    raw.setdefault("shared", {})


MIGRATIONS: tuple[Migration, ...] = (
    Migration(2, "trash list and migration log in the manifest", _trash_and_log),
    Migration(3, "sources carry a content hash and device/inode", _content_hash),
    Migration(4, "parser resume state out of the manifest; parts shared by sources", _states_out),
)
SCHEMA_VERSION = MIGRATIONS[-1].version


def pending(version: int) -> list[Migration]:
    """The migrations a manifest of ``version`` still needs, oldest first."""
    return [m for m in MIGRATIONS if m.version > version]


def migrate(raw: dict[str, Any]) -> list[Migration]:
    """Apply the pending migrations to the manifest object ``raw``; -> the ones applied."""
    todo = pending(int(raw.get("schema_version", 1)))
    log = raw.get("migrations")
    log = list(log) if isinstance(log, list) else []
    for m in todo:
        m.apply(raw)
        raw["schema_version"] = m.version
        log.append({"version": m.version, "name": m.name, "at": time.strftime("%Y-%m-%dT%H:%M:%S")})
    raw["migrations"] = log
    return todo


__all__ = ["MIGRATIONS", "Migration", "SCHEMA_VERSION", "migrate", "pending"]
