"""A store transaction: parts and manifest changes that become visible together, or not at
all (parts renamed into place, then the manifest replaced atomically)."""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.errors import StoreError
from forensics.store.durable import Syncer, fsync_path
from forensics.store.manifest import MANIFEST, SHARED, Manifest, part_path

if TYPE_CHECKING:
    import polars as pl

    from forensics.store.folder import Store


STAGE_ROWS = 400_000  # staged rows per table and kind before a shared part is written
STAGE_BYTES = 4 << 20  # ... or staged bytes (polars' estimate): 400,000 lines of text are
# ~100 MB, so the bytes bound what a big log's ingest holds, the rows what small logs make.
# A big log's parts are written while its chunks are parsed, so what is staged adds to the
# parse's own peak: at 12 MB ingest's peak RSS grew 1.22x from a 40 MB to a 160 MB busy log
# (the file fits in the staging at 40 MB), at 4 MB 1.07x (docs/performance.md)
# zstd level of the parts: 1 writes the decode rows of a 100 MB log in ~0.11 s CPU against
# ~0.14 s at polars' default (3), for ~25 % larger parts (8.7 MB against 7.0 MB)
PART_ZSTD_LEVEL = 1
FLUSH_THREADS = 4  # parts written at once when a commit writes what is staged (settle)
DROP_MERGE_BYTES = 16 << 20  # drop_rows: parts under this are merged, up to this a part


class StoreReadOnly(StoreError):
    """The store cannot be written (read-only file system, permissions)."""


# errno -> (cause, fix) for a write the store cannot make; always exit 7
WRITE_ERRORS: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("no space left on the device", "free disk space, then run it again"),
    errno.EDQUOT: ("disk quota exceeded", "free space within your quota, then run it again"),
    errno.EROFS: ("read-only file system", "reads still work; write to a writable --store"),
    errno.EACCES: ("permission denied", "reads still work; write to a store you own"),
    errno.EPERM: ("operation not permitted", "reads still work; write to a store you own"),
}


def _write_error(root: Path, exc: BaseException, what: str) -> StoreError:
    """A failed store write as one line (exit 7): what, why, that nothing was changed."""
    code = getattr(exc, "errno", None)
    if code is None and "No space left" in str(exc):  # polars reports ENOSPC as text
        code = errno.ENOSPC
    cause, fix = WRITE_ERRORS.get(
        code or -1, (getattr(exc, "strerror", None) or str(exc).splitlines()[0][:200], "")
    )
    cls = StoreReadOnly if code in (errno.EROFS, errno.EACCES, errno.EPERM) else StoreError
    hint = (fix + "; " if fix else "") + "the store keeps its last commit, nothing half-written"
    return cls(f"{root}: {what} ({cause})", hint=hint)


def _base(key: str) -> str:
    """The source id of a part key (``id`` or ``id~kind``)."""
    return key.split("~", 1)[0]


def _kind(key: str) -> str:
    """The kind of a part key: "" for a log's rows, else ``~tail``, ``~runs``, ``~state``."""
    return key[key.index("~") :] if "~" in key else ""


@dataclass
class _Point:
    new: int
    drop_parts: set[tuple[str, str]]
    drop_keys: dict[tuple[str, str], set[str]]
    records: dict[str, Any]
    legacy: dict[str, Any]
    dirty: bool
    meta: dict[str, Any]


