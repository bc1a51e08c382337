"""Child processes that make the simulator's process tree look like a real server's.

SGLang runs one scheduler process per TP rank (titled ``sglang::scheduler_TP0`` ...; from 0.4.7
a tp=1 scheduler is just ``sglang::scheduler``) and a ``sglang::detokenizer``. The children here
only sleep: they exist so that ``ps``, ``pkill -f``, process-group kills and orphan handling can be
tested for real. They die with the parent (``PR_SET_PDEATHSIG`` plus a parent-pid check), except
the one ``--sim-orphan`` keeps: it stays alive after the parent dies and holds the HTTP port.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import time

PR_SET_PDEATHSIG = 1


def _set_pdeathsig(sig: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the parent-pid check still works
        pass


def _child_main(title: str, parent: int, orphan_port: tuple[str, int] | None) -> None:
    try:
        import setproctitle

        setproctitle.setproctitle(title)
    except ImportError:  # pragma: no cover - setproctitle is a dependency
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    if orphan_port is None:
        _set_pdeathsig(signal.SIGKILL)
    held: socket.socket | None = None
    while True:
        if os.getppid() != parent:
            if orphan_port is None:
                os._exit(0)
            if held is None:
                held = _hold_port(*orphan_port)
        time.sleep(0.2)


def _hold_port(host: str, port: int) -> socket.socket | None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    for _ in range(50):
        try:
            sock.bind((host, port))
            sock.listen(16)
            return sock
        except OSError:
            time.sleep(0.1)
    sock.close()
    return None


def scheduler_title(style_name: str, tag: str) -> str:
    """``sglang::scheduler`` + the rank tag with spaces as underscores (SGLang's rule)."""
    return "sglang::scheduler" + tag.replace(" ", "_")


class RankProcesses:
    """Forks the children; ``stop()`` ends them (all but a deliberate orphan)."""

    def __init__(self) -> None:
        self.pids: list[int] = []
        self.titles: dict[int, str] = {}
        self.orphan_pid: int | None = None

    def spawn(self, titles: list[str], *, orphan_index: int | None, port: tuple[str, int]) -> None:
        parent = os.getpid()
        for i, title in enumerate(titles):
            pid = os.fork()
            if pid == 0:  # child
                try:
                    _child_main(title, parent, port if i == orphan_index else None)
                finally:
                    os._exit(0)
            self.pids.append(pid)
            self.titles[pid] = title
            if i == orphan_index:
                self.orphan_pid = pid

    def kill(self, pid: int, sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        self._reap(pid)

    def stop(self, *, keep_orphan: bool = False) -> None:
        for pid in list(self.pids):
            if keep_orphan and pid == self.orphan_pid:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in list(self.pids):
            if keep_orphan and pid == self.orphan_pid:
                continue
            self._reap(pid)

    def _reap(self, pid: int) -> None:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        if pid in self.pids:
            self.pids.remove(pid)
