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

import contextlib
import errno
import fcntl
import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.errors import StoreError, StoreLocked
from forensics.migrations import SCHEMA_VERSION, migrate

if TYPE_CHECKING:  # polars is imported where tables are read, not to check a manifest
    import polars as pl

MANIFEST = "manifest.json"
LOCK = "store.lock"
DEFAULT_LOCK_TIMEOUT = 30.0
QUARANTINE_LOCK_TIMEOUT = 5.0  # a reader waits this long to quarantine a corrupt part (C03)
QUARANTINE_KEY = "quarantined"  # meta: the parts set aside, newest last
CORRUPT_MARK = ".corrupt-"  # a quarantined part: <part>.corrupt-<timestamp>, never collected
PART_SUFFIX = ".parquet"
# <source id or x>-g<generation>-<12 hex>.parquet; parts of v1 stores have no -g<N>
PART_NAME = re.compile(r"^(?P<sid>.+?)(?:-g(?P<gen>\d+))?-(?P<uid>[0-9a-f]{12})\.parquet$")
REPAIR_HINT = "forensics store check, then forensics store repair to rebuild it from the parts"


class StoreDamaged(StoreError):
    """The store has parts but no usable manifest: refuse to read or write it."""


class StoreReadOnly(StoreError):
    """The store cannot be written (read-only file system, permissions)."""


def safe_part_name(name: str) -> bool:
    """A manifest entry names a file inside its table folder: no '/', no '..', not absolute."""
    return (
        bool(name)
        and "/" not in name
        and "\\" not in name
        and name not in (".", "..")
        and "\x00" not in name
        and name.endswith(PART_SUFFIX)
    )


def default_root() -> Path:
    """The store's folder when none is given: forensics.home (--store, $FORENSICS_HOME,
    ./.forensics)."""
    from forensics.home import home

    return home()


@dataclass
class Manifest:
    schema_version: int = SCHEMA_VERSION
    # table name -> list of part file names (relative to tables/<table>/)
    tables: dict[str, list[str]] = field(default_factory=dict)
    # part file name -> source id that produced it ("" for parts not tied to a source)
    part_source: dict[str, str] = field(default_factory=dict)
    # source id -> source record (path, host, size, mtime, offset, parser state, ...)
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    generation: int = 0
    # the migrations applied to this store (forensics/migrations.py), oldest first
    migrations: list[dict[str, Any]] = field(default_factory=list)
    # "<table>/<part>" dropped by a committed transaction, deleted after its commit
    trash: list[str] = field(default_factory=list)
    # False for a missing manifest or one without tables/generation (damaged if parts exist)
    complete: bool = True
    # names of migrations applied in memory at load, not yet committed
    migrated: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> Manifest:
        hint = REPAIR_HINT
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            return cls(complete=False)
        except (OSError, ValueError) as exc:
            raise StoreDamaged(f"{path}: unreadable store manifest ({exc})", hint=hint) from exc
        if not isinstance(raw, dict):
            raise StoreDamaged(
                f"{path}: unreadable store manifest (a JSON {type(raw).__name__}, not an object)",
                hint=hint,
            )
        version = raw.get("schema_version", 1)
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise StoreDamaged(
                f"{path}: damaged store manifest (schema_version {version!r})", hint=hint
            )
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{path}: store schema version {version}, this forensics reads up to "
                f"{SCHEMA_VERSION} (written by a newer forensics)",
                hint="use a matching forensics version or a new --store",
            )
        complete = "tables" in raw and "generation" in raw
        try:
            applied = migrate(raw)
            tables = raw.get("tables", {})
            man = cls(
                schema_version=int(raw["schema_version"]),
                tables={str(k): [str(p) for p in v] for k, v in tables.items()},
                part_source=dict(raw.get("part_source", {})),
                sources=dict(raw.get("sources", {})),
                meta=dict(raw.get("meta", {})),
                generation=int(raw.get("generation", 0)),
                migrations=[dict(m) for m in raw.get("migrations", [])],
                trash=[str(t) for t in raw.get("trash", [])],
                complete=complete,
                migrated=[m.name for m in applied],
            )
        except (AttributeError, TypeError, ValueError) as exc:  # C09: a damaged manifest
            raise StoreDamaged(
                f"{path}: damaged store manifest ({type(exc).__name__}: {exc})", hint=hint
            ) from exc
        return man

    def unsafe_parts(self) -> list[tuple[str, str]]:
        """(table, entry) the manifest lists that would point outside their table folder."""
        return [
            (t, p)
            for t, parts in self.tables.items()
            for p in parts
            if not safe_part_name(p) or not safe_part_name(t + PART_SUFFIX)
        ]

    def to_json(self) -> str:
        return json.dumps(
            {
                "schema_version": self.schema_version,
                "generation": self.generation,
                "tables": self.tables,
                "part_source": self.part_source,
                "sources": self.sources,
                "meta": self.meta,
                "migrations": self.migrations,
                "trash": self.trash,
            },
            indent=1,
            sort_keys=True,
            default=str,
        )


