"""The store's manifest: the one file that says what the store holds (schema version,
sources, the parts of each table, meta, the trash of dropped parts). Read and migrated in
memory here; written only by a committing transaction (forensics/store/transaction.py)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forensics.errors import StoreError
from forensics.migrations import SCHEMA_VERSION, migrate

MANIFEST = "manifest.json"
PART_SUFFIX = ".parquet"
# <source id or x>-g<generation>-<12 hex>.parquet; parts of v1 stores have no -g<N>
PART_NAME = re.compile(r"^(?P<sid>.+?)(?:-g(?P<gen>\d+))?-(?P<uid>[0-9a-f]{12})\.parquet$")
# the name of a part holding the rows of several sources (shared[part] lists their keys):
# batch-g<N>-<uid>.parquet for their log rows, batch~tail-..., batch~runs-..., batch~state-...
SHARED = "batch"
REPAIR_HINT = "forensics store check, then forensics store repair to rebuild it from the parts"


class StoreDamaged(StoreError):
    """The store has parts but no usable manifest: refuse to read or write it."""


# The most bytes a manifest may have (10,000 sources are about 6 MB): a manifest that is a
# symlink to /dev/zero, or grew without end, is damaged, never read whole.
MANIFEST_CAP = 512 << 20


def _is_names(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _is_table_of_names(v: Any) -> bool:
    return isinstance(v, dict) and all(_is_names(x) for x in v.values())


# What each key of a manifest holds (when present); anything else is a damaged manifest
# (`"labels": "x.parquet"` was read as the parts "x", ".", "p", … and the labels unlisted).
MANIFEST_SHAPE: dict[str, Any] = {
    "tables": _is_table_of_names,
    "shared": _is_table_of_names,
    "part_source": lambda v: isinstance(v, dict),
    "sources": lambda v: isinstance(v, dict) and all(isinstance(x, dict) for x in v.values()),
    "meta": lambda v: isinstance(v, dict),
    "generation": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    "migrations": lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v),
    "trash": _is_names,
    "legacy_states": lambda v: isinstance(v, dict),
}


def _read_manifest(path: Path) -> bytes:
    """The manifest's bytes: a regular file (not a symlink, FIFO or device) under the cap."""
    import os
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if st.st_size > MANIFEST_CAP:
            raise ValueError(f"{st.st_size:,} bytes, over the {MANIFEST_CAP:,}-byte cap")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MANIFEST_CAP + 1)
    finally:
        os.close(fd)
    if len(data) > MANIFEST_CAP:
        raise ValueError(f"over the {MANIFEST_CAP:,}-byte cap")
    return data


def part_path(path: Path) -> Path:
    """``path`` if it may be read as a store part: a regular file. A symlink, FIFO, device or
    socket in a part's place is a StoreError naming it (readers quarantine it, a write stops):
    a FIFO part hung every command forever, polars blocked in a read no signal reaches
    (issue 14, seventh round). A missing part raises FileNotFoundError, as before."""
    import os
    import stat

    from forensics.hosts.base import KIND_TEXT, file_kind

    mode = os.lstat(path).st_mode
    if not stat.S_ISREG(mode):
        what = KIND_TEXT.get(file_kind(mode), "not a regular file")
        raise StoreError(f"{path}: the part is {what}, not a parquet file (refused)")
    return path


def os_errno(exc: OSError) -> str:
    import errno

    return errno.errorcode.get(exc.errno or 0, "")


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


@dataclass
class Manifest:
    schema_version: int = SCHEMA_VERSION
    # table name -> list of part file names (relative to tables/<table>/)
    tables: dict[str, list[str]] = field(default_factory=dict)
    # part file name -> source id that produced it ("" for parts not tied to a source)
    part_source: dict[str, str] = field(default_factory=dict)
    # shared part name -> the source keys (``id`` or ``id~kind``) whose rows it holds
    shared: dict[str, list[str]] = field(default_factory=dict)
    # source id -> source record (path, host, size, mtime, offset, ...; the parser's resume
    # state is a row of the ``states`` table since schema 4)
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
    # source id -> resume state of a schema-3 manifest (migration 4), moved to the states
    # table by the next commit; never written back into the manifest
    legacy_states: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Manifest:
        hint = REPAIR_HINT
        try:
            raw = json.loads(_read_manifest(path))
        except FileNotFoundError:
            return cls(complete=False)
        except OSError as exc:  # ELOOP: a symlink (O_NOFOLLOW)
            cause = "a symlink" if os_errno(exc) == "ELOOP" else (exc.strerror or str(exc))
            raise StoreDamaged(f"{path}: unreadable store manifest ({cause})", hint=hint) from exc
        except ValueError as exc:
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
        wrong = [k for k, ok in MANIFEST_SHAPE.items() if k in raw and not ok(raw[k])]
        if wrong:
            raise StoreDamaged(
                f"{path}: damaged store manifest ({wrong[0]!r} is not of its shape)", hint=hint
            )
        complete = "tables" in raw and "generation" in raw
        try:
            applied = migrate(raw)
            tables = raw.get("tables", {})
            man = cls(
                schema_version=int(raw["schema_version"]),
                tables={str(k): [str(p) for p in v] for k, v in tables.items()},
                part_source=dict(raw.get("part_source", {})),
                shared={str(k): [str(x) for x in v] for k, v in raw.get("shared", {}).items()},
                sources=dict(raw.get("sources", {})),
                meta=dict(raw.get("meta", {})),
                generation=int(raw.get("generation", 0)),
                migrations=[dict(m) for m in raw.get("migrations", [])],
                trash=[str(t) for t in raw.get("trash", [])],
                complete=complete,
                migrated=[m.name for m in applied],
                legacy_states=dict(raw.get("legacy_states", {})),
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

    def part_sources(self, part: str) -> set[str]:
        """The ids of the sources whose rows ``part`` holds (empty: a part tied to none)."""
        keys = self.shared.get(part) or [self.part_source.get(part) or ""]
        return {k.split("~", 1)[0] for k in keys if k}

    def unlist(self, table: str, part: str) -> list[str]:
        """Take ``part`` out of the manifest; -> the ids of the sources whose rows it held,
        each marked to be read again from byte 0 by the next ingest of its log."""
        if part in self.tables.get(table, []):
            self.tables[table].remove(part)
        bases = sorted(self.part_sources(part))
        self.shared.pop(part, None)
        self.part_source.pop(part, None)
        for sid in bases:
            rec = self.sources.get(sid)
            if rec is not None:  # not "unchanged", not "grown": re-read in full
                self.sources[sid] = {
                    **rec,
                    "head_hash_full": None,
                    "content_hash": None,
                    "resume": False,
                }
            self.legacy_states.pop(sid, None)
        return bases

    def to_json(self) -> str:
        return json.dumps(
            {
                "schema_version": self.schema_version,
                "generation": self.generation,
                "tables": self.tables,
                "part_source": self.part_source,
                "shared": self.shared,
                "sources": self.sources,
                "meta": self.meta,
                "migrations": self.migrations,
                "trash": self.trash,
            },
            indent=1,
            sort_keys=True,
            default=str,
        )


def _crashed_part(name: str, generation: int) -> bool:
    """A part named for a generation above the committed ``generation``: its commit crashed."""
    m = PART_NAME.match(name)
    return bool(m and m["gen"] is not None and int(m["gen"]) > generation)
