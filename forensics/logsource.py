"""One log source: open, detect the format, decompress, decode, tail; local or remote.

ingest, classify and ``diagnose --log`` read log bytes only through :func:`open_log`, over the
``Host`` interface (``LocalHost`` or ``SSHHost``'s SFTP), so a file reads the same whoever asks:

* **What the path is.** It must name a regular file: a FIFO, socket or device is refused from
  its stat, before anything opens it (``NotRegularFile``, exit 2; a FIFO would block the open
  or the read forever, ``/dev/zero`` stream without end), and ``LocalHost`` checks the opened
  descriptor again. A missing file is ``FileMissing``, an unreadable one ``PermissionDenied``
  (exit 3); a symlink loop, a name over NAME_MAX or ``file.log/`` is ``BadPath`` (exit 2).
* **What the bytes are.** ``FORMATS``, one table keyed by magic bytes: gzip, zstd, xz, bzip2 and
  lz4 are decompressed as a stream (memory bounded whatever the ratio); archives, executables,
  parquet and other binary formats are refused as what they are (``NotALog``, exit 2), and so
  is a file without magic whose head is mostly control bytes ("binary data"), never parsed
  into a run that looks hung before exec.
* **How the text is encoded.** ``ENCODINGS``, by byte-order mark: UTF-8 with BOM, UTF-16 and
  UTF-32 (LE/BE) are re-encoded to UTF-8 as a stream by one incremental decoder (bad bytes
  replaced); anything else is taken as UTF-8 and the parser replaces what does not decode.
* **Damage.** A compressed stream cut short or damaged yields every byte that decoded, then
  raises ``StreamDamaged`` (``truncated`` says which); callers keep what they read and warn.
  Never ``EOFError``, which click takes for Ctrl-D ("Interrupted.", exit 130).
* **Tail.** ``chunks(tail=N)`` reads only the last N bytes of a plain file, from the first
  line that starts inside them (remote classify reads the end of a log, where launches fail).

Nothing is read whole: every chunk yielded is at most ``READ_CHUNK`` bytes of UTF-8.
"""

from __future__ import annotations

import codecs
import io
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from forensics.errors import NotALog, StreamDamaged
from forensics.filekinds import NOT_LOGS
from forensics.logstream import WIRE, Wire, _zstd, _zstd_errors, streamed, wire_script

READ_CHUNK = 4 << 20  # bytes of UTF-8 per chunk yielded (ingest's parse unit)
# a remote file this big or more is streamed (LogSource.raw); a smaller one costs less over
# SFTP than starting a remote command
STREAM_MIN = 256 << 10
DECOMP_READ = 256 << 10  # bytes of text asked of a decompressor per call
HEAD_BYTES = 4096  # the sample that decides the format, the encoding and "binary"
# A compressed log expands at most BOMB_RATIO times its size on disk, past BOMB_MIN bytes: more
# is a decompression bomb (4 GB of one repeated line is 100 KB of zstd), read up to there
# and reported like a damaged stream (what decoded is kept). Real logs compress 5-100x.
BOMB_RATIO = 1000
BOMB_MIN = 64 << 20


