"""Expanding ingest's inputs (local paths, globs, folders, ssh:// and NAME:/path) into the
(host, path) of each file, deduplicated, in the order given."""

from __future__ import annotations

import contextlib
import os
import posixpath
import threading
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
    found: Callable[[int, list[tuple[Any, str]] | None], None] | None = None,
    waiting: Callable[[Any], None] | None = None,
) -> list[tuple[Any, str]]:
    """-> [(host, path)] of files, deduplicated, in the order given. With two inputs or more,
    each remote input's host is connected and its paths looked up in a thread of its own
    (``_looking_up``): a host that connects slowly holds back no other host's lookup. An
    error is raised at its input, in order. ``connected(host)`` is called for a remote
    input's host as soon as it is connected, before its paths are looked at; ``found(k,
    files)`` with the (host, path) remote input ``k`` names (before the deduplication) as
    soon as they are known, from the thread that looked them up (None: its lookup failed);
    ``waiting(lookup)``, where given, while this thread waits for a lookup: it returns once
    ``lookup.over`` (forensics/ingest/early.py feeds the logs looked up meanwhile)."""
    out: list[tuple[Any, str]] = []
    seen: set[tuple[str, str]] = set()
    missing: list[ForensicsError] = []
    empty_dirs: list[str] = []
    looking = _looking_up(inputs, recursive, trust_new_host, connected, found)
    for text in inputs:
        try:
            if text in looking:
                host, files, lost, empty = looking[text].result(waiting)
            else:
                host, files, lost, empty = _look_up(text, recursive, trust_new_host, connected)
        except Exception:
            for lookup in looking.values():  # no lookup left running (each one bounded)
                lookup.join()
            raise
        except BaseException:  # an interrupt: not waited for; each one ends at its host's
            for lookup in looking.values():  # answer, doing nothing more
                lookup.found = lookup.connected = None
            raise
        missing.extend(lost)
        empty_dirs.extend(empty)
        for key in ((host.name, p) for _, p in files):
            if key not in seen:
                seen.add(key)
                out.append((host, key[1]))
    quiet = [_empty_dir(d, recursive) for d in empty_dirs]  # warned about without their hint
    missing.extend(quiet)
    if missing and not out:
        if len(missing) == 1:
            raise missing[0]
        raise InputNotFound("; ".join(str(m) for m in missing))
    for m in missing:
        warn(m.message if m in quiet else str(m))
    return out


_Found = tuple[Any, list[tuple[Any, str]], list[ForensicsError], list[str]]


def _look_up(
    text: str,
    recursive: bool,
    trust_new_host: bool,
    connected: Callable[[Any], None] | None,
) -> _Found:
    """One input: (its host, the (host, path) of the files it names, in order, what it
    misses (``_candidates``), the folders it names that hold no log)."""
    from forensics.hosts import resolve_location

    host, path = resolve_location(text, trust_new_host=trust_new_host)
    local = host.name == "local"
    if local:
        path = os.path.expanduser(path)
    elif connected is not None:
        connected(host)
    files: list[tuple[Any, str]] = []
    missing: list[ForensicsError] = []
    empty_dirs: list[str] = []
    for cand in _candidates(host, text, path, missing):
        if host.is_dir(cand):
            names = _logs_in(host, cand, recursive)
            if not names:
                empty_dirs.append(cand)
        else:
            names = [cand]
        files.extend((host, _real(p) if local else p) for p in names)
    return host, files, missing, empty_dirs


class _Lookup(threading.Thread):
    """(a thread) One remote input's host connected and its paths looked up
    (``_look_up``); ``result`` gives them, or raises what failed, in the caller's turn."""

    def __init__(self, k: int, text: str, how: tuple, found: Callable | None):
        super().__init__(name="forensics-lookup", daemon=True)
        self.k, self.text, self.how, self.found = k, text, how, found
        self.connected: Callable | None = how[2]
        self.got: _Found | None = None
        self.error: BaseException | None = None
        self.over = False  # looked up, or failed (set before ``found`` is called)

    def run(self) -> None:
        try:
            self.got = _look_up(self.text, *self.how[:2], self._connected)
        except BaseException as exc:  # noqa: BLE001 - raised in its input's turn
            self.error = exc
        self.over = True
        found = self.found
        if found is not None:
            with contextlib.suppress(Exception):  # only an opening ahead: taken in turn
                found(self.k, self.got[1] if self.got is not None else None)

    def _connected(self, host: Any) -> None:
        connected = self.connected  # None once the ingest stopped (an interrupt)
        if connected is not None:
            connected(host)

    def result(self, waiting: Callable[[Any], None] | None = None) -> _Found:
        if waiting is not None:
            waiting(self)
        self.join()  # bounded by the host's connect_timeout and op timeouts
        if self.error is not None:
            raise self.error
        assert self.got is not None
        return self.got


def _looking_up(
    inputs: list[str],
    recursive: bool,
    trust_new_host: bool,
    connected: Callable[[Any], None] | None,
    found: Callable | None,
) -> dict[str, _Lookup]:
    """With two inputs or more: a ``_Lookup`` started for each remote one (once per text:
    an unreachable host costs its connect timeout once); none otherwise."""
    if len(inputs) < 2:
        return {}
    from forensics.hosts import is_remote

    looking: dict[str, _Lookup] = {}
    how = (recursive, trust_new_host, connected)
    for k, text in enumerate(inputs):
        if text not in looking and is_remote(text):
            looking[text] = _Lookup(k, text, how, found)
            looking[text].start()
    return looking


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
