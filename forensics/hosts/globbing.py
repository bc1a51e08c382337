"""Glob shared by every host: per-component fnmatch over a listdir function, no shell."""

from __future__ import annotations

import fnmatch
import posixpath
import re
from collections.abc import Callable

from forensics.errors import InputNotFound

_MAGIC = re.compile(r"[*?\[]")


def _glob_with(
    pattern: str,
    listdir: Callable[[str], list[tuple[str, bool]]],
    exists: Callable[[str], bool],
) -> list[str]:
    """Expand ``pattern`` with ``listdir(dir) -> [(name, is_dir)]`` (no shell involved).
    ``**`` as a whole part matches zero or more folders (every depth, hidden ones skipped)."""
    absolute = pattern.startswith("/")
    parts = [p for p in pattern.split("/") if p not in ("", ".")]
    current = ["/" if absolute else ""]
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        nxt: list[str] = []
        if part == "**" and not last:
            current = _descendants(current, listdir)
            continue
        for base in current:
            if not _MAGIC.search(part):
                cand = posixpath.join(base, part) if base else part
                if exists(cand):
                    nxt.append(cand)
                continue
            try:
                entries = listdir(base or ".")
            except (OSError, InputNotFound):
                continue
            for name, is_dir in entries:
                if name.startswith(".") and not part.startswith("."):
                    continue
                if not last and not is_dir:
                    continue
                if fnmatch.fnmatchcase(name, part):
                    nxt.append(posixpath.join(base, name) if base else name)
        current = nxt
        if not current:
            break
    return sorted(set(current)) if parts else []


GLOB_MAX_DEPTH = 32  # `**` goes no deeper (a symlink loop ends here)
GLOB_MAX_DIRS = 100_000  # nor through more folders than this


def _descendants(bases: list[str], listdir: Callable[[str], list[tuple[str, bool]]]) -> list[str]:
    """``bases`` and every folder below them, breadth first, bounded (GLOB_MAX_*)."""
    out, level, depth = list(bases), list(bases), 0
    while level and depth < GLOB_MAX_DEPTH and len(out) < GLOB_MAX_DIRS:
        nxt = []
        for base in level:
            try:
                entries = listdir(base or ".")
            except (OSError, InputNotFound):
                continue
            nxt.extend(
                posixpath.join(base, name) if base else name
                for name, is_dir in entries
                if is_dir and not name.startswith(".")
            )
        out.extend(nxt[: GLOB_MAX_DIRS - len(out)])
        level, depth = nxt, depth + 1
    return out


def _no_match(host: str, pattern: str) -> InputNotFound:
    where = "" if host == "local" else f"{host}:"
    return InputNotFound(
        f"{where}{pattern}: no such file (nothing matched)",
        hint="check the path and the glob; quote it so your local shell does not expand it",
    )