class _Inflater:
    """A format's decompressor objects driven as a stream with ``read1``.

    Input goes in ``Format.feed``-byte pieces, so what one damaged call loses, and what one
    call can expand to (a stream built to expand), stay small. Members / frames follow one
    another (``cat a.gz b.gz``); NUL padding after the last is ignored. A stream whose raw
    bytes end inside a member raises EOFError (truncated); bad bytes raise the format's error.
    """

    def __init__(self, f: Any, fmt: Format):
        assert fmt.decompressor is not None
        self._f = f
        self._fmt = fmt
        self._obj = fmt.decompressor()
        self._fed = False  # bytes went into the member being decoded
        self._out = bytearray()
        self._error: BaseException | None = None

    def read1(self, n: int) -> bytes:
        """Up to ``n`` bytes; b"" at the end. On damage, the bytes decoded before it come
        first and the error is raised by the next call."""
        if self._error is not None and not self._out:
            raise self._error
        try:
            while len(self._out) < n and self._error is None:
                data = self._f.read(self._fmt.feed)
                if not data:
                    if self._fed and not self._obj.eof:
                        raise EOFError(f"{self._fmt.name} stream ends inside a member")
                    break
                self._decode(data)
        except (EOFError, *self._fmt.errors()) as exc:
            self._error = exc
            if not self._out:
                raise
        out = bytes(self._out[:n])
        del self._out[:n]
        return out

    def _decode(self, data: bytes) -> None:
        while data:
            self._fed = True
            self._out += self._obj.decompress(data)
            data = b""
            if self._obj.eof:
                data = self._obj.unused_data or b""  # lz4 says None
                if not data.strip(b"\x00"):
                    data = b""  # NUL padding after the last member
                self._obj = self._fmt.decompressor()
                self._fed = False

    def close(self) -> None:
        pass


def _lz4() -> Any:
    import lz4.frame

    return lz4.frame.LZ4FrameDecompressor()


def _xz() -> Any:  # (lzma and bz2 imported for a log that needs them, as zstd and lz4)
    import lzma

    return lzma.LZMADecompressor()


def _xz_errors() -> tuple[type[BaseException], ...]:
    import lzma

    return (lzma.LZMAError,)


def _bz2() -> Any:
    import bz2

    return bz2.BZ2Decompressor()


@dataclass(frozen=True)
class Format:
    """A kind of file told by its first bytes.

    ``decompressor`` makes a new decompressor object (``decompress``, ``eof``,
    ``unused_data``); None: not a log, refused. ``feed``: input bytes per call (a zstd RLE
    block expands 4 bytes to 128 KiB: it gets small ones). ``errors``: what the object raises
    on bad bytes.
    """

    name: str
    magic: bytes
    what: str
    decompressor: Callable[[], Any] | None = None
    errors: Callable[[], tuple[type[BaseException], ...]] = lambda: ()
    feed: int = 1 << 10
    suffix: str = ""  # a compressed log's file-name suffix (ingest DIR picks up *.log<suffix>)


FORMATS: tuple[Format, ...] = (
    Format(
        "gzip",
        b"\x1f\x8b",
        "gzip-compressed",
        lambda: zlib.decompressobj(16 + zlib.MAX_WBITS),
        lambda: (zlib.error,),
        suffix=".gz",
    ),
    Format(
        "zstd", b"\x28\xb5\x2f\xfd", "zstd-compressed", _zstd, _zstd_errors, feed=256, suffix=".zst"
    ),
    Format(
        "xz",
        b"\xfd7zXZ\x00",
        "xz-compressed",
        _xz,
        _xz_errors,
        suffix=".xz",
    ),
    Format(
        "bzip2",
        b"BZh",
        "bzip2-compressed",
        _bz2,
        lambda: (OSError, ValueError),
        suffix=".bz2",
    ),
    # lz4 reports bad bytes as RuntimeError (LZ4F_decompress failed ...)
    Format(
        "lz4",
        b"\x04\x22\x4d\x18",
        "lz4-compressed",
        _lz4,
        lambda: (RuntimeError,),
        feed=256,
        suffix=".lz4",
    ),
    *(Format(name, magic, what) for name, magic, what in NOT_LOGS),
)
TAR_MAGIC_AT = 257
# the file-name suffixes of compressed logs, from FORMATS (ingest DIR, run names)
COMPRESSED_SUFFIXES = tuple(f.suffix for f in FORMATS if f.suffix)

# Byte-order marks, longest first (the UTF-32 LE mark begins with the UTF-16 LE one).
ENCODINGS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def _format_of(head: bytes) -> Format | None:
    for f in FORMATS:
        at = TAR_MAGIC_AT if f.name == "tar" else 0
        if head[at : at + len(f.magic)] == f.magic:
            return f
    return None


