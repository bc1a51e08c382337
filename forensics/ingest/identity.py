"""Which file a source is: its id (host and real path), whether it is one of the store's own
files, and whether it is a file already ingested under another name (a hard link, a rename,
a rename then grown: same device and inode, the old name gone, the old content its prefix)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from forensics.ingest.batch import _Batch


def shown_path(path: str) -> str:
    """``path`` as text a table can hold: the bytes of a name that is not UTF-8 (read through
    surrogateescape) shown as ``\\xff`` escapes. Ingest refuses such a name (the store keeps
    names as text); messages show it this way."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def source_id(host: str, path: str) -> str:
    return hashlib.sha1(f"{host}:{path}".encode("utf-8", "surrogateescape")).hexdigest()[:12]


# The store's own files, relative to its folder (logs a launch or a sweep writes under
# $FORENSICS_HOME/sweeps/..., evidence dumps, are not the store's: they may be ingested).
STORE_FILES = ("manifest.json*", "store.lock", "tables/**", "models/**")


def _inside(path: str, root: Path) -> bool:
    """Is ``path`` one of the store's own files (STORE_FILES under its folder)?"""
    import fnmatch

    try:
        rel = os.path.relpath(os.path.realpath(path), os.path.realpath(root))
    except ValueError:
        return False
    if rel.startswith(".."):
        return False
    return any(fnmatch.fnmatch(rel, pat) or rel.startswith(pat.split("/")[0] + "/")
               for pat in STORE_FILES)  # fmt: skip


def _device(host: Any, path: str) -> int | None:
    if host.name != "local":
        return None  # SFTP carries no device or inode
    try:
        return os.stat(os.path.expanduser(path)).st_dev
    except OSError:
        return None


def _same_file(
    tx: Any,
    batch: _Batch | None,
    hname: str,
    dev: int | None,
    inode: int | None,
    sid: str,
    path: str,
    unchanged: dict[str, Any] | None = None,
) -> tuple[str, str] | None:
    """(skip reason, the path under which this very file is already ingested): the same
    device and inode under another name that still exists (``duplicate``, a hard link), or a
    stored source whose name is gone (or now another file) and whose record matches this
    file's size, mtime and head (``renamed``: ``mv a.log c.log`` is one launch, not two).
    ``("continued", source id)``: a stored source of this device and inode whose name is
    gone and which this file may continue (renamed, then grown: the caller checks that the
    file starts with the source's whole content, ``continues``)."""
    if dev is None or inode is None:
        return None
    key = (hname, dev, inode)
    seen = batch.seen if batch is not None else {}
    if key in seen and seen[key][0] != sid:
        return "duplicate", seen[key][1]
    index = batch.stored_inodes(tx) if batch is not None else _inode_index(tx)
    grown = None
    for osid, opath in index.get(key, ()):
        if osid == sid:
            continue
        try:
            st = os.stat(opath)
        except FileNotFoundError:
            st = None
        except (OSError, TypeError):
            continue
        if st is not None and (st.st_dev, st.st_ino) == (dev, inode):
            return "duplicate", opath
        rec = tx.man.sources.get(osid) or {}
        if unchanged and all(rec.get(k) == v for k, v in unchanged.items()):
            return "renamed", opath
        if st is None and rec.get("inode") == inode and rec.get("dev") == dev:
            grown = osid  # its name is gone: this file may be it, renamed and grown
    seen[key] = (sid, path)
    return ("continued", grown) if grown else None


def continues(rec: dict[str, Any], src: Any, hasher: Any, head_hash: str) -> bool:
    """Does the opened log ``src`` continue the stored source ``rec`` (a log renamed, then
    grown)? Its first ``rec["size"]`` bytes hash as the source's whole content did, it is
    not shorter, and the source was read as plain text with something in it (an empty
    source is the prefix of every file). ``hasher`` is left reset."""
    import hashlib

    size = rec.get("size") or 0
    head_len = rec.get("head_len") or 0
    ok = (
        size > 0
        and rec.get("resume")
        and rec.get("content_hash")
        and not src.transformed
        and src.stat.size >= size
        and head_len <= len(src.head)
        and rec.get("head_hash") == hashlib.sha1(src.head[:head_len]).hexdigest()
        and hasher.of_file(src, size, like=rec["content_hash"]) == rec["content_hash"]
    )
    hasher.reset()
    return bool(ok)


def inode_sources(tx: Any, batch: _Batch | None, hname: str, path: str) -> list[str]:
    """The stored sources of the device and inode of the local file ``path`` (the sources
    an ingest of it may change: itself, or the log it continues under an older name)."""
    if hname != "local":
        return []
    try:
        st = os.stat(os.path.expanduser(path))
    except OSError:
        return []
    index = batch.stored_inodes(tx) if batch is not None else _inode_index(tx)
    return [osid for osid, _ in index.get((hname, st.st_dev, st.st_ino), ())]


def _inode_index(tx: Any) -> dict[tuple[str, int, int], list[tuple[str, str]]]:
    """(host, dev, inode) -> [(source id, path)] of the stored sources that record them."""
    index: dict[tuple[str, int, int], list[tuple[str, str]]] = {}
    for osid, rec in tx.man.sources.items():
        if rec.get("dev") is not None and rec.get("inode") is not None:
            key = (rec.get("host"), rec["dev"], rec["inode"])
            index.setdefault(key, []).append((osid, rec.get("path")))
    return index
