"""A remote log's bytes as one stream (``streamed``, what ``LogSource.raw`` reads a remote
file of STREAM_MIN bytes or more through): one exec channel runs ``wire_script``, which sends
the bytes through the first of ``WIRE`` the host has; read ahead while the caller parses
(``SSHHost.stream``); the first bytes over SFTP while the stream's shell starts on the host
(``_lead``); what the stream does not deliver over SFTP from where it stopped.
"""

from __future__ import annotations

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


def _zstd() -> Any:
    import zstandard

    return zstandard.ZstdDecompressor().decompressobj()


def _zstd_errors() -> tuple[type[BaseException], ...]:
    import zstandard

    return (zstandard.ZstdError,)


@dataclass(frozen=True)
class Wire:
    """How a remote plain log travels (``streamed``): ``command`` reads the log on
    stdin and writes what goes on the wire; ``decompressor`` undoes it (None: as is)."""

    name: str
    command: str
    decompressor: Callable[[], Any] | None
    feed: int = 1 << 20  # wire bytes per decompress call: bounds what one call can expand to


# First the host has wins (logs compress ~10x, so the link and paramiko's per-packet work
# carry a tenth); ``cat`` is always there.
WIRE: tuple[Wire, ...] = (
    # a NUL-padded tail compresses > 1000x: small feeds keep each call's output small
    Wire("zstd", "zstd -q -c -1", _zstd, feed=256),
    Wire("gzip", "gzip -c -1", lambda: zlib.decompressobj(16 + zlib.MAX_WBITS), feed=1 << 10),
    Wire("cat", "cat", None),
)


def wire_script(path: str, start: int, length: int, wires: tuple[Wire, ...] = WIRE) -> str:
    """A POSIX sh script: bytes [start, start+length) of ``path`` through the first of
    ``wires`` whose program the host has (the last is the fallback), its name on line 1."""
    last = wires[-1]
    script = f"w={last.name}; z={shlex.quote(last.command)}; "
    for w in reversed(wires[:-1]):  # if the first is there ... else (the next test) ... fi
        script = (
            f"if command -v {shlex.quote(w.command.split()[0])} >/dev/null 2>&1; "
            f"then w={w.name}; z={shlex.quote(w.command)}; else {script}fi; "
        )
    # from the start, head reads the file itself (one process less copying every byte)
    src = f"tail -c +{start + 1} -- {shlex.quote(path)} | " if start else ""
    read = f"head -c {length}" + ("" if start else f" -- {shlex.quote(path)}")
    return f"{script}printf '%s\\n' \"$w\"; {src}{read} | $z"


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
    0.3-1 s on the loaded development machine), while the SFTP session is up already.
    LEAD_CHUNK at a time, until the stream's output arrives."""
    if stream.arrived(LEAD_WAIT):
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
    out = bytearray()
    stream: Any = None
    path = src.path[2:] if src.path.startswith("~/") else src.path  # from $HOME
    try:
        stream = src.host.stream(wire_script(path, start, want, wires))
        for chunk in _lead(src, stream, start, want):
            got += len(chunk)
            yield chunk
        skip = got  # the stream's copy of what came over SFTP
        wire, rest = _open_wire(src, stream, wires)
        dec = wire.decompressor() if wire.decompressor is not None else None
        for piece in itertools.chain((rest,), stream):
            for at in range(0, len(piece), wire.feed):
                part = piece[at : at + wire.feed]
                out += dec.decompress(part) if dec is not None else part
                if skip:
                    n = min(skip, len(out))
                    del out[:n]
                    skip -= n
                while len(out) >= READ_CHUNK and got < want:
                    data = bytes(out[: min(READ_CHUNK, want - got)])
                    del out[:READ_CHUNK]
                    got += len(data)
                    yield data
    except (RemoteError, zlib.error, *_zstd_errors()):
        pass  # the rest comes over SFTP, below
    finally:
        if stream is not None:
            stream.close()
    while out and got < want:
        data = bytes(out[: min(READ_CHUNK, want - got)])
        del out[:READ_CHUNK]
        got += len(data)
        yield data
    if got < want:
        yield from src.host.iter_chunks(src.path, start + got, READ_CHUNK, limit=want - got)
