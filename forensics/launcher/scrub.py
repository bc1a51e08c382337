"""A launch's files that hold what the chain's steps and the server print (the log, forensics'
or one the user named; the journal, whose step-end events carry each step's output tail; the
work folder's step outputs): their secrets overwritten in place through the parser's one
redaction (``secrets.mask``), byte for byte, so a server still appending keeps its offsets.

One mechanism wherever the launch runs. When the launch concludes (and when it is
interrupted) the launcher masks every such file once, then starts a follower on the launch's
host that masks each file's new complete lines as they are written, for as long as the
launch's processes live: until the supervisor has exited and the server's process group is
gone, so what a server prints after the launch concluded is masked too. Both run this
module's code: in this process for this machine; on a remote host as one self-contained
python3 script (``follower_script``: this module's and the parser's secrets modules' own
source; nothing of forensics needs to be installed there). The wrapper and the chain text
(which must run with the real values) are removed by the supervisor once it has read them
(``wrapper.build_supervisor``).

Only the standard library here: a host without forensics runs this source.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import stat
import sys
import time

BLOCK = 1 << 20  # bytes read at a time (a line longer than this is masked in pieces)
FOLLOW_POLL_S = 0.5  # between two passes of the follower
SCRIPT_NAME = "scrub.py"  # the follower's file in the launch's work folder


def scrub_file(path: str, start: int = 0, inside: bool = False) -> tuple[int, bool]:
    """Mask the secrets of ``path``'s complete lines from ``start`` on, in place -> (where
    the next pass starts, whether a PEM key block is open there). A file now shorter than
    ``start`` was truncated (the chain's own ``> LOG``): read again from its start. A symlink,
    a folder or a file that cannot be opened is left as it is."""
    from forensics_parsers.secrets import HINT, mask

    hint = re.compile(HINT)
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return start, inside
    pos = start
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return start, inside
        if st.st_size < pos:
            pos, inside = 0, False
        while pos < st.st_size:
            block = os.pread(fd, min(BLOCK, st.st_size - pos), pos)
            cut = block.rfind(b"\n") + 1
            if not cut and len(block) < BLOCK:
                break  # a line still being written: the next pass reads it whole
            cut = cut or len(block)
            piece = block[:cut]
            if inside or hint.search(piece.decode("utf-8", "surrogateescape")):
                new, inside = mask(piece, inside)
                if new != piece:
                    os.pwrite(fd, new, pos)
            pos += cut
    except OSError:
        pass
    finally:
        os.close(fd)
    return pos, inside


def launch_files(paths: list[str | None], folder: str | None) -> list[str]:
    """``paths`` and the files of every launch folder in ``folder`` (the journal's
    ``….journal.d``: one folder per launch id; one a kill -9 cut short is masked too)."""
    names = [p for p in paths if p]
    if folder:
        with contextlib.suppress(OSError):
            for launch in sorted(os.listdir(folder)):
                d = os.path.join(folder, launch)
                if os.path.isdir(d) and not os.path.islink(d):
                    names += [os.path.join(d, n) for n in sorted(os.listdir(d))]
    return [n for n in names if os.path.basename(n) != SCRIPT_NAME]


def scrub_launch(paths: list[str | None], folder: str | None) -> None:
    """One pass of ``scrub_file`` over ``launch_files``."""
    for p in launch_files(paths, folder):
        scrub_file(p)


class _Launch:
    """What the follower reads of the journal: whether the supervisor has exited, and the
    server's process group and whether its step has ended."""

    def __init__(self, journal: str, launch_id: str) -> None:
        self.journal, self.launch_id = journal, launch_id
        self.pos, self.exited, self.pgid, self.server_step, self.server_ended = (
            0,
            False,
            0,
            None,
            False,
        )
        self._skipping = False

    def read(self) -> None:
        """The journal's new complete lines, at most ``BLOCK`` bytes a pass (a journal that
        grows without end, or a line longer than that, never costs more memory: such a line
        is skipped, no event of the wrapper's is that long)."""
        try:
            with open(self.journal, "rb") as f:
                while True:
                    f.seek(self.pos)
                    data = f.read(BLOCK)
                    cut = data.rfind(b"\n") + 1
                    if not cut and len(data) == BLOCK:
                        self.pos += BLOCK  # inside an overlong line: skipped, as its rest
                        self._skipping = True
                        continue
                    if not cut:
                        return
                    self.pos += cut
                    lines = data[:cut].split(b"\n")
                    if self._skipping:
                        lines, self._skipping = lines[1:], False  # the overlong line's end
                    self._events(lines)
        except OSError:
            return

    def _events(self, lines: list[bytes]) -> None:
        for line in lines:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if not isinstance(ev, dict) or ev.get("launch_id") != self.launch_id:
                continue
            kind = ev.get("event")
            if kind == "exit":
                self.exited = True
            elif kind == "server":
                self.pgid, self.server_step = (
                    int(ev.get("pgid") or ev.get("pid") or 0),
                    ev.get("step"),
                )
            elif (
                kind == "end"
                and self.server_step is not None
                and ev.get("step") == self.server_step
            ):
                self.server_ended = True

    def done(self, supervisor: int) -> bool:
        """The supervisor has exited (its exit event, or it is gone: a kill -9) and the
        server is gone (never started, its step ended, or its group has no process)."""
        self.read()
        supervisor_gone = self.exited or not _alive(supervisor)
        if not supervisor_gone:
            return False
        if not self.pgid or self.server_ended:
            return True
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    try:  # a zombie no one reaps (a container without an init) has exited
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[:1] != [b"Z"]
    except (OSError, IndexError):
        return True


def follow(journal: str, launch_id: str, logs: list[str], folder: str, supervisor: int) -> None:
    """Mask the launch's files as they are written until the launch's processes are gone
    (``_Launch.done``); a SIGTERM, SIGHUP or SIGINT ends it after one last pass."""
    stop: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda n, _f: stop.append(n))
    launch = _Launch(journal, launch_id)
    at: dict[str, tuple[int, bool]] = {}
    while True:
        finished = launch.done(supervisor) or bool(stop)
        for p in launch_files([*logs, journal], folder):
            at[p] = scrub_file(p, *at.get(p, (0, False)))
        if finished:
            return
        time.sleep(FOLLOW_POLL_S)


