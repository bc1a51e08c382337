"""Streams of an SSH host: the standard output of a remote script as it arrives, read ahead,
and a remote shell started ahead of the next stream.

A mixin of ``SSHHost`` (it uses the host's transport, lock and timeouts).

**Why a shell is started ahead.** What a stream waits for first is not the link but the start
of a session on the host: sshd forks, runs the user's shell, which runs ``sh``. Measured on the
loopback sshd of ``scripts/bench_ingest.py`` (2 cores at load 5-7): 0.35-0.8 s from the exec
request to the exit of ``true``, against ~0.05 s to open the channel; an ingest paid it once per
file, after the file's stat and the parser's import. A caller that knows more streams are
coming (``expect_streams``: ingest, with the count of its files on this host and how many it
reads at once) has channels running ``sh -s`` kept waiting; ``stream`` sends one the script on
its standard input (then EOF), so the session and the shell started while the ingest did other
work. At most as many shells wait as streams are read at once, never more than are still
announced; an unused one ends with the connection (EOF on its input: it runs nothing).

**Whether it is up.** A shell started ahead writes one line (READY) as soon as the login
shell runs it, before the script's output (dropped from the stream). A stream made from one
whose line had come is ``ready``: its bytes follow within milliseconds, so the caller may wait
for them (logstream._lead); one whose shell is still starting, or a new session, is not.
"""

from __future__ import annotations

import contextlib
import queue
import shlex
import threading
from collections.abc import Callable, Iterator
from typing import Any

from forensics.errors import RemoteError
from forensics.hosts.base import STREAM_AHEAD, STREAM_WINDOW


def drained(
    ahead: queue.Queue,
    wait: float | None,
    where: str,
    lost: Callable[[BaseException], BaseException] | None = None,
) -> Iterator[bytes]:
    """What a read-ahead thread puts in ``ahead``, until it puts None: every wait bounded by
    ``wait`` seconds (RemoteError: no data; None: not bounded), an error it puts raised here (as ``lost`` makes
    it, when given). The remote stream's reader (``_pieces``) and the decode thread of a
    remote log (forensics/logstream.py) read their threads so."""
    while True:
        try:
            item = ahead.get(timeout=wait)
        except queue.Empty:
            raise RemoteError(
                f"{where}: no data for {wait:g} s",
                hint="the connection may have dropped; re-run",
            ) from None
        if item is None:
            return
        if isinstance(item, BaseException):
            raise item if lost is None else lost(item)
        yield item


STREAM_PACKET = 1 << 15  # max packet size asked for a stream's channel (OpenSSH sends <= 32 KiB)
# what a shell started ahead runs: one line (READY) once the login shell is up, then the script
# that comes on its stdin
SPARE_SHELL = "echo; exec sh -s"
READY = b"\n"
# sessions of one connection that streams and waiting shells may take: OpenSSH's MaxSessions
# (10) less the SFTP session, so a waiting shell never makes a stream's own session fail
SESSIONS = 9


