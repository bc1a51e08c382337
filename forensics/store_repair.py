"""``forensics store check`` and ``forensics store repair``: a damaged store, found and mended.

check  reads the manifest as it is (damaged or not) and the folder, and reports: the parts
       listed vs on disk, listed parts missing or unreadable, orphans (unlisted parts a writer
       cannot account for), symlinks, manifest entries outside the store, temporary files,
       pending migrations. It never writes.
repair takes the store lock and
       * with a usable manifest: unlists missing parts and entries outside the store, and sets
         aside (renames, never deletes) unreadable parts, symlinked parts and orphans;
       * with a missing, incomplete or unreadable manifest: moves it aside and rebuilds one
         from the parts: every readable part of every table is kept (labels, benchmarks,
         launches too), each log's source is rebuilt from its ``runs`` part and marked for a
         full re-read, so the next ``forensics ingest`` of the log rebuilds its rows.
       Set-aside files are ``<name>.<reason>-<timestamp>`` beside where they were, recorded
       under the manifest's ``meta.quarantined``.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forensics.errors import StoreError
from forensics.migrations import pending
from forensics.store import (
    MANIFEST,
    PART_NAME,
    PART_SUFFIX,
    QUARANTINE_KEY,
    SHARED,
    Manifest,
    Store,
    Transaction,
    _crashed_part,
    safe_part_name,
)
from forensics.store.manifest import _read_manifest, part_path

# what check can find -> (is it damage?, what repair does about it)
FINDINGS: dict[str, tuple[bool, str]] = {
    "manifest_unreadable": (True, "moved aside; a manifest is rebuilt from the parts"),
    "manifest_missing": (True, "a manifest is rebuilt from the parts"),
    "manifest_incomplete": (True, "moved aside; a manifest is rebuilt from the parts"),
    "listed_missing": (True, "unlisted (re-ingest the log to restore its rows)"),
    "outside_store": (True, "unlisted (the entry points outside its table folder)"),
    "unreadable": (True, "set aside as <part>.corrupt-<ts>; its log is re-read next ingest"),
    "symlink": (True, "the link is set aside as <part>.symlink-<ts>; its target is untouched"),
    "orphan": (False, "set aside as <part>.orphan-<ts> (kept, not served)"),
    "tmp": (False, "removed by the next write (a part being written when a writer died)"),
    "pending_migration": (False, "applied and recorded by the next write"),
}


@dataclass
class CheckReport:
    root: str
    schema_version: int | None = None
    listed: int = 0
    on_disk: int = 0
    findings: dict[str, list[str]] = field(default_factory=dict)
    actions: list[str] = field(default_factory=list)

    def add(self, kind: str, what: str) -> None:
        self.findings.setdefault(kind, []).append(what)

    @property
    def damaged(self) -> bool:
        return any(FINDINGS[k][0] for k in self.findings)

    def as_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "ok": not self.damaged,
            "schema_version": self.schema_version,
            "parts_listed": self.listed,
            "parts_on_disk": self.on_disk,
            "findings": {
                k: {"count": len(v), "items": v[:50], "repair": FINDINGS[k][1]}
                for k, v in self.findings.items()
            },
            "actions": self.actions,
        }


def _load(store: Store, rep: CheckReport) -> Manifest | None:
    path = store.manifest_path
    if not path.exists():
        if store.parts_on_disk():
            rep.add("manifest_missing", str(path))
        return None
    try:
        man = Manifest.load(path)
    except StoreError as exc:
        rep.add("manifest_unreadable", exc.message)
        return None
    rep.schema_version = man.schema_version
    if not man.complete:
        if store.parts_on_disk():
            rep.add("manifest_incomplete", f"{path}: no tables/generation")
        return None
    for m in man.migrated:
        rep.add("pending_migration", m)
    return man


def check(store: Store) -> CheckReport:
    """What is wrong with the store, without changing it."""
    import polars as pl

    rep = CheckReport(root=str(store.root))
    man = _load(store, rep)
    tables_dir = store.root / "tables"
    disk = store.parts_on_disk()
    rep.on_disk = len(disk)
    listed: set[tuple[str, str]] = set()
    if man is not None:
        for t, parts in man.tables.items():
            for p in parts:
                rep.listed += 1
                if not safe_part_name(p) or not safe_part_name(t + PART_SUFFIX):
                    rep.add("outside_store", f"{t}/{p}")
                    continue
                listed.add((t, p))
                f = tables_dir / t / p
                if f.is_symlink():
                    rep.add("symlink", str(f))
                elif not f.exists():
                    rep.add("listed_missing", str(f))
                else:
                    try:
                        pl.read_parquet_schema(part_path(f))  # a FIFO would block the read
                    except Exception as exc:  # noqa: BLE001 - any unreadable part is a finding
                        rep.add("unreadable", f"{f} ({str(exc).splitlines()[0][:120]})")
    if tables_dir.is_symlink():
        rep.add("symlink", str(tables_dir))
    with contextlib.suppress(OSError):
        for tdir in sorted(tables_dir.iterdir()):
            if tdir.is_symlink():
                rep.add("symlink", str(tdir))
    for f in disk:
        key = (f.parent.name, f.name)
        if key in listed:
            continue
        if f.is_symlink() or f.parent.is_symlink():
            rep.add("symlink", str(f))
        elif man is not None and not _crashed_part(f.name, man.generation):
            if f"{key[0]}/{key[1]}" not in man.trash:
                rep.add("orphan", str(f))
    with contextlib.suppress(OSError):
        for f in tables_dir.glob(f"*/*{PART_SUFFIX}.tmp"):
            rep.add("tmp", str(f))
    return rep


def _set_aside(f: Path, reason: str, stamp: str) -> str:
    dest = f.with_name(f"{f.name}.{reason}-{stamp}")
    os.rename(f, dest)  # a symlink is renamed itself, its target untouched
    return dest.name


def repair(store: Store, *, lock_timeout: float | None = None) -> CheckReport:
    """Mend what ``check`` finds (see the module docstring); -> the report, with actions."""
    rep = check(store)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    with store.lock(lock_timeout):
        rebuild = any(k.startswith("manifest_") for k in rep.findings)
        man = _rebuild(store, rep, stamp) if rebuild else Manifest.load(store.manifest_path)
        log = man.meta.get(QUARANTINE_KEY)
        log = list(log) if isinstance(log, list) else []

        def aside(table: str, f: Path, reason: str, why: str) -> None:
            dest = _set_aside(f, reason, stamp)
            _unlist(man, table, f.name)
            log.append({"table": table, "part": f.name, "renamed_to": dest, "error": why,
                        "source": None, "at": stamp})  # fmt: skip
            rep.actions.append(f"{f}: set aside as {dest} ({why})")

        if not rebuild:
            for t, p in [(t, p) for t, parts in man.tables.items() for p in parts]:
                f = store.root / "tables" / t / p
                if not safe_part_name(p) or not safe_part_name(t + PART_SUFFIX):
                    _unlist(man, t, p)
                    rep.actions.append(f"{t}/{p}: unlisted (outside its table folder)")
                elif f.is_symlink():
                    aside(t, f, "symlink", "a symlink")
                elif not f.exists():
                    _unlist(man, t, p)
                    rep.actions.append(f"{f}: unlisted (missing)")
            for kind, reason in (("unreadable", "corrupt"), ("orphan", "orphan")):
                for item in rep.findings.get(kind, []):
                    f = Path(item.split(" (", 1)[0])
                    if f.exists() or f.is_symlink():
                        aside(f.parent.name, f, reason, kind)
        for item in rep.findings.get("symlink", []):
            f = Path(item)
            if f.is_symlink() and f.parent.parent == store.root / "tables":
                aside(f.parent.name, f, "symlink", "a symlink")
            elif f.is_symlink() and f.parent == store.root / "tables":  # a table folder
                dest = _set_aside(f, "symlink", stamp)
                for p in list(man.tables.get(f.name, [])):
                    _unlist(man, f.name, p)
                rep.actions.append(f"{f}: a symlinked table folder, set aside as {dest}")
        man.meta[QUARANTINE_KEY] = log
        tx = Transaction(store, man)
        tx.dirty = bool(rep.actions) or bool(man.migrated) or rebuild
        tx.commit()
    return rep


def _unlist(man: Manifest, table: str, part: str) -> None:
    man.unlist(table, part)  # its logs are read again in full by the next ingest


def _shared_keys(f: Path, kind: str, runs: dict[str, dict[str, Any]]) -> list[str]:
    """The keys of a shared part (its sources' ids and its kind); a shared runs part also
    gives each source's path and host (into ``runs``)."""
    import polars as pl

    if kind == "~runs":
        df = pl.read_parquet(f, columns=["source_id", "path", "host_name"])
        for row in df.unique("source_id", keep="last").iter_rows(named=True):
            runs[row["source_id"]] = row
        ids = df["source_id"].unique().to_list()
    else:
        ids = pl.read_parquet(f, columns=["source_id"])["source_id"].unique().to_list()
    return sorted(str(i) + kind for i in ids if i)


def _rebuilt_source(row: dict[str, Any], stamp: str) -> dict[str, Any]:
    """The record of a log source rebuilt from its runs rows: read in full by its next ingest."""
    return {
        "path": row.get("path"),
        "host": row.get("host_name") or "local",
        "size": None,
        "mtime": None,
        "head_hash": None,
        "head_hash_full": None,
        "content_hash": None,
        "resume": False,
        "offset": 0,
        "runs": None,
        "repaired_at": stamp,
    }


def _rebuild(store: Store, rep: CheckReport, stamp: str) -> Manifest:
    """A manifest from the parts on disk; the damaged one is moved aside first."""
    import polars as pl

    from forensics.migrations import MIGRATIONS
    from forensics.tables import TABLES

    path = store.manifest_path
    old_manifest = path.with_name(f"{MANIFEST}.damaged-{stamp}")
    if path.exists():
        os.rename(path, old_manifest)
        rep.actions.append(f"{path}: moved aside as {old_manifest.name}")
    man = Manifest(complete=True)
    man.migrations = [
        {"version": m.version, "name": m.name, "at": stamp, "by": "store repair"}
        for m in MIGRATIONS
    ]
    max_gen = 0
    runs_parts: dict[str, tuple[tuple[int, int], Path]] = {}  # source id -> newest runs part
    shared_runs: dict[str, dict[str, Any]] = {}  # source id -> path, host of shared runs rows
    for f in store.parts_on_disk():
        table = f.parent.name
        if f.is_symlink() or not safe_part_name(f.name):
            continue  # set aside by the caller (symlink finding)
        try:
            pl.read_parquet_schema(f)
        except Exception as exc:  # noqa: BLE001
            dest = _set_aside(f, "corrupt", stamp)
            rep.actions.append(f"{f}: unreadable ({str(exc)[:80]}); set aside as {dest}")
            continue
        m = PART_NAME.match(f.name)
        sid = m["sid"] if m and m["sid"] != "x" else ""
        gen = int(m["gen"]) if m and m["gen"] else 0
        max_gen = max(max_gen, gen)
        if sid.startswith(SHARED):  # the rows of several logs: its keys from its rows
            man.tables.setdefault(table, []).append(f.name)
            man.shared[f.name] = _shared_keys(f, sid[len(SHARED) :], shared_runs)
            continue
        if table == "runs" and sid.endswith("~runs"):
            base = sid[: -len("~runs")]
            old = runs_parts.get(base)
            order = (gen, f.stat().st_mtime_ns)
            if old is not None and old[0] >= order:
                dest = _set_aside(f, "orphan", stamp)
                rep.actions.append(f"{f}: an older runs part of its log; set aside as {dest}")
                continue
            if old is not None:
                dest = _set_aside(old[1], "orphan", stamp)
                _unlist(man, "runs", old[1].name)
                rep.actions.append(f"{old[1]}: an older runs part of its log; set aside as {dest}")
            runs_parts[base] = (order, f)
        man.tables.setdefault(table, []).append(f.name)
        man.part_source[f.name] = sid
        if table not in TABLES:
            rep.actions.append(f"{f}: kept in table {table!r} (not a declared table)")
    for base, (_, f) in runs_parts.items():
        df = pl.read_parquet(f, columns=["path", "host_name"]).head(1)
        shared_runs[base] = df.row(0, named=True) if df.height else {}
    man.sources = {base: _rebuilt_source(row, stamp) for base, row in shared_runs.items()}
    man.generation = max_gen + 1
    n = sum(len(v) for v in man.tables.values())
    rep.actions.append(
        f"rebuilt {MANIFEST}: {n} part(s) in {len(man.tables)} table(s), {len(man.sources)} "
        "log source(s) (re-ingest them to refresh their rows); meta such as the baseline "
        "was in the old manifest: set it again with forensics baseline"
    )
    with contextlib.suppress(OSError, ValueError):  # keep the old meta if it still parses
        old = json.loads(_read_manifest(old_manifest))  # bounded: it may be /dev/zero
        if isinstance(old, dict) and isinstance(old.get("meta"), dict):
            man.meta.update(old["meta"])
            rep.actions[-1] = rep.actions[-1].split("; meta")[0] + "; meta kept"
    return man


__all__ = ["FINDINGS", "CheckReport", "check", "repair", "pending"]