def _encoding_of(head: bytes) -> tuple[str, int]:
    """(codec, BOM length) of text that starts with ``head``; plain UTF-8 has no BOM."""
    for bom, enc in ENCODINGS:
        if head.startswith(bom):
            return enc, len(bom)
    return "utf-8", 0


# every byte but the control bytes text does not have (it may have tab, newlines, form feed,
# CR and ESC): looks_binary deletes these to count the others (a loop in Python over the
# head cost ~0.1 ms a file)
_NOT_CONTROL = bytes(b for b in range(256) if not (b < 9 or 13 < b < 27 or 27 < b < 32))


def looks_binary(head: bytes) -> bool:
    """True for a head that is not text: NUL-heavy (not just NUL padding) or control bytes."""
    if not head:
        return False
    sample = head[:HEAD_BYTES]
    nul = sample.count(b"\x00")
    # a NUL-padded tail is handled by the parser (P10); a NUL-heavy head is a binary file
    if nul > len(sample) * 0.3 and sample.strip(b"\x00"):
        return True
    ctrl = len(sample.translate(None, _NOT_CONTROL))  # the control bytes it has
    if ctrl > len(sample) * 0.1:
        return True
    # random or encrypted bytes: a log with a few bad bytes (P09) is mostly valid UTF-8
    bad = sample.decode("utf-8", errors="replace").count("\ufffd")
    return bad > len(sample) * 0.2


class _RawStream(io.RawIOBase):
    """A read-only stream over a host's chunks (what the decompressors read from)."""

    def __init__(self, chunks: Iterator[bytes]):
        self._chunks = chunks
        self._buf = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._buf:
            nxt = next(self._chunks, None)
            if nxt is None:
                return 0
            self._buf = memoryview(nxt)
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()
        super().close()


