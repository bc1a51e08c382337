"""A remote log's wire routed to its worker (a parallel ingest, forensics/ingest/pool.py): the
main process forwards the stream's compressed bytes, the worker decompresses and hashes them.

Fed as plain bytes, the 8 logs of 8 hosts made the main process the narrow point of a
parallel ingest: it received, decompressed, hashed and forwarded 8 x 100 MB (2.4-2.6 s of its
CPU on 16 cores, its feed threads waiting for a core and the GIL) while each worker's reading
thread slept, waiting for bytes (docs/performance.md, "Eight hosts on 16 cores, thirteenth
stop"). Routed, it forwards ~11 MB a log (``zstd -1``) and each worker does the rest.

**Where.** A log ``routes`` says: remote (its host streams), at least STREAM_MIN bytes, plain
UTF-8 without a BOM, parsed from byte 0, its hasher computing the current algorithm alone.
Any other log is fed as plain bytes (``pool._feed``), as before.

**The feed** (``forward``, the main's feeder thread), one message a piece, its first byte its
kind: LEAD + the bytes read over SFTP while the stream starts (logstream._lead), WIRE + the
wire's name (logstream._open_wire read its header), PIECE + what came on the stream, then END.
The worker (``RoutedSource``) parses the lead, then the stream decompressed in a thread of
its own (logstream._DecodeAhead, beside its split; the stream's copy of the lead dropped),
hashing every byte (forensics/ingest/hashing.py), and replies the digest and the byte count
with its parts: the main process's hasher takes them (``_Hasher.adopt``), so the source
record is the one a plain feed writes.

**Failure.** A stream that cannot start or breaks, a wire that is damaged, ends short of the
size at the opening (the file shrank) or carries over SLACK bytes past it: the worker reads
the feed to its END, aborts its staged parts and replies ``rerun``; the main process feeds the
log again as plain bytes, the old way (the stream again, SFTP for what it misses, or
ReadIncomplete), once: the job ends with the outcome a plain feed gives. Ctrl-C and a worker
killed mid-file end it as a plain feed's (the feeder's next send fails).

**Progress.** The lead's bytes as they are sent; the rest when the stream has been forwarded
(the size of the log its compressed bytes make is known only to the worker).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

from forensics.ingest.hashing import CURRENT, _Hasher

ROUTE = True  # False: every log fed as plain bytes (tests compare the two)
# bytes of wire forwarded past the size at the opening, at most: a log that grows fast while
# read (its wire then carries more), or a host that sends without end, stops there
SLACK = 4 << 20
LEAD, WIRE, PIECE, END = b"L", b"W", b"P", b"E"  # a message's first byte: its kind


class Rerun(Exception):
    """(a worker) The routed wire did not give the log: fed again as plain bytes."""


def routes(opened: Any) -> bool:
    """Whether the log ``opened`` (forensics.ingest.file._Opened) goes to its worker as
    the wire's bytes (the module's doc)."""
    from forensics import logsource

    src, hasher = opened.src, opened.hasher
    return (
        ROUTE
        and getattr(src.host, "stream", None) is not None
        and src.format is None
        and src.encoding == "utf-8"
        and not src.bom
        and opened.resume[0] == 0
        and hasher is not None
        and hasher.algs == (CURRENT,)
        and src.stat.size >= logsource.STREAM_MIN
    )


def forward(conn: Any, job: Any, send: Callable[[Any, Any], bool]) -> None:
    """(the main's feeder thread) The log of ``job`` down ``conn`` as the lead, the wire's
    name and its pieces, then END (always, unless a send fails: the worker is gone).
    ``send(how, what)``: False when the write failed."""
    from forensics import logsource
    from forensics.logstream import _lead, _open_wire, started

    src, wires = job.opened.src, logsource.WIRE
    want = src.stat.size
    sent = carried = 0
    stream: Any = None
    try:
        stream = started(src, 0, wires)
        for chunk in _lead(src, stream, 0, want):
            if not send(conn.send_bytes, LEAD + chunk):
                return
            sent += len(chunk)
            if job.report:
                job.report(sent, want)
        if sent < want:
            wire, rest = _open_wire(src, stream, wires)
            if not send(conn.send_bytes, WIRE + wire.name.encode()):
                return
            for piece in itertools.chain((rest,), stream):
                if piece and not send(conn.send_bytes, PIECE + piece):
                    return
                carried += len(piece)
                if carried > want + SLACK:
                    break
    except Exception:  # noqa: BLE001 - the worker finds the log short: fed again, plain
        pass
    finally:
        if stream is not None:
            stream.close()
    if send(conn.send_bytes, END) and job.report:
        job.report(want, want)


class RoutedSource:
    """The worker's side of a routed log (``forward``): its chunks, decompressed and hashed
    here; ``hashed`` (digest, bytes) once they all came. Raises Rerun, after the feed's END,
    where they did not."""

    def __init__(self, conn: Any, stat: Any, transformed: bool, path: str):
        self.conn, self.stat, self.transformed, self.path = conn, stat, transformed, path
        self.hasher = _Hasher()

    @property
    def hashed(self) -> tuple[str, int]:
        return self.hasher.digest(), self.hasher.size

    def _messages(self) -> Iterator[tuple[bytes, bytes]]:
        """(kind, payload) of each message, until END."""
        while True:
            msg = self.conn.recv_bytes()
            kind, payload = msg[:1], memoryview(msg)[1:]
            if kind == END:
                return
            yield kind, payload

    def chunks(self, offset: int = 0) -> Iterator[bytes]:
        want, feed = self.stat.size, self.hasher.feed
        messages = self._messages()
        wire = None
        for kind, payload in messages:
            if kind != LEAD:
                wire = _wire_named(bytes(payload)) if kind == WIRE else None
                break
            data = bytes(payload)
            feed(self.hasher.size, data)
            yield data
        if wire is not None:
            pieces = (p for k, p in messages if k == PIECE)  # (memoryviews: no copy)
            yield from self._decoded(wire, pieces, want)
        for _ in messages:  # the rest of the feed, to its END
            pass
        if self.hasher.size != want:
            raise Rerun(f"{self.path}: {self.hasher.size} of {want} bytes came on the wire")

    def _decoded(self, wire: Any, pieces: Iterator[bytes], want: int) -> Iterator[bytes]:
        """The log's bytes after the lead, decompressed in a thread beside the caller's
        split (logstream._DecodeAhead); none after damage (``chunks`` raises Rerun)."""
        from forensics.logstream import _DecodeAhead, wire_log

        got = self.hasher.size
        ahead = _DecodeAhead(self.path, wire_log(wire, pieces), got, want - got, None)
        try:
            for data in ahead:
                self.hasher.feed(self.hasher.size, data)
                yield data
        except wire.errors():
            pass  # damaged: read to END by ``chunks``, then fed again, plain
        except BaseException:
            ahead.stop()  # the parse failed or the feed ended: this worker ends
            raise
        ahead.join()  # it read its last piece: ``chunks`` reads on


def _wire_named(name: bytes) -> Any:
    """The wire of that name (None: this version does not know it)."""
    from forensics.logstream import WIRE as wires

    return next((w for w in wires if w.name.encode() == name), None)