class Transaction:
    """Parts and manifest changes that become visible together, or not at all.

    Rows are added two ways: ``append`` writes a part of its own (one source, or none);
    ``stage`` holds the rows of a source key with those of the other sources of the same kind
    and writes them as one *shared* part per table and kind (at STAGE_ROWS rows, and at
    commit), listed in the manifest's ``shared`` with the keys it holds: a batch of 500 small
    logs is a dozen parts, not thousands. Dropping a key from a shared part rewrites the part
    without that source's rows at commit (every row carries its ``source_id``; a part holds
    one kind, so the source's rows are the key's)."""

    def __init__(self, store: Store, manifest: Manifest):
        self.store = store
        self.man = manifest
        self._new: list[tuple[str, str, Path]] = []  # (table, part name, tmp path)
        self._drop_parts: set[tuple[str, str]] = set()
        self._drop_keys: dict[tuple[str, str], set[str]] = {}  # shared part -> keys dropped
        self._staged: dict[tuple[str, str], list[tuple[str, pl.DataFrame]]] = {}
        self._staged_rows: dict[tuple[str, str], int] = {}
        self._staged_bytes: dict[tuple[str, str], int] = {}
        self._index: dict[str, list[tuple[str, str, str]]] | None = None  # id -> (t, part, key)
        self._read: dict[str, dict[Any, pl.DataFrame]] = {}  # shared parts read by rows_of
        self.dirty = False  # anything to commit (an unchanged-files batch writes nothing)
        # told (table, part name, rows) of every part this transaction writes, as written:
        # what the verdict step of an ingest reads of them, kept in memory (classifier.Written);
        # called from the thread that wrote the part, several at once at commit (_flush_all)
        self.on_write: Callable[[str, str, pl.DataFrame], None] | None = None
        self._sync = Syncer()  # each part fsynced as it is written (forensics/store/durable.py)
        self.committed = False  # its manifest replaced the store's (an interrupt after: kept)

    # -- adding rows ---------------------------------------------------------------------
    def append(self, table: str, df: pl.DataFrame, *, source_id: str = "") -> None:
        """Add ``df`` as a new part of ``table`` (checked against forensics/tables.py)."""
        if df.is_empty():
            return
        name = self._write(table, df, source_id or "x")
        self.man.part_source[name] = source_id
        self._indexed(table, name, [source_id] if source_id else [])

    def stage(self, table: str, df: pl.DataFrame, key: str) -> None:
        """Add the rows ``df`` of source ``key`` (``id`` or ``id~kind``; each row carries
        ``source_id`` = id) to a shared part of ``table``."""
        if df.is_empty():
            return
        group = (table, _kind(key))
        self._staged.setdefault(group, []).append((key, df))
        self._staged_rows[group] = self._staged_rows.get(group, 0) + df.height
        self._staged_bytes[group] = self._staged_bytes.get(group, 0) + df.estimated_size()
        self.dirty = True
        if self._staged_rows[group] >= STAGE_ROWS or self._staged_bytes[group] >= STAGE_BYTES:
            self._flush(group)

    def _flush(self, group: tuple[str, str]) -> None:
        items = self._take(group)
        if items:
            self._shared(group, self._write(group[0], _union(items), SHARED + group[1]), items)

    def _flush_all(self) -> None:
        """Write every staged group, FLUSH_THREADS parts at once (polars writes without the
        GIL): at commit the last part of each table is written, and the verdict step and the
        end of the ingest wait for them (issue 15). The parts are listed in the order of the
        groups, as one at a time would list them; where one fails, those written are listed
        too (for the abort to remove) and its error is raised.

        One step is this thread's own: the rows of a redacted table (forensics/tables.py: an
        ingest's runs) are checked and redacted here, once the pool has the other groups to
        write, and then written by the pool. polars compiles a regex once per thread that
        uses it (the redaction's two, ~5 ms each): compiled here, they serve this thread's
        next redaction too (the ingest's verdicts, checked here for the same commit), where a
        flush thread compiled them a second time (docs/performance.md, "The tail of one
        ingest, eleventh stop"). Not redacted as each log's rows are staged: a call costs
        ~2.2 ms of CPU with the patterns compiled (a runs row, twelfth stop), once a log."""
        taken = [(g, items) for g in list(self._staged) if (items := self._take(g))]
        if not taken:
            return
        from concurrent.futures import Future, ThreadPoolExecutor

        from forensics.tables import TABLES, conform

        def here(group: tuple[str, str]) -> bool:
            return getattr(TABLES.get(group[0]), "redact", False)

        def write(group: tuple[str, str], items: list, rows: Any) -> tuple[str, Path]:
            done = rows is not None  # checked and redacted here already
            rows = _union(items) if rows is None else rows
            return self._write_file(group[0], rows, SHARED + group[1], conformed=done)

        jobs: dict[tuple[str, str], Future] = {}
        try:
            with ThreadPoolExecutor(min(FLUSH_THREADS, len(taken)), "forensics-flush") as pool:
                for group, items in sorted(taken, key=lambda t: here(t[0])):  # the pool's first
                    rows = conform(group[0], _union(items)) if here(group) else None
                    jobs[group] = pool.submit(write, group, items, rows)
        finally:
            self.dirty = True
            for group, items in taken:  # the parts written, listed (the abort removes them)
                job = jobs.get(group)
                if job is not None and job.exception() is None:
                    name, tmp = job.result()
                    self._new.append((group[0], name, tmp))
                    self._shared(group, name, items)
        for job in jobs.values():
            if job.exception() is not None:
                raise job.exception()

    def _take(self, group: tuple[str, str]) -> list[tuple[str, pl.DataFrame]]:
        self._staged_rows.pop(group, None)
        self._staged_bytes.pop(group, None)
        return self._staged.pop(group, [])

    def _shared(self, group: tuple[str, str], name: str, items: list) -> None:
        keys = sorted({k for k, _ in items})
        self.man.shared[name] = keys
        self._indexed(group[0], name, keys)

    def _write(self, table: str, df: pl.DataFrame, prefix: str) -> str:
        name, tmp = self._write_file(table, df, prefix)
        self._new.append((table, name, tmp))
        self.dirty = True
        return name

    def _write_file(
        self, table: str, df: pl.DataFrame, prefix: str, conformed: bool = False
    ) -> tuple[str, Path]:
        """A new part of ``table`` written as ``<name>.tmp`` (its fsync started, on_write told);
        -> (name, tmp path). ``conformed``: ``df`` went through tables.conform already."""
        from forensics.tables import conform

        df = df if conformed else conform(table, df)
        tdir = self.store.root / "tables" / table
        name = f"{prefix}-g{self.man.generation + 1}-{uuid.uuid4().hex[:12]}.parquet"
        tmp = tdir / (name + ".tmp")
        try:
            tdir.mkdir(parents=True, exist_ok=True)
            df.write_parquet(
                tmp, compression="zstd", compression_level=PART_ZSTD_LEVEL, statistics=True
            )
        except Exception as exc:  # C05: disk full (polars raises its own error types too)
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise _write_error(self.store.root, exc, f"cannot write a part of {table}") from exc
        self._sync.written(tmp)
        if self.on_write is not None:
            self.on_write(table, name, df)
        return name, tmp

    # -- parts written by other processes (forensics/ingest/pool.py) ------------------------
    def write_staged(self) -> list[tuple[str, str, list[str], str]]:
        """Write what is staged, every part's fsync started (none awaited: ``staged_durable``
        waits for them); -> (table, tmp path, keys, name here) of every part written. For a
        transaction over a staging folder (``staging_store``), which is never committed: its
        parts are adopted by the transaction of the store (``adopt``) once durable. Between
        the two, an ingest worker computes its verdicts (forensics/ingest/pool.py)."""
        self._flush_all()
        self._sync.start(tmp for _, _, tmp in self._new)
        return [(t, str(tmp), self.man.shared.get(n, []), n) for t, n, tmp in self._new]

    def staged_durable(self) -> None:
        """Every part ``write_staged`` wrote on the disk (its fsync's error raised here)."""
        try:
            self._sync.files(tmp for _, _, tmp in self._new)
        finally:
            self._sync.close()

    def adopt(self, table: str, tmp: Path, keys: list[str]) -> str:
        """Make a part written elsewhere in the store's folder (``write_staged`` in a worker)
        this transaction's: renamed into ``tables/`` at commit, deleted at abort, named with
        this commit's generation like the parts it writes itself; -> its name."""
        name = f"{SHARED}{_kind(keys[0])}-g{self.man.generation + 1}-{uuid.uuid4().hex[:12]}"
        name += ".parquet"
        (self.store.root / "tables" / table).mkdir(parents=True, exist_ok=True)
        self._new.append((table, name, Path(tmp)))
        self._sync.synced(Path(tmp))  # the worker fsynced it (staged_durable)
        self.man.shared[name] = sorted(keys)
        self._indexed(table, name, keys)
        self.dirty = True
        return name

    # -- finding a source's parts ------------------------------------------------------------
    def _index_of(self, sid: str) -> list[tuple[str, str, str]]:
        """(table, part, key) of every part holding rows of source ``sid`` (built once)."""
        if self._index is None:
            self._index = {}
            parts = [(t, p) for t, ps in self.man.tables.items() for p in ps]
            for t, p in parts + [(t, p) for t, p, _ in self._new]:
                if p in self.man.shared:
                    keys = self.man.shared[p]
                else:
                    keys = [self.man.part_source[p]] if self.man.part_source.get(p) else []
                self._indexed(t, p, keys)
        return self._index.get(sid, [])

    def _indexed(self, table: str, part: str, keys: list[str]) -> None:
        if self._index is not None:
            for k in keys:
                self._index.setdefault(_base(k), []).append((table, part, k))

    def rows_of(self, table: str, key: str) -> pl.DataFrame | None:
        """The committed rows of source ``key`` in ``table`` (None when it has none); a
        shared part is read once per transaction."""
        import polars as pl

        base, frames = _base(key), []
        for t, part, k in self._index_of(base):
            if t != table or k != key or part not in self.man.tables.get(table, []):
                continue
            if part not in self._read:
                df = _read_part(self.store.root / "tables" / table / part)
                self._read[part] = df.partition_by("source_id", as_dict=True)
            hit = self._read[part].get((base,))
            if hit is not None:
                frames.append(hit)
        return pl.concat(frames, how="diagonal_relaxed") if frames else None

    # -- dropping ------------------------------------------------------------------------
    def drop_source(self, source_id: str) -> None:
        """Forget every row a source key produced: ``id`` drops the source and its ``id~*``
        companions, ``id~kind`` only that kind."""

        def hit(k: str) -> bool:
            return k == source_id or k.startswith(source_id + "~")

        for table, part, key in self._index_of(_base(source_id)):
            if not hit(key):
                continue
            if part in self.man.shared:
                self._drop_keys.setdefault((table, part), set()).add(key)
            else:
                self._drop_parts.add((table, part))
        for group, items in self._staged.items():
            kept = [(k, d) for k, d in items if not hit(k)]
            if len(kept) != len(items):
                self._staged[group] = kept
                self._staged_rows[group] = sum(d.height for _, d in kept)
                self._staged_bytes[group] = sum(d.estimated_size() for _, d in kept)
        self.man.sources.pop(source_id, None)
        if "~" not in source_id or source_id.endswith("~state"):
            self.man.legacy_states.pop(_base(source_id), None)
        self.dirty = True

    def drop_rows(self, table: str, keep: pl.Expr) -> None:
        """Keep only the rows of ``table`` matching ``keep``, a part at a time: a part that
        loses rows is rewritten, small parts are merged (up to DROP_MERGE_BYTES a part), a
        big part that keeps every row is left as it is. Memory is a part and a merge
        buffer, never the table (the verdicts of a store of 100,000 runs)."""
        import polars as pl

        from forensics.tables import TABLES, conform

        merge: list[pl.DataFrame] = []
        size = 0
        for p in list(self.man.tables.get(table, [])):
            if (table, p) in self._drop_parts:
                continue
            df = _read_part(self.store.root / "tables" / table / p)
            df = conform(table, df) if table in TABLES else df
            kept = df.filter(keep)
            small = df.estimated_size() < DROP_MERGE_BYTES
            if kept.height == df.height and not small:
                continue
            self._drop_parts.add((table, p))
            self.dirty = True
            merge.append(kept)
            size += kept.estimated_size()
            if size >= DROP_MERGE_BYTES:
                self.append(table, pl.concat(merge, how="diagonal_relaxed"))
                merge, size = [], 0
        if merge:
            self.append(table, pl.concat(merge, how="diagonal_relaxed"))

    def settle(self) -> None:
        """Before a commit (or a ``view``): the legacy resume states (migration 4) and what is
        staged are written, and shared parts that lost keys are rewritten without their rows.
        Nothing of that (a commit of source records alone: an old digest replaced, twelfth
        stop): polars is not imported (~0.15 s of CPU, an unchanged re-ingest's whole)."""
        if not (self.man.legacy_states or self._staged or self._drop_keys):
            return
        import json

        import polars as pl

        legacy, self.man.legacy_states = self.man.legacy_states, {}
        if legacy:
            states = pl.DataFrame(
                {
                    "source_id": list(legacy),
                    "state": [json.dumps(v, default=str) for v in legacy.values()],
                }
            )
            for sid in legacy:  # one frame, many keys: staged as one item per key
                self._staged.setdefault(("states", "~state"), []).append(
                    (sid + "~state", states.filter(pl.col("source_id") == sid))
                )
        self._flush_all()
        tmp_of = {name: tmp for _, name, tmp in self._new}
        for (table, part), keys in self._drop_keys.items():
            have = self.man.shared.get(part, [])
            left = [k for k in have if k not in keys]
            if left:
                path = tmp_of.get(part, self.store.root / "tables" / table / part)
                gone = sorted({_base(k) for k in keys})
                df = _read_part(path).filter(~pl.col("source_id").is_in(gone))
                name = self._write(table, df, SHARED + _kind(left[0]))
                self.man.shared[name] = left
            self._drop_parts.add((table, part))
        self._drop_keys.clear()

    # -- savepoints ----------------------------------------------------------------------
    def savepoint(self, *source_ids: str) -> _Point:
        """A point to roll back to, for work on ``source_ids`` (one file of a batch)."""
        return _Point(
            len(self._new),
            set(self._drop_parts),
            {k: set(v) for k, v in self._drop_keys.items()},
            {sid: self.man.sources.get(sid) for sid in source_ids},
            {sid: self.man.legacy_states.get(sid) for sid in source_ids},
            self.dirty,
            dict(self.man.meta),
        )

    def rollback(self, point: _Point) -> None:
        """Undo what was done for the point's sources since ``savepoint``: their parts are
        removed, their rows leave the staged rows and the shared parts written since; the
        meta is the point's (an ingest's verdicts, undone: its pending-verdicts marker)."""
        shared_since = []
        for table, name, tmp in self._new[point.new :]:
            if name in self.man.shared:  # holds the rows of files before this one too
                shared_since.append((table, name, tmp))
                continue
            with contextlib.suppress(OSError):
                tmp.unlink()
            self.man.part_source.pop(name, None)
        self._new[point.new :] = shared_since
        self._drop_parts, self._drop_keys = point.drop_parts, point.drop_keys
        for sid, rec in point.records.items():
            if rec is None:
                self.man.sources.pop(sid, None)
            else:
                self.man.sources[sid] = rec
            if point.legacy.get(sid) is not None:
                self.man.legacy_states[sid] = point.legacy[sid]
            for group, items in self._staged.items():
                self._staged[group] = [(k, d) for k, d in items if _base(k) != sid]
                self._staged_rows[group] = sum(d.height for _, d in self._staged[group])
                self._staged_bytes[group] = sum(d.estimated_size() for _, d in self._staged[group])
            for table, name, _ in shared_since:
                mine = {k for k in self.man.shared[name] if _base(k) == sid}
                if mine:
                    self._drop_keys.setdefault((table, name), set()).update(mine)
        self.man.meta = dict(point.meta)
        self._index = None  # rebuilt on the next use
        self.dirty = point.dirty or bool(shared_since)

    def set_source(self, source_id: str, record: dict[str, Any]) -> None:
        if isinstance(record.get("path"), str):  # a secret in a file's name is not stored
            from forensics_parsers.secrets import redact

            record = {**record, "path": redact(record["path"])}
        self.man.sources[source_id] = record
        self.dirty = True

    def set_digest(self, source_id: str, digest: str) -> None:
        """A stored source's content hash replaced by ``digest``, of the same bytes in another
        algorithm (an older store's sha1 by xxh3_128); the rest of its record as it is."""
        self.man.sources[source_id] = {**self.man.sources[source_id], "content_hash": digest}
        self.dirty = True

    def set_meta(self, key: str, value: Any) -> None:
        self.man.meta[key] = value
        self.dirty = True

    # -- reading what it will commit ------------------------------------------------------
    def view(self) -> Store:
        """The store as this transaction would commit it now, to read before the commit (an
        ingest's verdicts, stored in its own commit): ``settle`` first, staged rows are in no
        part yet. Read-only (forensics/store/view.py)."""
        from forensics.store.view import TransactionView

        return TransactionView(self)

    def planned(self) -> tuple[Manifest, dict[tuple[str, str], Path]]:
        """The manifest ``commit`` would write now (a copy: its parts listed as commit lists
        them, the rest shared with this transaction's) and the file of each part it adds, at
        its temporary name until then."""
        import copy

        man = copy.copy(self.man)
        tables = {t: list(ps) for t, ps in self.man.tables.items()}
        for table, name, _ in self._new:
            tables.setdefault(table, []).append(name)
        man.tables = {
            t: [p for p in ps if (t, p) not in self._drop_parts] for t, ps in tables.items()
        }
        return man, {(t, n): tmp for t, n, tmp in self._new}

    # -- ending --------------------------------------------------------------------------
    def abort(self) -> None:
        self._sync.close()  # the fsyncs in flight end first: the files go below
        for table, name, tmp in self._new:
            for f in (tmp, self._final(table, name)):
                with contextlib.suppress(OSError):
                    f.unlink()
            self.man.part_source.pop(name, None)
            self.man.shared.pop(name, None)
        self._new.clear()
        self._staged.clear()
        self._staged_rows.clear()
        self._staged_bytes.clear()

    def _final(self, table: str, name: str) -> Path:
        return self.store.root / "tables" / table / name

    def commit(self) -> None:
        if self.man.legacy_states:
            self.dirty = True  # migration 4 moves them out of the manifest at this write
        if not self.dirty and not self._new and not self._drop_parts:
            return  # nothing changed: the manifest stays as it is (a read-only store too)
        try:
            self.store.check_still_here()
            self.settle()
        except BaseException:
            self.abort()  # a part it could not write (full disk): none of this commit stays
            raise
        root = self.store.root
        tmp_man = root / (MANIFEST + ".tmp")
        try:
            # a part's bytes reach the disk before a manifest lists it (a power cut: never a
            # short part); most were fsynced as they were written (forensics/store/durable.py)
            self._sync.files(tmp for _, _, tmp in self._new)
            for table, name, tmp in self._new:
                os.replace(tmp, self._final(table, name))
                self.man.tables.setdefault(table, []).append(name)
            # and their new names
            self._sync.folders(sorted({self._final(t, n).parent for t, n, _ in self._new}))
            for table, p in self._drop_parts:
                listed = self.man.tables.get(table, [])
                if p in listed:
                    listed.remove(p)
                    self.man.trash.append(f"{table}/{p}")
                self.man.part_source.pop(p, None)
                self.man.shared.pop(p, None)
            self.man.generation += 1
            _write_durably(tmp_man, self.man.to_json().encode())
            os.replace(tmp_man, root / MANIFEST)
            self.committed = True
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp_man.unlink()
            self.abort()  # the renamed parts too: the old manifest never listed them
            raise _write_error(root, exc, "cannot commit to the store") from exc
        finally:
            self._sync.close()
        with contextlib.suppress(OSError):  # the manifest is replaced: make it durable
            fsync_path(root, os.O_RDONLY)
        self._new.clear()
        self.store._gc(self.man)


def _read_part(path: Path) -> pl.DataFrame:
    """A part read inside a write: a bad one stops the write, changing nothing."""
    import polars as pl

    try:
        return pl.read_parquet(part_path(path))
    except Exception as exc:  # noqa: BLE001 - corrupt or missing: a store error, exit 7
        raise StoreError(
            f"{path}: corrupt or missing store part ({str(exc).splitlines()[0][:200]})",
            hint="run `forensics runs` to quarantine it, then retry",
        ) from exc


def _union(items: list[tuple[str, pl.DataFrame]]) -> pl.DataFrame:
    """The staged frames of a group as one frame (their columns united)."""
    import polars as pl

    return pl.concat([d for _, d in items], how="diagonal_relaxed")


def _write_durably(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