class Streams:
    """``stream`` and the shell started ahead of it (``expect_streams``)."""

    address: str
    op_timeout: float
    cfg: Any
    _client: Any
    _lock: threading.RLock
    _spares: list[Any]  # channels running SPARE_SHELL waiting for a script, oldest first (SSHHost)
    _warming = 0  # threads opening one
    _streams_expected = 0  # streams announced by expect_streams and not started yet
    _streams_at_once = 1  # streams read at the same time (as many shells wait)
    _streams_open = 0  # streams being read

    def _transport(self):  # noqa: ANN202 - provided by SSHHost
        raise NotImplementedError

    def expect_streams(self, n: int, at_once: int = 1) -> None:
        """``n`` more ``stream`` calls are coming (an ingest of ``n`` files of this host),
        ``at_once`` of them read at the same time: start the remote shells of the next ones
        now, and after each stream the next (``n`` = 0: stop)."""
        with self._lock:
            self._streams_expected = max(0, n)
            self._streams_at_once = max(1, at_once)
            keep = min(self._streams_expected, self._streams_at_once)
            extra, self._spares = self._spares[keep:], self._spares[:keep]
        for chan in extra:
            with contextlib.suppress(Exception):
                chan.close()
        self._warm()

    def stream_coming(self) -> None:
        """A stream is coming, how many is not known yet (ingest, its host just connected):
        one shell starts now, unless streams are announced already (``expect_streams``
        sets the count once the files are known, keeping this shell)."""
        with self._lock:
            if self._streams_expected:
                return
        self.expect_streams(1)

    def _warm(self) -> None:
        with self._lock:
            room = SESSIONS - self._streams_open
            want = min(self._streams_expected, self._streams_at_once, room)
            more = want - len(self._spares) - self._warming
            self._warming += max(0, more)
        for _ in range(more):
            threading.Thread(
                target=self._open_spare, name="forensics-stream-warm", daemon=True
            ).start()

    @property
    def spares(self) -> int:
        """Shells started ahead and waiting."""
        with self._lock:
            return len(self._spares)

    def _open_spare(self) -> None:
        """(thread) A channel running SPARE_SHELL on the live connection (never a reconnect:
        a dead one is the next command's to report)."""
        chan = None
        try:
            t = self._client.get_transport() if self._client is not None else None
            if t is not None and t.is_active():
                chan = _exec(t, SPARE_SHELL, STREAM_WINDOW, self.cfg.connect_timeout)
        except Exception:  # noqa: BLE001 - no spare: the stream opens its own channel
            chan = None
        with self._lock:
            self._warming -= 1
            spares = self._spares
            if chan is not None and len(spares) < self._streams_expected:
                spares.append(chan)
                chan = None
        if chan is not None:
            chan.close()

    def _take_spare(self, script: str) -> tuple[Any, bool] | None:
        """The waiting shell, given ``script``, and whether it was up (its READY line had come;
        None: none waits, or it died meanwhile)."""
        with self._lock:
            spares = self._spares
            chan = spares.pop(0) if spares else None
        if chan is None:
            return None
        try:
            if chan.closed or chan.exit_status_ready():
                raise EOFError("the shell started ahead has ended")
            ready = chan.recv_ready()
            chan.sendall(script.encode() + b"\n")
            chan.shutdown_write()
        except Exception:  # noqa: BLE001 - paramiko's, OSError, EOFError: open a fresh one
            chan.close()
            return None
        return chan, ready

    def _drop_spare(self) -> None:
        """Close the waiting shells (the connection closes or is discarded)."""
        with self._lock:
            spares, self._spares, self._streams_expected = self._spares, [], 0
        for chan in spares:
            with contextlib.suppress(Exception):
                chan.close()

    def _stream_channel(self, script: str, window: int) -> tuple[Any, bytes, bool]:
        """A channel running ``script``: the shell started ahead if one waits, else a new one;
        (it, the bytes before the script's output, whether its shell is up)."""
        import paramiko

        spare = self._take_spare(script) if window == STREAM_WINDOW else None
        if spare is not None:
            (chan, ready), before = spare, READY
        else:
            ready, before = False, b""
            try:
                chan = _exec(
                    self._transport(),
                    shlex.join(["sh", "-c", script]),
                    window,
                    self.cfg.connect_timeout,
                )
                chan.shutdown_write()
            except (paramiko.SSHException, OSError, EOFError) as exc:
                raise RemoteError(
                    f"{self.address}: could not start a command: {exc}",
                    hint="the connection may have dropped; re-run",
                ) from None
        with self._lock:
            self._streams_expected -= 1
            self._streams_open += 1
        self._warm()  # the next one's shell starts while this one is read
        return chan, before, ready

    def stream(self, script: str, *, window: int = STREAM_WINDOW) -> RemoteStream:
        """The standard output of ``script`` (run by the remote ``sh``) as it arrives, in
        pieces (iterate the RemoteStream returned); it starts now, and a read-ahead thread
        keeps at most ``window`` bytes waiting, so the transfer goes on while the caller
        works on what came. Every wait is bounded by the op timeout (S13). Raises
        RemoteError when it cannot start (here), the link drops, or the command exits
        non-zero (its stderr in the message; while iterating)."""
        chan, before, ready = self._stream_channel(script, window)
        chan.settimeout(self.op_timeout)
        return RemoteStream(self, chan, before, ready)

    def _pieces(self, ahead: queue.Queue) -> Iterator[bytes]:
        """What the read-ahead thread queued, until the end of the output."""

        def lost(exc: BaseException) -> RemoteError:
            return RemoteError(
                f"{self.address}: connection lost while reading ({exc})",
                hint="re-run; the bytes read so far were kept",
            )

        return drained(ahead, self.op_timeout + 5, self.address, lost)