@dataclass
class LogSource:
    """An opened log: where it is, its stat, and what its bytes are (see the module doc)."""

    host: Any
    path: str
    where: str  # the path as messages show it (``HOST:PATH`` when remote)
    stat: Any  # forensics.hosts.FileStat
    head: bytes
    format: Format | None  # None: plain text
    encoding: str  # of the (decompressed) text
    bom: int  # its BOM's length (dropped)
    notes: list[str] = field(default_factory=list)
    hasher: Any = None  # fed every byte read (``feed(offset, chunk)``): ingest's content hash
    # a remote stream decompressed in a thread of its own while the reader parses; False: in
    # the reading thread (a worker's feeder, which only sends: forensics/logstream.py)
    decode_ahead: bool = True

    @property
    def transformed(self) -> bool:
        """True when the bytes parsed are not the file's bytes (decompressed or re-encoded):
        such a file is re-read whole when it changes, never from an offset."""
        return self.format is not None or self.encoding != "utf-8"

    def describe(self) -> str:
        parts = [self.format.what] if self.format else []
        if self.encoding != "utf-8":
            parts.append(self.encoding.upper().replace("-LE", " LE").replace("-BE", " BE"))
        return ", ".join(parts) or "text"

    # -- reading ------------------------------------------------------------------------
    def chunks(self, offset: int = 0, *, tail: int | None = None) -> Iterator[bytes]:
        """UTF-8 chunks of the log from ``offset`` (a byte offset of a plain UTF-8 file;
        0 otherwise), or of its last ``tail`` bytes. Raises StreamDamaged after the last
        chunk that decoded."""
        if self.transformed and offset:
            raise ValueError("an offset into a decompressed or re-encoded log")
        if self.format is None:
            yield from self._plain(offset, tail)
            return
        yield from self._decompressed()

    def _plain(self, offset: int, tail: int | None) -> Iterator[bytes]:
        start = offset
        torn = False
        if tail is not None and self.stat.size - offset > tail:
            start, torn = self.stat.size - tail, True
        if self.encoding != "utf-8":
            width = 4 if "32" in self.encoding else 2  # start on a code unit
            start = self.bom + max(0, start - self.bom) // width * width
            yield from self._recoded(self.raw(start), torn)
            return
        first = True
        for chunk in self.raw(start):
            if first:
                if torn:
                    chunk = chunk.split(b"\n", 1)[1] if b"\n" in chunk else b""
                elif start == 0 and self.bom:
                    chunk = chunk[self.bom :]
                first = False
            if chunk:
                yield chunk

    # -- the file's bytes: one reader, whatever the transport ---------------------------------
    def raw(self, start: int = 0, limit: int | None = None) -> Iterator[bytes]:
        """The file's bytes [start, start + limit), at most to its size when opened: streamed
        from a host that can (``SSHHost.stream``, for files of STREAM_MIN bytes or more), else
        the host's reads. Every byte passes ``hasher`` here, whatever the transport (the one
        place the content hash is fed). Fewer bytes than that (the file shrank) raise
        ReadIncomplete after the ones read."""
        from forensics.hosts import ReadIncomplete

        end = self.stat.size if limit is None else min(self.stat.size, start + limit)
        pos = start
        for chunk in self._transfer(start, end):
            if self.hasher is not None:
                self.hasher.feed(pos, chunk)
            pos += len(chunk)
            yield chunk
        if pos < end:
            raise ReadIncomplete(
                f"{self.where}: file shrank or vanished while reading ({pos - start} of "
                f"{end - start} bytes read)",
                path=self.path,
                bytes_read=pos - start,
            )

    def _transfer(self, start: int, end: int) -> Iterator[bytes]:
        if getattr(self.host, "stream", None) is None or end - start < STREAM_MIN:
            return self.host.iter_chunks(self.path, start, READ_CHUNK, limit=end - start)
        # a compressed log gains nothing from compression on the wire: it travels as is
        return streamed(self, start, end, WIRE if self.format is None else WIRE[-1:])

    def _recoded(self, raw: Iterator[bytes], torn: bool) -> Iterator[bytes]:
        dec = codecs.getincrementaldecoder(self.encoding)(errors="replace")
        first = True
        for chunk in raw:
            text = dec.decode(chunk)
            if first and torn:
                if "\n" not in text:
                    continue
                text = text.split("\n", 1)[1]
            first = False
            if text:
                yield text.encode("utf-8", errors="surrogatepass")
        text = dec.decode(b"", final=True)
        if text:
            yield text.encode("utf-8", errors="surrogatepass")

    def _decompressed(self) -> Iterator[bytes]:
        fmt = self.format
        assert fmt is not None
        raw = _RawStream(self.raw(0))
        reader = _Inflater(raw, fmt)
        damage = (EOFError, *fmt.errors())
        out = io.BytesIO()
        skip = self.bom
        dec = (
            codecs.getincrementaldecoder(self.encoding)(errors="replace")
            if self.encoding != "utf-8"
            else None
        )
        error: StreamDamaged | None = None
        total = 0
        try:
            while True:
                try:
                    data = reader.read1(DECOMP_READ)
                except damage as exc:
                    error = _damaged(self.where, fmt, exc, total + out.tell())
                    break
                if not data:
                    break
                if skip:
                    data, skip = data[skip:], max(0, skip - len(data))
                if dec is not None:
                    data = dec.decode(data).encode("utf-8", errors="surrogatepass")
                out.write(data)
                if out.tell() >= READ_CHUNK:
                    total += out.tell()
                    yield out.getvalue()
                    out = io.BytesIO()
                    if total > max(BOMB_MIN, BOMB_RATIO * self.stat.size):
                        error = _bomb(self.where, fmt, total, self.stat.size)
                        break
        finally:
            reader.close()
            raw.close()
        if dec is not None:
            out.write(dec.decode(b"", final=True).encode("utf-8", errors="surrogatepass"))
        if out.tell():
            yield out.getvalue()
        if error is not None:
            raise error


