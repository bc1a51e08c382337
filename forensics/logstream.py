"""A remote log's bytes as one stream (``streamed``, what ``LogSource.raw`` reads a remote
file of STREAM_MIN bytes or more through): one exec channel runs ``wire_script``, which sends
the bytes through the first of ``WIRE`` the host has; read ahead while the caller parses
(``SSHHost.stream``); the first bytes over SFTP while the stream's shell starts on the host
(``_lead``); what the stream does not deliver over SFTP from where it stopped.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import shlex
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

# a remote stream's first bytes come over SFTP while its shell starts (``_lead``):
# this much at a time, after waiting this long for the stream itself
LEAD_CHUNK = 1 << 20
LEAD_WAIT = 0.05
# chunks (READ_CHUNK each) decompressed ahead of the caller (``_decoded_ahead``), and the
# seconds a wait for one may take past the host's op timeout (the stream's own wait for a
# piece is that timeout plus 5 s, so its error comes first)
DECODE_AHEAD = 1
AHEAD_GRACE = 10.0


def _zstd() -> Any:
    import zstandard

    return zstandard.ZstdDecompressor().decompressobj()


def _zstd_errors() -> tuple[type[BaseException], ...]:
    import zstandard

    return (zstandard.ZstdError,)


def _zstd_reader(wire: Any) -> Any:
    """The log read from a zstd wire: ``read(n)`` decompresses in C until it has ``n`` bytes
    (or the end), so one call per chunk and no call expands past what it is asked for."""
    import zstandard

    return zstandard.ZstdDecompressor().stream_reader(wire, read_across_frames=True)


def _gzip_reader(wire: Any) -> Any:
    import gzip

    return gzip.GzipFile(fileobj=wire, mode="rb")


def _gzip_errors() -> tuple[type[BaseException], ...]:
    import gzip

    return (zlib.error, gzip.BadGzipFile, EOFError)  # EOFError: the member is cut short


@dataclass(frozen=True)
class Wire:
    """How a remote plain log travels (``streamed``): ``command`` reads the log on
    stdin and writes what goes on the wire; ``reader`` wraps the wire's bytes (a binary
    file) as a file of the log's bytes, whose ``read(n)`` gives ``n`` bytes unless at the
    end (None: the bytes are the log's); ``errors``: what the reader raises on bad bytes."""

    name: str
    command: str
    reader: Callable[[Any], Any] | None
    errors: Callable[[], tuple[type[BaseException], ...]] = tuple


# First the host has wins (logs compress ~10x, so the link and paramiko's per-packet work
# carry a tenth); ``cat`` is always there. zstd at -1 without its frame checksum (an xxh64
# of the log made on the host and checked here; SSH's MAC guards the wire): 100 MB, ~0.16 s
# of the host's CPU to 11.2 MB, 10 ms less here; --fast=N, -T2, lz4 saved little host CPU
# for 1.4-1.9x the bytes (docs/performance.md, "The content hash and the wire, eleventh stop").
WIRE: tuple[Wire, ...] = (
    Wire("zstd", "zstd -q -c -1 --no-check", _zstd_reader, _zstd_errors),
    Wire("gzip", "gzip -c -1", _gzip_reader, _gzip_errors),
    Wire("cat", "cat", None),
)


def wire_script(path: str, start: int, wires: tuple[Wire, ...] = WIRE) -> str:
    """A POSIX sh script: the bytes of ``path`` from ``start`` through the first of ``wires``
    whose program the host has (the last is the fallback), its name on line 1. It sends
    the file to its end: the reader stops at the length it wants and closes the stream
    (``streamed``), so no ``head -c`` copies every byte through one more pipe (~0.08 s of
    the host's CPU per 100 MB here)."""
    last = wires[-1]
    script = f"w={last.name}; z={shlex.quote(last.command)}; "
    for w in reversed(wires[:-1]):  # if the first is there ... else (the next test) ... fi
        script = (
            f"if command -v {shlex.quote(w.command.split()[0])} >/dev/null 2>&1; "
            f"then w={w.name}; z={shlex.quote(w.command)}; else {script}fi; "
        )
    # from the start, the wire's program reads the file itself (one process less)
    read = (
        f"tail -c +{start + 1} -- {shlex.quote(path)} | $z"
        if start
        else f"$z < {shlex.quote(path)}"
    )
    return f"{script}printf '%s\\n' \"$w\"; {read}"


def _open_wire(src: Any, pieces: Any, wires: tuple[Wire, ...]) -> tuple[Wire, bytes]:
    """The wire the started remote script chose; (it, the bytes after its header)."""
    from forensics.errors import RemoteError

    head = b""
    for piece in pieces:
        head += piece
        if b"\n" in head or len(head) > 64:
            break
    name, _, rest = head.partition(b"\n")
    wire = next((w for w in wires if w.name.encode() == name), None)
    if wire is None:
        raise RemoteError(f"{src.where}: unexpected stream header {name[:40]!r}")
    return wire, rest


def _lead(src: Any, stream: Any, start: int, want: int) -> Iterator[bytes]:
    """The first bytes over SFTP while nothing of ``stream`` has come: what a stream
    waits for first is its shell's start on the host (the login shell and its rc files:
    0.1-1 s on the development machine), while the SFTP session is up already.
    LEAD_CHUNK at a time, until the stream's output arrives. Waits LEAD_WAIT for the stream
    first only where its shell is up (``ready``): one still starting would only delay the
    parse's first chunk by that much (issue 15, remote)."""
    if stream.arrived(LEAD_WAIT if getattr(stream, "ready", True) else 0.0):
        return
    reads = src.host.iter_chunks(src.path, start, LEAD_CHUNK, limit=want)
    try:
        for chunk in reads:
            yield chunk
            if stream.arrived():
                return
    finally:
        reads.close()


def streamed(src: Any, start: int, end: int, wires: tuple[Wire, ...]) -> Iterator[bytes]:
    """Bytes [start, end) of the remote log ``src`` (a LogSource) as one stream, read ahead while the caller
    parses (``SSHHost.stream``) and compressed on the wire where the host has zstd or
    gzip (``WIRE``); its first bytes over SFTP while the stream starts (``_lead``; the
    stream's copy of them dropped). What the stream did not deliver (it could not start,
    the link dropped, the file shrank) is read by the host's SFTP reads from where it
    stopped."""
    from forensics.errors import RemoteError
    from forensics.logsource import READ_CHUNK

    want = end - start
    got = 0
    stream: Any = None
    ahead: _DecodeAhead | None = None
    damage = tuple(e for w in wires for e in w.errors())
    try:
        stream = started(src, start, wires)
        for chunk in _lead(src, stream, start, want):
            got += len(chunk)
            yield chunk
        wire, rest = _open_wire(src, stream, wires)
        log = wire_log(wire, itertools.chain((rest,), stream))
        wait = getattr(src.host, "op_timeout", 30.0) + AHEAD_GRACE
        if src.decode_ahead:
            ahead = _DecodeAhead(src.where, log, got, want - got, wait)
        # a worker's feed holds no chunk decoded ahead: ~6 MB less per stream in the main
        # process, 8 streams at once (docs/performance.md, "Peak RSS of a parallel ingest's
        # main process"); each read is bounded by the stream's own timeout
        for data in ahead if ahead is not None else _reads(log, got, want - got):
            got += len(data)
            yield data
    except (RemoteError, *damage):
        pass  # the rest comes over SFTP, below
    finally:
        if ahead is not None:
            ahead.stop()
        if stream is not None:
            stream.close()  # ends a read the decode thread waits in
        if ahead is not None:
            ahead.join()
    if got < want:
        yield from src.host.iter_chunks(src.path, start + got, READ_CHUNK, limit=want - got)


def started(src: Any, start: int, wires: tuple[Wire, ...]) -> Any:
    """The stream of the remote log ``src`` from byte ``start`` (``wire_script``), started."""
    path = src.path[2:] if src.path.startswith("~/") else src.path  # from $HOME
    return src.host.stream(wire_script(path, start, wires))


def wire_log(wire: Wire, pieces: Iterator[bytes]) -> Any:
    """The log's bytes read from ``pieces`` of ``wire``'s output (after its header): a
    binary file (``read(n)``). The main process's stream reads it so, and an ingest worker
    the pieces its main process forwards (forensics/ingest/wire.py)."""
    from forensics.logsource import _RawStream

    raw = _RawStream(pieces)
    return wire.reader(raw) if wire.reader is not None else io.BufferedReader(raw)


def _reads(log: Any, skip: int, left: int, stopped: Any = lambda: False) -> Iterator[bytes]:
    """The next ``left`` bytes of ``log`` after ``skip`` dropped, READ_CHUNK at a time (until
    ``stopped()``)."""
    from forensics.logsource import READ_CHUNK

    if _skip(log, skip, READ_CHUNK):
        while left and not stopped():
            data = log.read(min(READ_CHUNK, left))
            if not data:
                break
            left -= len(data)
            yield data


class _DecodeAhead:
    """The next ``n`` bytes of ``log`` after ``skip`` dropped (the stream's copy of the lead),
    READ_CHUNK at a time (iterate it), read and decompressed in a thread of its own
    (forensics-decode) while the caller splits the chunk before: the decompression (zstd's C,
    off the GIL) was the largest cost of ingest's reading thread, one stage of its pipeline
    (issue 15, remote). At most DECODE_AHEAD chunks wait; an error of ``log`` (damage, the
    link) comes out of the iteration after the chunks before it; every wait of the caller is
    bounded by ``wait`` seconds (None: not bounded, an ingest worker's: its main process's
    feed is). ``stop``, then end what the thread reads (the stream), then ``join``."""

    def __init__(self, where: str, log: Any, skip: int, n: int, wait: float | None):
        import queue
        import threading

        self._where, self._log, self._wait = where, log, wait
        self._ahead: queue.Queue[bytes | BaseException | None] = queue.Queue(DECODE_AHEAD)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._pull, args=(skip, n), name="forensics-decode", daemon=True
        )
        self._thread.start()

    def _put(self, item: bytes | BaseException | None) -> None:
        import queue

        while not self._stop.is_set():
            with contextlib.suppress(queue.Full):
                self._ahead.put(item, timeout=0.1)
                return

    def _pull(self, skip: int, left: int) -> None:
        """(thread) The chunks into the queue, then None (or the error)."""
        try:
            for data in _reads(self._log, skip, left, self._stop.is_set):
                self._put(data)
            self._put(None)
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
            self._put(exc)

    def __iter__(self) -> Iterator[bytes]:
        from forensics.hosts.streams import drained

        return drained(self._ahead, self._wait, self._where)

    def stop(self) -> None:
        """No more chunks wanted: the thread ends at its next chunk (or as its read ends)."""
        import queue

        self._stop.set()
        with contextlib.suppress(queue.Empty):  # unblock a put waiting for room
            while True:
                self._ahead.get_nowait()

    def join(self) -> None:
        self._thread.join(timeout=self._wait)


def _skip(log: Any, n: int, most: int) -> bool:
    """Read and drop ``n`` bytes of ``log``, at most ``most`` at a time: False if it ended first."""
    while n:
        data = log.read(min(n, most))
        if not data:
            return False
        n -= len(data)
    return True