def _check_owner(root: Path) -> None:
    """Refuse a store folder others could write into (bad-inputs §3.6): another user could
    plant parts or a manifest there. It must be ours and not group- or world-writable."""
    st = root.stat()
    if st.st_uid != os.geteuid():
        raise StoreError(
            f"{root}: store folder belongs to uid {st.st_uid}, not to you",
            hint="pass --store DIR with a folder of your own",
        )
    if st.st_mode & 0o022:
        raise StoreError(
            f"{root}: store folder is writable by others (mode {st.st_mode & 0o777:o})",
            hint=f"chmod go-w {root}, or pass --store DIR",
        )


class Store:
    """A forensics store rooted at a folder."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._cache: dict[str, pl.DataFrame] = {}
        self._cache_gen = -1
        self._lock_depth = 0  # > 0 while this process holds the store lock
        # the last manifest read, and the (inode, mtime, size) of the file it was read from
        self._man: Manifest | None = None
        self._man_key: tuple[int, int, int] | None = None
        # What a read had to set aside (C03); the CLI prints these as warnings.
        self.warnings: list[str] = []

    # -- opening -----------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike | None = None, *, create: bool = True) -> Store:
        root = Path(path).expanduser() if path else default_root()
        if root.exists() and not root.is_dir():
            raise StoreError(f"{root}: store path is a file, not a folder", hint="pass --store DIR")
        if not root.exists():
            if not create:
                return cls(root)
            try:
                root.mkdir(parents=True, mode=0o700)
            except OSError as exc:
                raise StoreError(
                    f"{root}: cannot create the store ({exc.strerror})",
                    hint="pass --store DIR or set FORENSICS_HOME to a writable folder",
                ) from exc
        _check_owner(root)
        return cls(root)

    @property
    def manifest_path(self) -> Path:
        return self.root / MANIFEST

    def manifest(self) -> Manifest:
        """The committed manifest (migrated in memory); a damaged store raises StoreDamaged.

        Readers ask for it once per table read; it is parsed again only when the file changed
        (a commit replaces it: a new inode). Inside a transaction (lock held) it is always read
        afresh and never cached: the transaction edits it."""
        path = self.manifest_path
        try:
            st = os.stat(path)
            key: tuple[int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            key = None
        if self._lock_depth == 0 and key is not None and key == self._man_key:
            assert self._man is not None
            return self._man
        man = Manifest.load(path)
        if not man.complete:
            n = len(self.parts_on_disk())
            if n:
                what = "missing" if not path.exists() else "incomplete"
                raise StoreDamaged(
                    f"{self.root}: damaged store: {MANIFEST} is {what} but tables/ holds "
                    f"{n} part(s); nothing was read or written",
                    hint=REPAIR_HINT,
                )
        bad = man.unsafe_parts()
        if bad:
            t, p = bad[0]
            raise StoreDamaged(
                f"{path}: lists a part outside its table folder ({t}/{p})", hint=REPAIR_HINT
            )
        if self._lock_depth == 0 and key is not None:
            self._man, self._man_key = man, key
        return man

    def parts_on_disk(self) -> list[Path]:
        """Every tables/<table>/*.parquet file (listed or not; not *.tmp, not set aside)."""
        tables_dir = self.root / "tables"
        out: list[Path] = []
        try:
            tdirs = sorted(tables_dir.iterdir())
        except OSError:
            return out
        for tdir in tdirs:
            if tdir.is_symlink() or not tdir.is_dir():
                continue
            with contextlib.suppress(OSError):
                out.extend(f for f in sorted(tdir.iterdir()) if f.name.endswith(PART_SUFFIX))
        return out

    def writable(self) -> bool:
        """Can this process write the store (a read-only mount or folder says no)?"""
        return os.access(self.root, os.W_OK | os.X_OK)

    # -- reading -----------------------------------------------------------------------
    def table(self, name: str) -> pl.DataFrame:
        """All committed rows of a table (an empty frame when it has none)."""
        import polars as pl

        man = self.manifest()
        if man.generation != self._cache_gen:
            self._cache.clear()
            self._cache_gen = man.generation
        if name in self._cache:
            return self._cache[name]
        tdir = self.root / "tables" / name
        if man.tables.get(name) and (tdir.is_symlink() or tdir.parent.is_symlink()):
            raise StoreDamaged(
                f"{tdir}: the table folder is a symlink (refused: it could point anywhere)",
                hint=REPAIR_HINT,
            )
        parts = [tdir / p for p in man.tables.get(name, [])]
        frames = []
        for p in parts:
            try:
                if p.is_symlink():
                    raise StoreError(f"{p}: the part is a symlink (refused)")
                frames.append(pl.read_parquet(p))
            except FileNotFoundError as exc:
                if self._lock_depth:
                    raise StoreError(
                        f"{p}: a part listed in the manifest is missing",
                        hint="run `forensics runs` to set it aside, then retry",
                    ) from exc
                self._quarantine(name, p.name, exc, missing=True)
            except Exception as exc:  # corrupt part (C03), or a symlink
                if self._lock_depth:  # inside a write: change nothing, stop
                    raise StoreError(
                        f"{p}: corrupt store part ({exc})",
                        hint="run `forensics runs` to quarantine it, then retry",
                    ) from exc
                self._quarantine(name, p.name, exc)
        df = pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()
        self._cache[name] = df
        return df

    def _quarantine(
        self, table: str, part: str, exc: BaseException, *, missing: bool = False
    ) -> None:
        """C03: rename a corrupt part to ``<part>.corrupt-<ts>`` and unlist it; keep the rest.

        Its source is marked for a full re-read, so the next ``ingest`` of that file rebuilds
        every record of it (no loss while the log exists, no duplicates). Nothing is deleted.
        """
        src = self.root / "tables" / table / part
        dest = src.with_name(f"{part}{CORRUPT_MARK}{time.strftime('%Y%m%dT%H%M%S')}")
        cause = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        if missing:
            cause = "the file is missing"
        renamed = False
        source_path = None
        if not self.writable():  # a read never writes a read-only store: leave it out, say so
            self.warnings.append(
                f"{src}: bad store part ({cause}); not shown (the store is read-only, so it "
                "was not quarantined; forensics store repair on a writable copy sets it aside)"
            )
            return
        try:
            with self.transaction(QUARANTINE_LOCK_TIMEOUT) as tx:
                if part not in tx.man.tables.get(table, []):
                    return  # another process quarantined it already
                if not missing:
                    os.replace(src, dest)
                    renamed = True
                tx.man.tables[table].remove(part)
                sid = tx.man.part_source.pop(part, "") or ""
                base = sid.split("~", 1)[0]
                rec = tx.man.sources.get(base) if base else None
                if rec is not None:
                    source_path = rec.get("path")
                    # not "unchanged", not "grown": the next ingest re-reads it from byte 0
                    tx.man.sources[base] = {
                        **rec,
                        "head_hash_full": None,
                        "content_hash": None,
                        "state": None,
                    }
                log = tx.man.meta.get(QUARANTINE_KEY)
                log = list(log) if isinstance(log, list) else []
                log.append(
                    {
                        "table": table,
                        "part": part,
                        "renamed_to": None if missing else dest.name,
                        "source": source_path,
                        "error": cause,
                        "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                    }
                )
                tx.man.meta[QUARANTINE_KEY] = log
                tx.dirty = True
        except StoreLocked:
            self.warnings.append(
                f"{src}: bad store part ({cause}); not shown (the store is busy, so it was "
                "not quarantined yet; run the command again)"
            )
            return
        except StoreError as exc:  # cannot write after all (full disk, read-only)
            self.warnings.append(f"{src}: bad store part ({cause}); not shown ({exc.message})")
            return
        except BaseException:
            if renamed:
                with contextlib.suppress(OSError):
                    os.replace(dest, src)
            raise
        fix = (
            f"forensics ingest {source_path} restores its records"
            if source_path
            else "its rows are left out"
        )
        what = "unlisted" if missing else f"quarantined as {dest.name}"
        self.warnings.append(f"{src}: bad store part ({cause}); {what}; {fix}")

    def sources(self) -> dict[str, dict[str, Any]]:
        return self.manifest().sources

    def get_meta(self, key: str, default: Any = None) -> Any:
        return self.manifest().meta.get(key, default)

    def set_meta(self, key: str, value: Any) -> None:
        with self.transaction() as tx:
            tx.set_meta(key, value)

    # -- writing -----------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, timeout: float | None = None) -> Iterator[None]:
        timeout = DEFAULT_LOCK_TIMEOUT if timeout is None else timeout
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.root / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise _write_error(self.root, exc, "cannot write to the store") from exc
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
                        raise StoreLocked(
                            f"{self.root}: store is locked by another forensics process"
                            + (f" (pid {holder})" if holder else ""),
                            hint="wait for it to finish, or pass --store DIR",
                        ) from None
                    time.sleep(0.05)
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)

    @contextlib.contextmanager
    def transaction(self, lock_timeout: float | None = None) -> Iterator[Transaction]:
        with self.lock(lock_timeout):
            man = self.manifest()
            tx = Transaction(self, man)
            try:
                yield tx
            except BaseException:
                tx.abort()
                raise
            tx.commit()

    def _gc(self, man: Manifest) -> None:
        """Remove what a writer can account for, nothing else (never a part it cannot read).

        * parts in ``man.trash``: dropped by a committed transaction;
        * unlisted parts named with a generation above ``man.generation``: their commit
          never happened (a crash between renaming them and replacing the manifest);
        * ``*.parquet.tmp``: a part being written when a writer died (we hold the lock).

        Any other unlisted file is an orphan: kept, reported by ``forensics store check``.
        """
        tables_dir = self.root / "tables"
        for entry in list(man.trash):
            table, _, part = entry.partition("/")
            if safe_part_name(part) and part not in man.tables.get(table, []):
                with contextlib.suppress(FileNotFoundError):
                    (tables_dir / table / part).unlink()
            man.trash.remove(entry)  # committed with the next manifest
        try:
            tdirs = list(tables_dir.iterdir())
        except OSError:
            return
        for tdir in tdirs:
            if tdir.is_symlink() or not tdir.is_dir():
                continue
            listed = set(man.tables.get(tdir.name, []))
            with contextlib.suppress(OSError):
                for f in tdir.iterdir():
                    if f.name in listed:
                        continue
                    # this commit's own parts are listed: any other of its generation or above
                    # was renamed into place by a commit that crashed before its manifest
                    crashed = _crashed_part(f.name, man.generation - 1)
                    if f.name.endswith(PART_SUFFIX + ".tmp") or crashed:
                        with contextlib.suppress(OSError):
                            f.unlink()


def _crashed_part(name: str, generation: int) -> bool:
    """A part named for a generation above the committed ``generation``: its commit crashed."""
    m = PART_NAME.match(name)
    return bool(m and m["gen"] is not None and int(m["gen"]) > generation)


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


class Transaction:
    """Parts and manifest changes that become visible together, or not at all."""

    def __init__(self, store: Store, manifest: Manifest):
        self.store = store
        self.man = manifest
        self._new: list[tuple[str, str, Path]] = []  # (table, part name, tmp path)
        self._drop_parts: set[tuple[str, str]] = set()
        self.dirty = False  # anything to commit (an unchanged-files batch writes nothing)

    def append(self, table: str, df: pl.DataFrame, *, source_id: str = "") -> None:
        """Add ``df`` as a new part of ``table`` (checked against forensics/tables.py)."""
        from forensics.tables import conform

        if df.is_empty():
            return
        df = conform(table, df)
        tdir = self.store.root / "tables" / table
        name = f"{source_id or 'x'}-g{self.man.generation + 1}-{uuid.uuid4().hex[:12]}.parquet"
        tmp = tdir / (name + ".tmp")
        try:
            tdir.mkdir(parents=True, exist_ok=True)
            df.write_parquet(tmp, compression="zstd", statistics=True)
        except Exception as exc:  # C05: disk full (polars raises its own error types too)
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise _write_error(self.store.root, exc, f"cannot write a part of {table}") from exc
        self._new.append((table, name, tmp))
        self.man.part_source[name] = source_id
        self.dirty = True

    def savepoint(self, *source_ids: str) -> tuple[Any, ...]:
        """A point to roll back to, for work on ``source_ids`` (one file of a batch)."""
        recs = {sid: self.man.sources.get(sid) for sid in source_ids}
        return (len(self._new), set(self._drop_parts), recs, self.dirty)

    def rollback(self, point: tuple[Any, ...]) -> None:
        """Undo what was done since ``savepoint`` (its new parts are removed)."""
        n, drops, recs, dirty = point
        for _, name, tmp in self._new[n:]:
            with contextlib.suppress(OSError):
                tmp.unlink()
            self.man.part_source.pop(name, None)
        del self._new[n:]
        self._drop_parts = drops
        for sid, rec in recs.items():
            if rec is None:
                self.man.sources.pop(sid, None)
            else:
                self.man.sources[sid] = rec
        self.dirty = dirty

    def drop_source(self, source_id: str) -> None:
        """Forget every part a source produced, and its ``<id>~*`` companions."""
        for table, parts in self.man.tables.items():
            for p in parts:
                ps = self.man.part_source.get(p, "")
                if ps == source_id or ps.startswith(source_id + "~"):
                    self._drop_parts.add((table, p))
        self.man.sources.pop(source_id, None)
        self.dirty = True

    def drop_rows(self, table: str, keep: pl.Expr) -> None:
        """Rewrite a table keeping only rows matching ``keep`` (small tables only)."""
        df = self.store.table(table)
        if df.is_empty():
            return
        for p in self.man.tables.get(table, []):
            self._drop_parts.add((table, p))
        self.dirty = True
        kept = df.filter(keep)
        self.append(table, kept)

    def set_source(self, source_id: str, record: dict[str, Any]) -> None:
        self.man.sources[source_id] = record
        self.dirty = True

    def set_meta(self, key: str, value: Any) -> None:
        self.man.meta[key] = value
        self.dirty = True

    def abort(self) -> None:
        for _, name, tmp in self._new:
            for f in (tmp, tmp.with_name(name)):
                with contextlib.suppress(OSError):
                    f.unlink()
            self.man.part_source.pop(name, None)
        self._new.clear()

    def commit(self) -> None:
        if not self.dirty and not self._new and not self._drop_parts:
            return  # nothing changed: the manifest stays as it is (a read-only store too)
        root = self.store.root
        tmp_man = root / (MANIFEST + ".tmp")
        try:
            for table, name, tmp in self._new:
                os.replace(tmp, tmp.with_name(name))
                self.man.tables.setdefault(table, []).append(name)
            for table, p in self._drop_parts:
                if p in self.man.tables.get(table, []):
                    self.man.tables[table].remove(p)
                    self.man.trash.append(f"{table}/{p}")
                self.man.part_source.pop(p, None)
            self.man.generation += 1
            data = self.man.to_json().encode()
            fd = os.open(tmp_man, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp_man, root / MANIFEST)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp_man.unlink()
            self.abort()  # the renamed parts too: the old manifest never listed them
            raise _write_error(root, exc, "cannot commit to the store") from exc
        with contextlib.suppress(OSError):  # the manifest is replaced: make it durable
            dfd = os.open(root, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        self._new.clear()
        self.store._gc(self.man)
