"""A store transaction: parts and manifest changes that become visible together, or not at
all (parts renamed into place, then the manifest replaced atomically)."""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.errors import StoreError
from forensics.store.manifest import MANIFEST, Manifest

if TYPE_CHECKING:
    import polars as pl

    from forensics.store.folder import Store


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