class RemoteStream:
    """A started stream (``Streams.stream``): iterate it for its pieces; ``arrived`` says
    whether its first bytes came (the remote shell runs it); ``ready``, whether its shell was
    up when it started (its bytes are about to come); ``close`` ends it, read or not."""

    def __init__(self, host: Streams, chan: Any, before: bytes = b"", ready: bool = False):
        self._host, self._chan = host, chan
        self._before = len(before)  # bytes the shell writes before the script's output
        self.ready = ready
        self._ahead: queue.Queue[bytes | BaseException | None] = queue.Queue(STREAM_AHEAD)
        self._stop, self._first = threading.Event(), threading.Event()
        self._ended = False
        self._reader = threading.Thread(target=self._pull, name="forensics-stream", daemon=True)
        self._reader.start()
        self._pieces = self._read()

    def _pull(self) -> None:
        """(thread) The channel's output into the queue, then None (or the error)."""
        try:
            while not self._stop.is_set():
                data = self._chan.recv(1 << 20)
                if not data:
                    break
                if self._before:  # the shell's READY line
                    n = min(self._before, len(data))
                    data, self._before = data[n:], self._before - n
                    if not data:
                        continue
                self._ahead.put(data)
                self._first.set()
            self._ahead.put(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the reading thread
            self._ahead.put(exc)
        finally:
            self._first.set()

    def arrived(self, timeout: float = 0.0) -> bool:
        """Whether output (or the end) came, waiting at most ``timeout`` seconds for it."""
        return self._first.wait(timeout) if timeout > 0 else self._first.is_set()

    def __iter__(self) -> RemoteStream:
        return self

    def __next__(self) -> bytes:
        return next(self._pieces)

    def _read(self) -> Iterator[bytes]:
        chan = self._chan
        try:
            yield from self._host._pieces(self._ahead)
            rc = chan.recv_exit_status()
            if rc != 0:
                err = b""
                with contextlib.suppress(Exception):
                    while chan.recv_stderr_ready():
                        err += chan.recv_stderr(1 << 12)
                raise RemoteError(
                    f"{self._host.address}: exit {rc}: "
                    f"{err.decode(errors='replace').strip()[:200]}",
                    hint="check the path and that the command exists on the host",
                )
        finally:
            self._end()

    def close(self) -> None:
        self._end()  # first: a read waiting in another thread (logstream's decode) ends
        with contextlib.suppress(ValueError):  # being iterated there: it ends on the close
            self._pieces.close()

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        host = self._host
        with host._lock:
            host._streams_open -= 1
        self._stop.set()
        with contextlib.suppress(Exception):
            self._chan.close()
        with contextlib.suppress(queue.Empty):  # unblock a reader waiting to put
            while True:
                self._ahead.get_nowait()
        self._reader.join(timeout=5)


def _exec(transport: Any, command: str, window: int, timeout: float) -> Any:
    """A session channel on ``transport`` running ``command`` (its input still open)."""
    chan = transport.open_session(
        window_size=window, max_packet_size=STREAM_PACKET, timeout=timeout
    )
    try:
        chan.exec_command(command)
    except BaseException:
        chan.close()
        raise
    return chan
