"""Classifying what the user gives: a file, a log source, text, a paste."""

from __future__ import annotations

import os
from pathlib import Path

from forensics.classifier.corpus import analyses_for
from forensics.classifier.model import Model
from forensics.classifier.stream import iter_analyses
from forensics.classifier.verdict import Verdict, verdict
from forensics.errors import InputNotFound, UsageError


def classify_file(path: str | Path, model: Model | None = None, *, warn=None) -> list[Verdict]:
    """Classify a log on this machine (read through forensics.logsource: any format)."""
    from forensics.errors import FileMissing, NotRegularFile
    from forensics.hosts import get_host
    from forensics.logsource import open_log

    p = Path(path)
    try:
        src = open_log(get_host(None), os.fspath(path))  # as given: Path drops a trailing /
    except FileMissing:
        raise InputNotFound(
            f"{p}: no such file",
            hint=f"forensics diagnose {p.stem} --log {p} to diagnose a log that was never written",
        ) from None
    except NotRegularFile as exc:
        if not p.is_dir():
            raise
        raise UsageError(
            f"{p}: is a directory, not a log file", hint=f"forensics classify {p}/*.log"
        ) from exc
    return classify_source(src, model, warn=warn)


def classify_source(
    src, model: Model | None = None, *, tail: int | None = None, warn=None
) -> list[Verdict]:
    """Verdicts for every run of an opened ``LogSource`` (the file's age decides ``hung``)."""
    return [verdict(a, model) for a in iter_analyses(src, tail=tail, warn=warn)]


def classify_text(text: str, model: Model | None = None, *, path: str = "<text>") -> list[Verdict]:
    from forensics_parsers.sglang import parse_text

    frames = parse_text(text, path)
    return [verdict(a, model) for a in analyses_for(frames, path)]


# The most of a paste that `forensics classify -` reads (a paste is an excerpt; a whole log is
# better given by its path, which is read in full).
PASTE_MAX = 32 << 20


def _wait_readable(stream) -> None:
    """Wait until ``stream`` has bytes (or ends) in short slices: a Ctrl-C that the kernel
    hands to another thread (polars' pool) does not interrupt a blocking read of the main
    thread, which would then wait for the paste for ever; between slices Python runs the
    handler and the read ends in KeyboardInterrupt (exit 130)."""
    import select

    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a file descriptor (a test's stream, BytesIO): nothing to wait on
    while True:
        try:
            if select.select([fd], [], [], 0.2)[0]:
                return
        except (OSError, ValueError):
            return


def read_paste(stream, limit: int | None = None) -> tuple[bytes, bool]:
    """At most ``limit`` (``PASTE_MAX``) bytes of a binary stream, cut at the last newline
    past the limit; True when there was more (the rest is not read: an endless stream cannot
    hang us)."""
    limit = PASTE_MAX if limit is None else limit
    chunks: list[bytes] = []
    size = 0
    read = getattr(stream, "read1", stream.read)  # what is there, not a full 1 MiB wait
    while size <= limit:
        _wait_readable(stream)
        b = read(min(1 << 20, limit + 1 - size))
        if not b:
            break
        chunks.append(b)
        size += len(b)
    data = b"".join(chunks)
    if len(data) <= limit:
        return data, False
    data = data[:limit]
    nl = data.rfind(b"\n")
    return (data[: nl + 1] if nl > 0 else data), True


def classify_bytes(
    data: bytes, model: Model | None = None, *, path: str = "<stdin>", warn=None
) -> list[Verdict]:
    """Verdicts of a log given as bytes (a paste), read through the log source as a file is
    (compressed, UTF-16, a BOM: forensics.logsource); no file age, so a stop mid-stage is hung.
    A damaged compressed paste keeps what decoded and says so through ``warn``."""
    from forensics.logpaste import open_bytes

    return [verdict(a, model) for a in iter_analyses(open_bytes(data, path), warn=warn)]