FOLLOW_ENV = "FORENSICS_SCRUB"  # the follower's arguments (JSON), kept off its command line


def follow_command(python: str, journal: str, folder: str, launch_id: str, supervisor: int,
                   logs: list[str]) -> str:  # fmt: skip
    """The shell command that starts the follower, run in the launch's work folder: its
    arguments in the environment, so its command line (``python3 ./scrub.py follow``) names no
    path a chain's ``pkill -f`` or a check of what runs could match."""
    import shlex

    args = {"journal": journal, "folder": folder, "launch_id": launch_id,
            "supervisor": supervisor, "logs": logs}  # fmt: skip
    return (
        f"{FOLLOW_ENV}={shlex.quote(json.dumps(args))} "
        f"exec {shlex.quote(python)} ./{SCRIPT_NAME} follow"
    )


def main(argv: list[str]) -> int:
    """``follow`` (arguments in FOLLOW_ENV) or ``once JOURNAL FOLDER LOG…``: what the launcher
    runs on the host."""
    if argv == ["follow"] and FOLLOW_ENV in os.environ:
        a = json.loads(os.environ[FOLLOW_ENV])
        follow(a["journal"], a["launch_id"], a["logs"], a["folder"], int(a["supervisor"]))
        return 0
    if argv[:1] == ["once"] and len(argv) >= 3:
        scrub_launch([argv[1], *argv[3:]], argv[2])
        return 0
    return 2


def follower_script() -> str:
    """The follower as one self-contained python3 script: the parser's secrets modules and
    this one, from their own source (one implementation on every host)."""
    import inspect

    from forensics_parsers import secret_search, secrets

    sources = [(m.__name__, inspect.getsource(m)) for m in (secret_search, secrets)]
    sources.append(("forensics_scrub", inspect.getsource(sys.modules[__name__])))
    return (
        "import sys, types\n"
        "pkg = types.ModuleType('forensics_parsers'); pkg.__path__ = []\n"
        "sys.modules['forensics_parsers'] = pkg\n"
        f"for name, src in {sources!r}:\n"
        "    m = types.ModuleType(name); sys.modules[name] = m\n"
        "    exec(compile(src, name, 'exec'), m.__dict__)\n"
        "sys.exit(sys.modules['forensics_scrub'].main(sys.argv[1:]))\n"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
