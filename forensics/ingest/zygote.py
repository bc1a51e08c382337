"""A pool's workers forked from one process that has imported the parse: the zygote (issue 15;
docs/performance.md, "Workers forked from a zygote, fourteenth stop").

A worker started as a fresh interpreter imports polars, the parser and the classifier, ~0.2 s
of CPU here and 0.2-0.3 s on 16 cores: 8 workers, 8 times the same imports on a machine the
ingest keeps busy. A pool (forensics/ingest/pool.py) starts one zygote instead, as it started
its first worker (the same environment, ``_prepare``: one arena, signals ignored, collector
paused, the parse imported); the zygote forks each worker on request (~ms, its pages shared
copy-on-write), the worker's socket passed to it with SCM_RIGHTS. Each worker is the zygote's
child: the zygote reaps it and sends its exit status back (``Forked``), so a worker killed by
a signal still reports it, as a spawned one did.

fork is safe only while the zygote has one thread. polars starts threads at its import: its
out-of-core cleaner (its startup function, ``__register_startup_deps``) and jemalloc's
background threads. So the zygote runs polars' startup in each worker after the fork instead
(``_DeferredStartup``, ~8 ms), and turns jemalloc's background threads off (``MALLOC_CONF``:
they used no measurable CPU, docs/performance.md "A worker's CPU, thirteenth stop"). Before
each fork it counts its threads; more than one (another polars, another import), it says so
and the pool spawns fresh interpreters for the rest of the ingest, as it does where fork or
SCM_RIGHTS is not available.

When its control socket closes (the pool closed, or the main process died), the zygote kills
the workers it still has, reaps them and exits; a worker whose zygote dies is killed
(PR_SET_PDEATHSIG). No process of the pool outlives the ingest."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forensics.unread import Wrapping

# what the zygote adds to polars' allocator settings: no background threads (it forks)
MALLOC_CONF = ("_RJEM_MALLOC_CONF", "background_thread:false")
# a message on the control socket: kind, pid (a fork request's: the worker's threads), value
_MSG = struct.Struct("=cii")
SLICE = 0.05  # the longest the main process's lock on the zygote's socket is held
CODE = "from forensics.ingest.zygote import zygote_entry; zygote_entry()"
EARLY_ARG = "early"  # argv[2] of a zygote the entry point started: it dies with that thread
_EARLY: list[Zygote] = []  # that zygote, until the ingest's pool takes it (``Zygote.start``)


def interpreter(
    code: str, fd: int, threads: int, env: dict[str, str] | None = None, *more: str
) -> Any:
    """A fresh interpreter running ``code`` with ``fd`` in its argv[1] (``more`` after it; a
    worker, or a zygote): polars' threads ``threads``, this forensics importable, the signals
    the main process handles blocked from its start (the mask survives exec: a Ctrl-C while it
    imports cannot print its traceback; it ignores them, then unblocks them)."""
    import subprocess  # (here: the entry point imports this module for every ingest)
    import sys

    from forensics.ingest.pool import _SIGNALS

    env = dict(env or os.environ, POLARS_MAX_THREADS=str(threads))
    top = str(Path(__file__).resolve().parents[2])  # where this forensics is imported from
    env["PYTHONPATH"] = os.pathsep.join(p for p in (top, env.get("PYTHONPATH")) if p)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    try:
        return subprocess.Popen(
            [sys.executable, "-c", code, str(fd), *more],
            pass_fds=(fd,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


# -- the main process's side -------------------------------------------------------------------
class Zygote:
    """A pool's zygote, seen from the main process: ``worker`` asks it for a worker. Its
    replies are read by whichever thread needs one (under ``_lock``): a fork's pid, a
    worker's exit status, or that it cannot fork (``threads``: the pool spawns instead)."""

    def __init__(self, early: bool = False):
        import socket

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ)
        name, conf = MALLOC_CONF
        env[name] = ",".join(c for c in (env.get(name), conf) if c)
        try:
            more = (EARLY_ARG,) if early else ()
            # one polars thread: it starts no pool of them (each fork sets its worker's)
            self.proc = interpreter(CODE, theirs.fileno(), 1, env, *more)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.sock = ours
        self._lock = threading.Lock()
        self._pending: dict[int, Forked] = {}  # by request: asked for, their pid not known yet
        self._asked = 0  # the requests made (each one's number comes back with its reply)
        self._exits: dict[int, int] = {}
        self.threads = 0  # the threads it reported (not 0: it forks no more)
        self.gone = False  # its control socket ended: its children are killed with it

    @classmethod
    def start(cls) -> Zygote | None:
        """A zygote (the entry point's, ``early``, if it lives: each fork sets its worker's
        threads), or None where workers cannot be forked (no fork, no SCM_RIGHTS)."""
        while _EARLY:
            zygote = _EARLY.pop()
            if zygote.proc.poll() is None:
                return zygote
            zygote.close()
        if not _can_fork():
            return None
        try:
            return cls()
        except OSError:
            return None

    def worker(self, theirs: Any, spawn: Callable[[int], Any], threads: int) -> Any:
        """A worker on the socket ``theirs`` (closed here: none of its ends stays in this
        process, so a worker's death ends its pipe), of ``threads`` polars threads: a
        ``Forked``, or ``spawn(fd)``'s process where the zygote forks no more."""
        import socket

        try:
            with self._lock:
                if not (self.threads or self.gone):
                    self._asked += 1
                    msg = _MSG.pack(b"F", threads, self._asked)  # (a request: no pid)
                    try:
                        socket.send_fds(self.sock, [msg], [theirs.fileno()])
                    except OSError:
                        self._ended()
                    else:
                        forked = self._pending[self._asked] = Forked(self, spawn)
                        return forked
            return spawn(theirs.fileno())
        finally:
            theirs.close()

    def read(self, timeout: float | None) -> None:
        """Take the zygote's messages: wait for one ``timeout`` seconds at most (None: for
        ever), then take all that came meanwhile. The lock is held a slice at a time: a
        thread that asks for a worker meanwhile waits no longer than that."""
        import select
        import socket

        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = SLICE if deadline is None else min(SLICE, deadline - time.monotonic())
            with self._lock:
                if self.gone:
                    return
                ready, _, _ = select.select([self.sock], [], [], max(0.0, left))
                while ready:
                    try:
                        msg, fds, _, _ = socket.recv_fds(self.sock, _MSG.size, 1)
                    except OSError:
                        msg, fds = b"", []
                    if len(msg) != _MSG.size:
                        self._ended()
                        return
                    self._take(*_MSG.unpack(msg), fds)
                    ready, _, _ = select.select([self.sock], [], [], 0)
                    timeout = 0  # something came: take the rest, wait no more
            if timeout == 0 or (deadline is not None and time.monotonic() >= deadline):
                return

    def _take(self, kind: bytes, pid: int, value: int, fds: list[int]) -> None:
        """b"X": a worker's exit status; b"P": request ``value`` forked as ``pid``; b"T":
        request ``value`` not forked, its socket back (the zygote has ``pid`` threads: it
        forks no more)."""
        if kind == b"X":
            self._exits[pid] = value
        forked = self._pending.pop(value, None) if kind != b"X" else None
        if kind == b"T":
            self.threads = pid
        if forked is not None and kind == b"P":
            forked._pid = pid
        elif forked is not None and kind == b"T" and fds:
            forked._spawned(fds.pop())
        elif forked is not None:
            forked._lost = True
        for fd in fds:
            os.close(fd)

    def _ended(self) -> None:
        """Its control socket ended: the zygote is gone, its workers killed with it
        (PR_SET_PDEATHSIG), those it had not forked lost (their pipes end)."""
        self.gone = True
        pending, self._pending = self._pending, {}
        for forked in pending.values():
            forked._lost = True

    def exit(self, pid: int) -> int | None:
        if pid in self._exits:
            return self._exits[pid]
        return -signal.SIGKILL if self.gone else None

    def kill(self, pid: int) -> None:
        """SIGKILL to a worker the zygote has not reaped yet (its pid is not reused)."""
        with self._lock:
            if not self.gone and pid not in self._exits:
                try:
                    self.sock.send(_MSG.pack(b"K", pid, 0))
                except OSError:
                    self._ended()

    def close(self) -> None:
        """The zygote ends (it kills the workers it still has, reaps them, exits)."""
        import subprocess

        self.sock.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Forked:
    """A worker forked by the zygote, with the calls of a ``subprocess.Popen`` the pool makes
    (``pid``, ``poll``, ``wait``, ``kill``); or spawned, where the zygote could not fork it;
    or lost with a zygote that ended before it forked it (it reads as killed)."""

    def __init__(self, zygote: Zygote, spawn: Callable[[int], Any]):
        self._zygote, self._spawn = zygote, spawn
        self._pid: int | None = None
        self._popen: Any = None
        self._lost = False

    def _spawned(self, fd: int) -> None:
        try:
            self._popen = self._spawn(fd)
        except OSError:
            self._lost = True
        finally:
            os.close(fd)

    def _started(self) -> bool:
        """Forked, spawned or lost (else the zygote may still be importing the parse)."""
        while self._pid is None and self._popen is None and not self._lost:
            self._zygote.read(None)
        return not self._lost

    @property
    def pid(self) -> int:
        if not self._started():
            raise ProcessLookupError("its zygote ended before it forked it")
        return self._popen.pid if self._popen is not None else self._pid  # type: ignore[return-value]

    def poll(self) -> int | None:
        self._zygote.read(0)
        if self._popen is not None:
            return self._popen.poll()
        if self._lost:
            return -signal.SIGKILL
        return None if self._pid is None else self._zygote.exit(self._pid)

    def wait(self, timeout: float | None = None) -> int:
        import subprocess

        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            code = self.poll()
            if self._popen is not None:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                return self._popen.wait(left)
            if code is not None:
                return code
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired("forensics ingest worker", timeout or 0)
            self._zygote.read(left)

    def kill(self) -> None:
        if not self._started():
            return
        if self._popen is not None:
            self._popen.kill()
        else:
            self._zygote.kill(self._pid)  # type: ignore[arg-type]


