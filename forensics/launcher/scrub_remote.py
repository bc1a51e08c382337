"""A launch's files on a host without python3, masked from here over the connection (issue 14,
seventh round: such a host kept every secret the chain and the server printed there).

The same masking as ``launcher.scrub`` (``secrets.mask``: every secret overwritten by ``*``,
byte for byte): the file is read over the connection in blocks, each block's complete lines
masked here, and each run of changed bytes written back in place on the host by ``dd`` with
``conv=notrunc`` (POSIX; busybox has it). Only ``*`` bytes travel back and no secret is on a
command line, so a server still appending keeps its offsets and its lines. One pass, at the
launch's end: what a server prints after that stays (the follower needs python3).
"""

from __future__ import annotations

import shlex
from typing import Any

BLOCK = 1 << 20  # bytes read at a time
SCAN_CAP = 256 << 20  # bytes of one file scanned at most (a launch's own files are small)
WRITES_PER_COMMAND = 200  # dd commands sent in one shell script


def changed_runs(old: bytes, new: bytes, base: int) -> list[tuple[int, int]]:
    """(offset, length) of each run of bytes that differ between ``old`` and ``new`` (the same
    length: ``mask`` keeps it), offsets from ``base``. Compared line by line: a line
    without a secret costs one comparison."""
    runs: list[tuple[int, int]] = []
    pos = 0
    for a, b in zip(old.split(b"\n"), new.split(b"\n")):
        if a != b:
            i = 0
            while i < len(a):
                if a[i] != b[i]:
                    j = i
                    while j < len(a) and a[j] != b[j]:
                        j += 1
                    runs.append((base + pos + i, j - i))
                    i = j
                else:
                    i += 1
        pos += len(a) + 1
    return runs


def masked_runs(host: Any, path: str) -> list[tuple[int, int]]:
    """Where ``path`` on ``host`` holds a secret: the runs of bytes ``mask`` would overwrite."""
    import re

    from forensics_parsers.secrets import HINT, mask

    hint = re.compile(HINT)
    runs: list[tuple[int, int]] = []
    pos, inside = 0, False
    while pos < SCAN_CAP:
        try:
            block = host.read(path, pos, BLOCK)
        except Exception:  # noqa: BLE001 - a file gone or unreadable is left as it is
            break
        if not block:
            break
        cut = block.rfind(b"\n") + 1 or len(block)
        piece = block[:cut]
        if inside or hint.search(piece.decode("utf-8", "surrogateescape")):
            new, inside = mask(piece, inside)
            runs += changed_runs(piece, new, pos)
        pos += cut
        if len(block) < BLOCK and cut == len(block):
            break
    return runs


def overwrite_command(path: str, runs: list[tuple[int, int]]) -> str:
    """The shell commands that write ``*`` over each run of ``path``, in place."""
    q = shlex.quote(path)
    return "\n".join(
        f"dd if=/dev/zero bs={n} count=1 2>/dev/null | tr '\\000' '*' | "
        f"dd of={q} bs=1 seek={off} conv=notrunc 2>/dev/null"
        for off, n in runs
    )


def scrub_over(host: Any, paths: list[str], folder: str | None) -> int:
    """Mask the launch's files (``paths`` and every file of the journal's launch folders in
    ``folder``) on ``host`` from here -> how many runs of bytes were overwritten."""
    from forensics.launcher.scrub import SCRIPT_NAME

    names = [p for p in paths if p]
    if folder:
        try:
            names += [p for p in host.glob(f"{folder.rstrip('/')}/*/*")
                      if not p.endswith("/" + SCRIPT_NAME)]  # fmt: skip
        except Exception:  # noqa: BLE001 - no folder: only the named files
            pass
    total = 0
    for name in names:
        runs = masked_runs(host, name)
        for k in range(0, len(runs), WRITES_PER_COMMAND):
            part = runs[k : k + WRITES_PER_COMMAND]
            host.run(overwrite_command(name, part), timeout=120, allow_timeout=True)
            total += len(part)
    return total
