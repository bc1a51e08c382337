"""Expanding ingest's inputs (local paths, globs, folders, ssh:// and NAME:/path) into the
(host, path) of each file, deduplicated, in the order given."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

from forensics.errors import (
    BadPath,
    FileMissing,
    ForensicsError,
    InputNotFound,
    PermissionDenied,
    UsageError,
)
from forensics.logsource import COMPRESSED_SUFFIXES

# What a folder given to ingest contributes (files named one by one, or by a glob of your own,
# are read whatever their suffix): server logs, compressed or not (the suffixes of the log
# source's FORMATS: *.log.gz, *.log.zst, ...), not forensics' own evidence/*.txt dumps.
DIR_PATTERNS = ("*.log", *(f"*.log{s}" for s in COMPRESSED_SUFFIXES), "*.out", "*.err")
DIR_SKIP = ("evidence",)  # folders never descended into: $FORENSICS_HOME/evidence/LAUNCH/...


def _has_magic(s: str) -> bool:
    return any(c in s for c in "*?[")


def expand_inputs(
    inputs: list[str],
    *,
    recursive: bool = False,
    warn: Callable[[str], None],
    trust_new_host: bool = False,
    connected: Callable[[Any], None] | None = None,
) -> list[tuple[Any, str]]:
    """-> [(host, path)] of files, deduplicated, in the order given. The hosts are connected
    all at once first (``connect_all``); an error is raised at its input, in order.
    ``connected(host)`` is called for a remote input's host as soon as it is connected,
    before its paths are looked at."""
    from forensics.hosts import connect_all, resolve_location

    out: list[tuple[Any, str]] = []
    seen: set[tuple[str, str]] = set()
    missing: list[ForensicsError] = []
    empty_dirs: list[str] = []
    failed = connect_all(inputs, trust_new_host=trust_new_host) if len(inputs) > 1 else {}
    for text in inputs:
        if text in failed:
            raise failed[text]
        host, path = resolve_location(text, trust_new_host=trust_new_host)
        local = host.name == "local"
        if local:
            path = os.path.expanduser(path)
        elif connected is not None:
            connected(host)
        candidates = _candidates(host, text, path, missing)
        for cand in candidates:
            if host.is_dir(cand):
                files = _logs_in(host, cand, recursive)
                if not files:
                    empty_dirs.append(cand)
            else:
                files = [cand]
            for p in files:
                real = _real(p) if local else p
                key = (host.name, real)
                if key in seen:
                    continue
                seen.add(key)
                out.append((host, real))
    quiet = [_empty_dir(d, recursive) for d in empty_dirs]  # warned about without their hint
    missing.extend(quiet)
    if missing and not out:
        if len(missing) == 1:
            raise missing[0]
        raise InputNotFound("; ".join(str(m) for m in missing))
    for m in missing:
        warn(m.message if m in quiet else str(m))
    return out


def _real(path: str) -> str:
    """The path a local input is known by (links resolved, so two spellings are one file);
    the path as given when that names nothing: ``/dev/stdin`` on a pipe resolves to
    ``/proc/N/fd/pipe:[…]``, which is no file (the path itself is then refused as a FIFO)."""
    real = os.path.realpath(path)
    return real if os.path.lexists(real) else path


def _candidates(host: Any, text: str, path: str, missing: list[ForensicsError]) -> list[str]:
    """What one input names (a glob's matches, or the path itself); none, with the reason
    added to ``missing``, when it names nothing. A path that names an existing file is that
    file, whatever characters it holds (``[bold]x[s].log``); else one with ``*?[`` is a glob
    (as ``classify`` and ``diagnose --log`` read their paths)."""
    if _has_magic(path) and not _exists(host, path):
        try:
            return host.glob(path)
        except InputNotFound:
            missing.append(
                InputNotFound(
                    f"{text}: no files matched",
                    hint="check the pattern; quote it so your shell does not expand it",
                )
            )
            return []
    try:
        host.stat(path)
    except FileMissing:
        missing.append(
            InputNotFound(
                f"{text}: no such file",
                hint="the launch may never have written its log; "
                f"try: forensics diagnose {PurePosixPath(path).stem} --relaunch",
            )
        )
        return []
    except (PermissionDenied, BadPath) as exc:
        missing.append(exc)
        return []
    return [path]


def _exists(host: Any, path: str) -> bool:
    try:
        host.stat(path)
    except ForensicsError:
        return False
    return True


def _empty_dir(folder: str, recursive: bool) -> InputNotFound:
    patterns = ", ".join(DIR_PATTERNS)
    return InputNotFound(
        f"{folder}: directory holds no {patterns} files"
        + (" at any depth" if recursive else " (sub-folders not searched)"),
        hint="name the files or a quoted glob"
        + ("" if recursive else "; -r searches sub-folders at every depth"),
    )


def _logs_in(host: Any, folder: str, recursive: bool) -> list[str]:
    """The files of ``folder`` matching DIR_PATTERNS (with ``recursive``, at every depth,
    outside DIR_SKIP folders), sorted."""
    base = folder.rstrip("/") or "/"
    found: set[str] = set()
    for pattern in DIR_PATTERNS:
        try:
            hits = host.glob(posixpath.join(base, "**" if recursive else "", pattern))
        except InputNotFound:
            continue
        found.update(hits)
    skip = set(DIR_SKIP)
    return sorted(
        p
        for p in found
        if not skip.intersection(PurePosixPath(p[len(base) :]).parts[:-1]) and not host.is_dir(p)
    )


def check_pattern(name_pattern: str | None) -> None:
    if not name_pattern:
        return
    import re

    try:
        re.compile(name_pattern)
    except re.error as exc:
        raise UsageError(
            f"--name-pattern {name_pattern!r}: not a regular expression ({exc})",
            hint="e.g. '(?P<num_steps>\\d+)step'",
        ) from exc
