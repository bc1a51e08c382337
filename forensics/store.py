"""The embedded store: a folder of parquet tables plus one atomic manifest.

Layout::

    <root>/manifest.json              schema version, sources, and the parts of each table
    <root>/tables/<table>/<part>.parquet
    <root>/store.lock                 writers hold an fcntl lock on it

Readers see only the parts listed in the manifest. A transaction writes its parts under
temporary names, renames them into place and then replaces ``manifest.json`` atomically
(write + fsync + ``os.replace``), so a crash or Ctrl-C at any point leaves the previous state;
parts not listed in the manifest are garbage and removed by the next writer. The tables are
plain parquet: ``polars.read_parquet`` and DuckDB's ``read_parquet`` read them without
forensics (see docs/store.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.errors import StoreError, StoreLocked

if TYPE_CHECKING:  # polars is imported where tables are read, not to check a manifest
    import polars as pl

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
LOCK = "store.lock"
DEFAULT_LOCK_TIMEOUT = 30.0
QUARANTINE_LOCK_TIMEOUT = 5.0  # a reader waits this long to quarantine a corrupt part (C03)
QUARANTINE_KEY = "quarantined"  # meta: the parts set aside, newest last
CORRUPT_MARK = ".corrupt-"  # a quarantined part: <part>.corrupt-<timestamp>, never collected


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

    @classmethod
    def load(cls, path: Path) -> Manifest:
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError) as exc:
            raise StoreError(
                f"{path}: unreadable store manifest ({exc})",
                hint=f"move {path.parent} aside and ingest again",
            ) from exc
        if not isinstance(raw, dict):
            raise StoreError(
                f"{path}: unreadable store manifest (a JSON {type(raw).__name__}, not an object)",
                hint=f"move {path.parent} aside and ingest again",
            )
        version = raw.get("schema_version")
        if version != SCHEMA_VERSION:
            raise StoreError(
                f"{path}: store schema version {version}, this forensics reads {SCHEMA_VERSION}",
                hint="use a matching forensics version or a new --store",
            )
        try:
            tables = raw.get("tables", {})
            man = cls(
                schema_version=version,
                tables={str(k): [str(p) for p in v] for k, v in tables.items()},
                part_source=dict(raw.get("part_source", {})),
                sources=dict(raw.get("sources", {})),
                meta=dict(raw.get("meta", {})),
                generation=int(raw.get("generation", 0)),
            )
        except (AttributeError, TypeError, ValueError) as exc:  # C09: a damaged manifest
            raise StoreError(
                f"{path}: damaged store manifest ({type(exc).__name__}: {exc})",
                hint=f"move {path.parent} aside and ingest again",
            ) from exc
        return man

    def to_json(self) -> str:
        return json.dumps(
            {
                "schema_version": self.schema_version,
                "generation": self.generation,
                "tables": self.tables,
                "part_source": self.part_source,
                "sources": self.sources,
                "meta": self.meta,
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
        """The committed manifest. Readers ask for it once per table read; it is parsed again
        only when the file changed (a commit replaces it: a new inode). Inside a transaction
        (lock held) it is always read afresh and never cached: the transaction edits it."""
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
        if self._lock_depth == 0 and key is not None:
            self._man, self._man_key = man, key
        return man

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
        parts = [self.root / "tables" / name / p for p in man.tables.get(name, [])]
        frames = []
        for p in parts:
            try:
                frames.append(pl.read_parquet(p))
            except FileNotFoundError as exc:
                if self._lock_depth:
                    raise StoreError(
                        f"{p}: a part listed in the manifest is missing",
                        hint="run `forensics runs` to set it aside, then retry",
                    ) from exc
                self._quarantine(name, p.name, exc, missing=True)
            except Exception as exc:  # corrupt part (C03)
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
                    tx.man.sources[base] = {**rec, "head_hash_full": None, "state": None}
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
        except StoreLocked:
            self.warnings.append(
                f"{src}: bad store part ({cause}); not shown (the store is busy, so it was "
                "not quarantined yet; run the command again)"
            )
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
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.root / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
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
        """Remove part files the manifest does not list (left by a crash)."""
        tables_dir = self.root / "tables"
        if not tables_dir.exists():
            return
        for tdir in tables_dir.iterdir():
            if not tdir.is_dir():
                continue
            listed = set(man.tables.get(tdir.name, []))
            for f in tdir.iterdir():
                if f.name not in listed and CORRUPT_MARK not in f.name:
                    with contextlib.suppress(OSError):
                        f.unlink()


class Transaction:
    """Parts and manifest changes that become visible together, or not at all."""

    def __init__(self, store: Store, manifest: Manifest):
        self.store = store
        self.man = manifest
        self._new: list[tuple[str, str, Path]] = []  # (table, part name, tmp path)
        self._drop_parts: set[tuple[str, str]] = set()

    def append(self, table: str, df: pl.DataFrame, *, source_id: str = "") -> None:
        if df.is_empty():
            return
        tdir = self.store.root / "tables" / table
        tdir.mkdir(parents=True, exist_ok=True)
        name = f"{source_id or 'x'}-{uuid.uuid4().hex[:12]}.parquet"
        tmp = tdir / (name + ".tmp")
        try:
            df.write_parquet(tmp, compression="zstd", statistics=True)
        except OSError as exc:  # C05: disk full
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise StoreError(
                f"{tdir}: cannot write store part ({exc.strerror or exc})",
                hint="free disk space; nothing was changed",
            ) from exc
        self._new.append((table, name, tmp))
        self.man.part_source[name] = source_id

    def drop_source(self, source_id: str) -> None:
        """Forget every part a source produced, and its ``<id>~*`` companions."""
        for table, parts in self.man.tables.items():
            for p in parts:
                ps = self.man.part_source.get(p, "")
                if ps == source_id or ps.startswith(source_id + "~"):
                    self._drop_parts.add((table, p))
        self.man.sources.pop(source_id, None)

    def drop_rows(self, table: str, keep: pl.Expr) -> None:
        """Rewrite a table keeping only rows matching ``keep`` (small tables only)."""
        df = self.store.table(table)
        if df.is_empty():
            return
        for p in self.man.tables.get(table, []):
            self._drop_parts.add((table, p))
        kept = df.filter(keep)
        self.append(table, kept)

    def set_source(self, source_id: str, record: dict[str, Any]) -> None:
        self.man.sources[source_id] = record

    def set_meta(self, key: str, value: Any) -> None:
        self.man.meta[key] = value

    def abort(self) -> None:
        for _, _, tmp in self._new:
            with contextlib.suppress(OSError):
                tmp.unlink()
        self._new.clear()

    def commit(self) -> None:
        root = self.store.root
        try:
            for table, name, tmp in self._new:
                os.replace(tmp, tmp.with_name(name))
                self.man.tables.setdefault(table, []).append(name)
            for table, p in self._drop_parts:
                if p in self.man.tables.get(table, []):
                    self.man.tables[table].remove(p)
                self.man.part_source.pop(p, None)
            self.man.generation += 1
            data = self.man.to_json().encode()
            tmp_man = root / (MANIFEST + ".tmp")
            fd = os.open(tmp_man, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp_man, root / MANIFEST)
            dfd = os.open(root, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError as exc:
            self.abort()
            raise StoreError(
                f"{root}: cannot commit to the store ({exc.strerror or exc})",
                hint="free disk space; the previous state is intact",
            ) from exc
        self.store._gc(self.man)
