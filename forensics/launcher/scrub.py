"""A launch's files on this machine that hold what the chain's steps and the server printed
(a log forensics chose under its home, the journal, the work folder's step outputs): their
secrets overwritten in place through the parser's one redaction (``secrets.mask``), byte for
byte, so a server still appending to its log keeps its offsets. The wrapper and the chain
text (which must run with the real values) are removed by the supervisor once it has read
them (``wrapper.build_supervisor``)."""

from __future__ import annotations

import contextlib
import os
import re
import stat

BLOCK = 1 << 20  # bytes read at a time (a line longer than this is masked in pieces)


def scrub_file(path: str) -> bool:
    """Mask the secrets of ``path``'s bytes present now, in place; whether any was found.
    A symlink, a folder or a file that cannot be opened is left as it is."""
    from forensics_parsers.secrets import HINT, mask

    hint = re.compile(HINT)
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    found = False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return False
        pos, inside = 0, False
        while pos < st.st_size:
            block = os.pread(fd, min(BLOCK, st.st_size - pos), pos)
            if not block:
                break
            cut = block.rfind(b"\n") + 1 or len(block)
            piece = block[:cut]
            if inside or hint.search(piece.decode("utf-8", "surrogateescape")):
                new, inside = mask(piece, inside)
                if new != piece:
                    os.pwrite(fd, new, pos)
                    found = True
            pos += cut
    except OSError:
        return found
    finally:
        os.close(fd)
    return found


def scrub_launch(host_name: str, paths: list[str | None], folder: str | None) -> None:
    """``scrub_file`` on ``paths`` and on the files of every launch folder in ``folder`` (the
    journal's ``….journal.d``: one folder per launch id). Local launches only: a remote
    host's files are the host's."""
    if host_name != "local":
        return
    names: list[str | None] = list(paths)
    if folder:
        with contextlib.suppress(OSError):
            for launch in sorted(os.listdir(folder)):
                d = os.path.join(folder, launch)
                if os.path.isdir(d) and not os.path.islink(d):
                    names += [os.path.join(d, n) for n in sorted(os.listdir(d))]
    for p in names:
        if p:
            scrub_file(p)