def _damaged(where: str, fmt: Format, exc: BaseException, kept: int) -> StreamDamaged:
    truncated = isinstance(exc, EOFError) or "incomplete" in str(exc).lower()
    what = "is truncated (the stream ends early)" if truncated else f"is damaged ({exc})"
    kept_text = (
        f"kept the {kept:,} bytes decoded before it" if kept else "nothing decoded before it"
    )
    return StreamDamaged(
        f"{where}: {fmt.name} stream {what}; {kept_text}",
        truncated=truncated,
        kept=kept,
        hint="recover a complete copy of the log if one exists",
    )


def _bomb(where: str, fmt: Format, total: int, size: int) -> StreamDamaged:
    return StreamDamaged(
        f"{where}: {fmt.name} stream expands over {BOMB_RATIO}x its {size:,} bytes "
        f"(a decompression bomb?); stopped after {total:,} bytes, kept those",
        truncated=False,
        kept=total,
        hint="decompress it yourself if it really is a log",
    )


def _text_head(host: Any, path: str, fmt: Format) -> bytes:
    """The first HEAD_BYTES of a compressed file's content (b"" when it does not decode)."""
    raw = _RawStream(host.iter_chunks(path, 0, 64 << 10))
    try:
        return _Inflater(raw, fmt).read1(HEAD_BYTES)
    except (EOFError, *fmt.errors()):
        return b""
    finally:
        raw.close()


def open_log(host: Any, path: str, *, where: str | None = None, hasher: Any = None) -> LogSource:
    """Stat ``path`` on ``host``, refuse what is not a regular log file, detect its format.
    ``hasher`` (``feed(offset, chunk)``) is fed every byte of the file read (``LogSource.raw``).

    Raises FileMissing / PermissionDenied (exit 3), NotRegularFile / BadPath / NotALog (exit 2),
    or the host's own errors (unreachable, deadline).
    """
    import dataclasses

    from forensics.hosts import made_when_read, require_regular

    where = where or (path if host.name == "local" else f"{host.name}:{path}")
    st = host.stat(path)
    if st.kind == "file" and not st.size and made_when_read(host, path):
        st = dataclasses.replace(st, kind="pseudo")  # its size says 0, yet it has bytes
    require_regular(st, where)
    head = host.read(path, 0, HEAD_BYTES) if st.size else b""
    if hasher is not None:
        hasher.feed(0, head)
    fmt = _format_of(head)
    if fmt is not None and fmt.decompressor is None:
        raise NotALog(
            f"{where}: {fmt.what}, not a log",
            hint="extract the server's text log from it and give that",
        )
    text = _text_head(host, path, fmt) if fmt is not None else head
    inner_fmt = _format_of(text) if fmt is not None else None
    if inner_fmt is not None:  # a zip, a tar or another compressed file inside: one level only
        raise NotALog(
            f"{where}: {inner_fmt.what} inside a {fmt.name} stream, not a log",
            hint="decompress it and give the server's text log inside",
        )
    encoding, bom = _encoding_of(text)
    if encoding == "utf-8" and looks_binary(text):
        inner = f"{fmt.what} " if fmt is not None else ""
        raise NotALog(
            f"{where}: {inner}binary data, not a log (no text in its first "
            f"{min(len(text), HEAD_BYTES)} bytes)",
            hint="give the server's text log (stdout/stderr of sglang.launch_server)",
        )
    return LogSource(host, path, where, st, head, fmt, encoding, bom, hasher=hasher)


__all__ = [
    "ENCODINGS",
    "COMPRESSED_SUFFIXES",
    "FORMATS",
    "HEAD_BYTES",
    "READ_CHUNK",
    "Format",
    "WIRE",
    "Wire",
    "wire_script",
    "LogSource",
    "looks_binary",
    "open_log",
]
