"""Store: the folder of one store — open, read tables (quarantine of bad parts), lock,
collect. The layout and its crash-safety rules are in the package docstring (forensics.store)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.errors import StoreError, StoreLocked
from forensics.store.manifest import (
    MANIFEST,
    PART_SUFFIX,
    REPAIR_HINT,
    Manifest,
    StoreDamaged,
    _crashed_part,
    part_path,
    safe_part_name,
)
from forensics.store.transaction import Transaction, _write_error

if TYPE_CHECKING:  # polars is imported where tables are read, not to check a manifest
    import polars as pl

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


def _check_not_nested(root: Path) -> None:
    """Refuse a store folder inside another store (``FORENSICS_HOME=$STORE/tables``): its
    manifest, lock and parts would land among the other store's, which takes them for its
    own (orphans set aside by ``store repair``, a second manifest)."""
    for parent in Path(os.path.abspath(root)).parents:
        if (parent / MANIFEST).is_file() and (parent / "tables").is_dir():
            raise StoreError(
                f"{root}: inside the forensics store {parent}, not a store of its own",
                hint=f"pass --store {parent} (or a folder outside it)",
            )


class Store:
    """A forensics store rooted at a folder."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._cache: dict[str, pl.DataFrame] = {}
        # table (, reduce) -> source -> rows
        self._by_source: dict[Any, dict[Any, pl.DataFrame]] = {}
        self._cache_gen = -1
        self._lock_depth = 0  # > 0 while this process holds the store lock
        self._locked: tuple[int, int] | None = None  # (dev, inode) of the lock file held
        # the last manifest read, and the (inode, mtime, size) of the file it was read from
        self._man: Manifest | None = None
        self._man_key: tuple[int, int, int] | None = None
        self.warnings: list[str] = []  # what a read had to set aside (C03), to print

    # -- opening -----------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike | None = None, *, create: bool = True) -> Store:
        root = Path(path).expanduser() if path else default_root()
        _check_not_nested(root)
        try:
            os.stat(root)
        except FileNotFoundError:
            pass  # created below (or, for a read, an empty store)
        except OSError as exc:  # a symlink loop, a file in the way, …: no store can be there
            from forensics.hosts.base import path_error

            known = path_error(str(root), exc)  # the one errno table (exit 2 for these)
            if known is not exc:
                raise known from None
            raise StoreError(
                f"{root}: cannot use the store ({exc.strerror})",
                hint="pass --store DIR or set FORENSICS_HOME to a folder of your own",
            ) from None
        if root.exists() and not root.is_dir():
            raise StoreError(f"{root}: store path is a file, not a folder", hint="pass --store DIR")
        if not root.exists():
            if not create:
                return cls(root)
            try:  # another process may create it meanwhile (two first ingests at once)
                root.mkdir(parents=True, mode=0o700, exist_ok=True)
            except OSError as exc:
                raise StoreError(
                    f"{root}: cannot create the store ({exc.strerror})",
                    hint="pass --store DIR or set FORENSICS_HOME to a writable folder",
                ) from exc
        _check_owner(root)
        store = cls(root)
        store.clear_dead_writes()
        return store

    def clear_dead_writes(self) -> None:
        """Remove the ``*.tmp`` files a killed writer left (a part or the manifest it was
        writing when a ``kill -9`` came): every command that opens the store does it, reads
        too, when no writer holds the lock (taken without waiting, released at once), so
        nothing of a killed command stays once the next one ran. Such a file is never listed
        and only a lock holder writes one. A store that cannot be written is left as it is."""
        tmps = self._tmp_files()
        if not tmps:
            return
        try:
            fd = os.open(self.root / LOCK, os.O_RDWR)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # a writer is at work (its own files), or locks are not supported
            os.close(fd)
            return
        try:
            for f in self._tmp_files():  # again, under the lock
                with contextlib.suppress(OSError):
                    f.unlink()
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _tmp_files(self) -> list[Path]:
        found = [self.root / (MANIFEST + ".tmp")]
        with contextlib.suppress(OSError):
            for tdir in (self.root / "tables").iterdir():
                if tdir.is_dir() and not tdir.is_symlink():
                    found += [f for f in tdir.iterdir() if f.name.endswith(PART_SUFFIX + ".tmp")]
        return [f for f in found if f.is_file() and not f.is_symlink()]

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
        if not man.complete and self._lock_depth == 0 and self.parts_on_disk():
            man = Manifest.load(path)  # the first commit of a new store may have just landed
            if not man.complete and self._writer_active():
                return Manifest()  # its first commit is under way: nothing committed yet
        if not man.complete:
            n = len(self.parts_on_disk())
            if n:
                what = "missing" if not path.exists() else "incomplete"
                raise StoreDamaged(
                    f"{self.root}: damaged store: {MANIFEST} is {what} but tables/ holds "
                    f"{n} part(s); nothing was read or written",
                    hint=REPAIR_HINT,
                )
        tables = self.root / "tables"
        if man.tables and (tables.is_symlink() or (tables.exists() and not tables.is_dir())):
            raise StoreDamaged(
                f"{tables}: is not the store's tables folder (a file or a symlink) while "
                f"{MANIFEST} lists parts in it",
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

    def _writer_active(self) -> bool:
        """Does a writer hold the store lock now (a reader only asks; it never takes it)?"""
        try:
            fd = os.open(self.root / LOCK, os.O_RDONLY)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        except BlockingIOError:
            return True
        except OSError:
            return False
        finally:
            os.close(fd)

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

    def require_writable(self, what: str = "cannot write to the store") -> None:
        """StoreReadOnly (exit 7) at once, for a command that would otherwise start what it
        cannot record: a launch under a read-only home failed making its log folder (exit 3,
        "permission denied", issue 14 sixth round) before its store write could say so."""
        if self.root.is_dir() and not self.writable():
            denied = PermissionError(errno.EACCES, os.strerror(errno.EACCES))
            raise _write_error(self.root, denied, what)

    # -- reading -----------------------------------------------------------------------
    def table(self, name: str) -> pl.DataFrame:
        """All committed rows of a table (an empty frame when it has none)."""
        import polars as pl

        from forensics.tables import TABLES, conform

        self.manifest_generation_check()
        man = self.manifest()
        if name in self._cache:
            return self._cache[name]
        tdir = self.root / "tables" / name
        if man.tables.get(name) and (tdir.is_symlink() or tdir.parent.is_symlink()):
            raise StoreDamaged(
                f"{tdir}: the table folder is a symlink (refused: it could point anywhere)",
                hint=REPAIR_HINT,
            )
        parts = [self._part_file(name, p) for p in man.tables.get(name, [])]
        frames = []
        for p in parts:
            try:
                # a part of another table's schema (swapped, copied) is corrupt here
                df = pl.read_parquet(part_path(p))
                frames.append(conform(name, df) if name in TABLES else df)
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
        df = pl.concat(frames, how="diagonal_relaxed") if frames else _empty(name)
        self._cache[name] = df
        return df

    def _part_file(self, table: str, part: str) -> Path:  # a TransactionView's: its new ones too
        return self.root / "tables" / table / part

    def source_rows(
        self,
        name: str,
        source_id: str,
        reduce: Callable[[pl.LazyFrame], pl.LazyFrame] | None = None,
        where: pl.Expr | None = None,
    ) -> pl.DataFrame:
        """The committed rows of one source in a table (the table split by source once, so
        a pass over every run costs one split, not one filter per run).

        ``reduce``: a summary of the table (a LazyFrame -> LazyFrame keeping ``source_id``),
        computed part by part and once more over their union (so it must be associative, as
        group-by min / max / sum are) without loading the table whole: the decode lines of a
        GB log are counts here, not a copy of the table in memory.

        ``where``: only the rows it keeps, filtered in each part before ``reduce`` (a range
        of runs: the verdicts of a log of 100,000 launches, a batch at a time); not cached."""
        if where is not None:
            import polars as pl

            cond = (pl.col("source_id") == source_id) & where
            return self._reduced(name, reduce or _same, where=cond)
        key: Any = name if reduce is None else (name, reduce)
        split = self._by_source.get(key)
        if split is None:
            self.manifest_generation_check()
            df = self.table(name) if reduce is None else self._reduced(name, reduce)
            if df.is_empty() or "source_id" not in df.columns:
                return df
            split = self._by_source[key] = df.partition_by("source_id", as_dict=True)
        hit = split.get((source_id,))
        return hit if hit is not None else split[next(iter(split))].clear()

    def manifest_generation_check(self) -> None:
        """Drop what was read of an older generation of the store."""
        man = self.manifest()
        if man.generation != self._cache_gen:
            self._cache.clear()
            self._by_source.clear()
            self._cache_gen = man.generation

    def columns(self, name: str, cols: list[str], where: pl.Expr | None = None) -> pl.DataFrame:
        """Only ``cols`` of a table (only the rows ``where`` keeps), read part by part: a summary
        over a big table never holds its other columns (``runs`` on 10,000 runs held the
        decode table whole, 400 MB; issue 14 seventh round)."""
        return self._reduced(name, lambda lf: lf.select(cols), where=where)

    def reduced(
        self,
        name: str,
        reduce: Callable[[pl.LazyFrame], pl.LazyFrame] | None,
        where: pl.Expr | None = None,
        sources: Collection[str] | None = None,
    ) -> pl.DataFrame:
        """A summary of a whole table (of the rows ``where`` keeps), computed part by part
        (see source_rows); ``reduce`` None: the rows themselves. ``sources``: only the parts
        holding their rows are read (a verdict batch of one log read every log's parts)."""
        return self._reduced(name, reduce or _same, where=where, sources=sources)

    def _reduced(
        self,
        name: str,
        reduce: Callable[[pl.LazyFrame], pl.LazyFrame],
        *,
        where: pl.Expr | None = None,
        sources: Collection[str] | None = None,
    ) -> pl.DataFrame:
        """``reduce`` of the table, part by part, then over their union (see source_rows).

        ``where`` filters the rows before ``reduce``, once: over the union it would look for
        columns a reduce may have dropped (``show`` keeps no source_id: issue 14, round 6)."""
        import polars as pl

        def pick(lf: pl.LazyFrame) -> pl.LazyFrame:
            return reduce(lf if where is None else lf.filter(where))

        if name in self._cache:
            return pick(self._cache[name].lazy()).collect()
        tdir = self.root / "tables" / name
        man, want = self.manifest(), set(sources or ())
        names = man.tables.get(name, [])
        if sources is not None:  # and the parts tied to no source, which may hold any
            names = [p for p in names if not (held := man.part_sources(p)) or held & want]
        parts = [self._part_file(name, p) for p in names]
        if not parts:  # no rows yet: the summary of none, over the declared columns
            return pick(_empty(name).lazy()).collect()
        try:
            if tdir.is_symlink():
                raise StoreError(f"{tdir}: the table folder is a symlink")
            pieces = [pick(pl.scan_parquet(part_path(p))).collect() for p in parts]
        except Exception:  # a damaged part: the whole read refuses or quarantines it
            return pick(self.table(name).lazy()).collect()
        return reduce(pl.concat(pieces, how="diagonal_relaxed").lazy()).collect()

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
        source_path, more = None, 0
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
                # its sources are re-read from byte 0 by the next ingest of their logs
                paths = [
                    tx.man.sources[sid].get("path")
                    for sid in tx.man.unlist(table, part)
                    if sid in tx.man.sources
                ]
                if paths:
                    source_path = paths[0]
                    more = len(paths) - 1
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
            + (f" (and that of {more} more log(s) whose rows it held)" if more else "")
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
            with contextlib.suppress(OSError):  # who holds it, for the message: a note (a
                os.ftruncate(fd, 0)  # full disk cannot take it, and the lock holds anyway)
                os.pwrite(fd, str(os.getpid()).encode(), 0)
            st = os.fstat(fd)
            self._locked = (st.st_dev, st.st_ino)
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
        finally:
            try:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
            finally:  # an interrupt landing in the line above must not keep the lock open
                os.close(fd)

    def check_still_here(self) -> None:
        """Before a commit renames anything: is the lock this writer holds still the one at
        the store's path? A store folder moved or replaced while a command ran (``mv store
        old; mkdir store``) would otherwise get a manifest listing parts that are not in it."""
        try:
            st = os.stat(self.root / LOCK)
            here = (st.st_dev, st.st_ino)
        except OSError:
            here = None
        if self._locked is not None and self._locked != here:
            raise StoreError(
                f"{self.root}: the store folder was moved or replaced while this command ran; "
                "nothing more was written",
                hint="run the command again on the store where you want it",
            )

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
        * ``*.parquet.tmp``: a part being written when a writer died (we hold the lock);
        * ``staging/`` folders of ingests that were killed (forensics/store/staging.py).

        Any other unlisted file is an orphan: kept, reported by ``forensics store check``.
        """
        from forensics.store.staging import clean_staging

        clean_staging(self.root)
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


def _empty(name: str) -> pl.DataFrame:
    """A table with no rows: its declared columns (forensics/tables.py), so a reader's
    expressions still find them (a store whose runs logged no decode line, read while its
    verdicts are missing, failed on ``source_id``)."""
    import polars as pl

    from forensics.tables import TABLES

    spec = TABLES.get(name)
    return pl.DataFrame(schema=spec.schema) if spec else pl.DataFrame()


def _same(lf: pl.LazyFrame) -> pl.LazyFrame:
    return lf