# -- the zygote process ------------------------------------------------------------------------
class _DeferredStartup:
    """A ``sys.meta_path`` finder: polars' runtime module as its finders give it, its
    startup function (which starts polars' out-of-core cleaner thread) recorded, not run,
    while the zygote imports the parse; each forked worker runs it (``run``)."""

    NAME, STARTUP = "polars._plr", "__register_startup_deps"

    def __init__(self) -> None:
        self.runtime: Any = None  # polars' runtime module, its startup function replaced
        self.startup: Callable[..., Any] | None = None
        self.calls: list[tuple[tuple, dict]] = []

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        from forensics.unread import wrapped_spec

        if name != self.NAME:
            return None
        return wrapped_spec(self, name, path, target, functools.partial(_Recording, self))

    def record(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append((args, kwargs))

    def restore(self) -> None:
        """Polars' startup function back where it was (the imports are done)."""
        if self.runtime is not None:
            setattr(self.runtime, self.STARTUP, self.startup)

    def run(self) -> None:
        for args, kwargs in self.calls:
            self.startup(*args, **kwargs)  # type: ignore[misc]


class _Recording(Wrapping):
    """polars._plr's loader: after it ran, its runtime's startup function is the finder's
    ``record``."""

    def __init__(self, deferred: _DeferredStartup, loader: object, name: str):
        super().__init__(loader, name)
        self._deferred = deferred

    def exec_module(self, module: object) -> None:
        import sys

        self._loader.exec_module(module)  # type: ignore[attr-defined]
        runtime = sys.modules[self._name]  # polars._plr puts its runtime module there
        startup = getattr(runtime, _DeferredStartup.STARTUP, None)
        if startup is not None:
            self._deferred.runtime, self._deferred.startup = runtime, startup
            setattr(runtime, _DeferredStartup.STARTUP, self._deferred.record)


def zygote_entry() -> None:
    """The zygote's main: its control socket is the fd in argv[1]."""
    import socket
    import sys

    from forensics.ingest import pool

    if sys.argv[2:3] == [EARLY_ARG]:  # started by the main thread: ends with it (no pool
        _die_with(os.getppid())  # took it, the command failed, the process was killed)
    deferred = _DeferredStartup()
    sys.meta_path.insert(0, deferred)
    try:
        pool._prepare()
    finally:
        sys.meta_path.remove(deferred)
        deferred.restore()
    ctl = socket.socket(fileno=int(sys.argv[1]))
    _serve(ctl, deferred)
    # its children reaped, nothing to flush (its output is /dev/null): the interpreter's
    # teardown of the parse's modules (~0.1 s here) would only delay the pool's ``close``
    os._exit(0)


def _threads() -> int:
    """This process's threads (0 where it cannot tell: no /proc)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


def _serve(ctl: Any, deferred: _DeferredStartup) -> None:
    """Fork a worker for each request, report each child's exit, until the socket ends."""
    import select
    import socket

    wake_r, wake_w = os.pipe()  # SIGCHLD wakes the select
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: set[int] = set()
    while True:
        ready, _, _ = select.select([ctl, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 512)
        _reap(ctl, children, block=False)
        if ctl not in ready:
            continue
        try:
            msg, fds, _, _ = socket.recv_fds(ctl, _MSG.size, 1)
        except OSError:
            msg, fds = b"", []
        if not msg:
            break
        if msg[:1] == b"K" and len(msg) == _MSG.size:
            pid = _MSG.unpack(msg)[1]
            if pid in children:
                os.kill(pid, signal.SIGKILL)
        elif msg[:1] == b"F" and fds and len(msg) == _MSG.size:
            _, wanted, asked = _MSG.unpack(msg)
            threads = _threads()
            if threads != 1:  # fork is safe only with one thread: the pool spawns instead
                with contextlib.suppress(OSError):
                    socket.send_fds(ctl, [_MSG.pack(b"T", threads or -1, asked)], fds[:1])
                os.close(fds[0])
                continue
            pid = _fork(fds[0], (ctl.fileno(), wake_r, wake_w), deferred, wanted)
            children.add(pid)
            _send(ctl, b"P", pid, asked)
    for pid in children:  # the pool is closed or the main process gone: none outlives it
        os.kill(pid, signal.SIGKILL)
    _reap(ctl, children, block=True)


def _send(ctl: Any, kind: bytes, pid: int, value: int) -> None:
    try:
        ctl.send(_MSG.pack(kind, pid, value))
    except OSError:
        pass  # the main process is gone: the socket's end comes next


def _reap(ctl: Any, children: set[int], block: bool) -> None:
    """Reap the children that ended, each exit status sent to the main process."""
    while children:
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        children.discard(pid)
        _send(ctl, b"X", pid, os.waitstatus_to_exitcode(status))


def _fork(fd: int, close: tuple[int, ...], deferred: _DeferredStartup, threads: int) -> int:
    """A worker on the socket ``fd``, of ``threads`` polars threads: its pid (here the fd
    is closed)."""
    import ctypes  # noqa: F401 - imported here, not in each worker
    import gc

    gc.freeze()  # what the zygote made stays out of the workers' collections (no page touched)
    zygote = os.getpid()
    pid = os.fork()
    if pid:
        os.close(fd)
        return pid
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for other in close:
            os.close(other)
        _die_with(zygote)
        code = _worker(fd, deferred, threads)
    finally:
        os._exit(code)


def _die_with(zygote: int) -> None:
    """SIGKILL to this worker when its zygote ends (Linux; elsewhere its pipe's end)."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != zygote:  # it ended before the call
        os._exit(1)


def _worker(fd: int, deferred: _DeferredStartup, threads: int) -> int:
    """A forked worker's main: polars' startup, the collector on, then the pool's loop. The
    exit handlers run as at an interpreter's end (polars' own among them). Polars' thread
    pool starts at its first use, never in the zygote (one thread), so the count read then
    is this worker's own."""
    import atexit
    from multiprocessing.connection import Connection

    from forensics.collector import resume
    from forensics.ingest import pool

    os.environ["POLARS_MAX_THREADS"] = str(threads)
    deferred.run()
    resume()
    try:
        pool._worker_main(Connection(fd))
    finally:
        atexit._run_exitfuncs()
    return 0


# -- the entry point's zygote ------------------------------------------------------------------
def early(args: list[str]) -> None:
    """(the entry point, before the CLI is imported) ``forensics ... ingest`` of two remote
    inputs or more (forensics/ingest/ahead.py ``remote_inputs``): the pool's zygote started
    now, ~0.1 s before the ingest's pool would start it, so that its imports run while the CLI
    is imported and the hosts connect (docs/performance.md, "Eight hosts on 16 cores,
    fifteenth stop"). The arguments are read here only to guess (``--jobs 1`` starts none):
    the pool takes it whatever its workers' threads, which each fork sets; one no pool takes
    ends with the main thread (PR_SET_PDEATHSIG). Anything unexpected starts nothing."""
    try:
        at = args.index("ingest")
    except ValueError:
        return
    rest = args[at + 1 :]
    jobs = _jobs_of(rest)
    with contextlib.suppress(Exception):
        from forensics.ingest.ahead import remote_inputs

        if remote_inputs(rest, jobs) and _can_fork():
            _EARLY.append(Zygote(early=True))


def _can_fork() -> bool:
    """Whether workers can be forked here (fork, SCM_RIGHTS, SOCK_SEQPACKET)."""
    import socket

    needs = (hasattr(socket, name) for name in ("send_fds", "SOCK_SEQPACKET"))
    return hasattr(os, "fork") and all(needs)


def _jobs_of(args: list[str]) -> int | None:
    """``--jobs N`` / ``--jobs=N`` / ``-j N`` / ``-jN`` among ``args`` (None: not given, or
    not a number: the CLI says so)."""
    for i, arg in enumerate(args):
        if arg in ("-j", "--jobs"):
            value = args[i + 1] if i + 1 < len(args) else ""
        elif arg.startswith("--jobs="):
            value = arg[len("--jobs=") :]
        elif arg.startswith("-j") and not arg.startswith("--"):
            value = arg[2:]
        else:
            continue
        return int(value) if value.isdigit() else None
    return None
