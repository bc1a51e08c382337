"""Where a log named by ``--log`` lives (this machine or a host), and classifying it there."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

from forensics import classifier
from forensics.diagnose.report import _file_reports


def _same_host(name: str, text: str) -> bool:
    """Whether the remote location ``text`` (``NAME:/p``, ``ssh://addr/p``) is host ``name``."""
    from forensics.hosts import load_config, parse_address

    addr = text[len("ssh://") :].split("/", 1)[0] if text.startswith("ssh://") else None
    if addr is None:
        addr = text.split(":", 1)[0]
    if addr == name:
        return True
    hosts = load_config()["hosts"]

    def key(a: str) -> tuple[str, str, int] | None:
        if a in hosts:
            c = hosts[a]
            return (c.user, c.host, c.port)
        if a in ("local", "localhost-local"):
            return None
        try:
            return parse_address(a)
        except Exception:  # noqa: BLE001 - not an address: only its name can match
            return None

    mine, theirs = key(addr), key(name)
    return mine is not None and mine == theirs


def log_location(log: str, host: str | None = None) -> tuple[Any, str]:
    """``--log`` (and ``--host``) -> (Host, path), through forensics.hosts.

    An unknown host name is a ConfigError (exit 2) naming the configured hosts, an
    unreachable host the host's error (exit 5); ``--host`` and a prefix naming another host
    is a UsageError (exit 2).
    """
    from forensics.errors import UsageError
    from forensics.hosts import get_host, is_remote, resolve_location

    if not is_remote(log):
        if host in (None, ""):
            return get_host(None), os.path.expanduser(log)  # as given: Path drops a trailing /
        return get_host(host), log
    if host not in (None, "") and not _same_host(host, log):
        raise UsageError(
            f"--host {host} and --log {log} name different hosts",
            hint="leave out --host (the prefix of --log names the host), or drop the prefix",
        )
    return resolve_location(log)


def _absent(h: Any, path: str) -> bool:
    """True when the host answered and the file is not there; a directory is exit 2."""
    from forensics.errors import FileMissing, UsageError

    where = path if h.name == "local" else f"{h.name}:{path}"
    try:
        st = h.stat(path)
    except FileMissing:
        return True  # permission denied and the rest propagate: it may well exist
    if st.is_dir:
        raise UsageError(
            f"{where}: is a directory, not a log file", hint=f"--log {where.rstrip('/')}/NAME.log"
        )
    return False


# The most of a remote log that classify/diagnose read (its tail: where launches fail).
REMOTE_LOG_MAX = 32 << 20


def classify_remote(host: Any, path: str, model: Any = None, *, warn: Any = None) -> list[Any]:
    """Classify a log on a remote ``Host`` (its last 32 MiB over SFTP; a compressed one whole,
    as a stream) as ``classifier.classify_file`` does a local one (same log source, same parse,
    same file age for ``hung``).

    The verdicts' path is ``HOST:PATH``. A file that is not there is InputNotFound naming the
    host; an unreachable host is the host's own error (exit 5).
    """
    from forensics.errors import NotRegularFile, UsageError
    from forensics.logsource import open_log

    where = f"{host.name}:{path}"
    try:
        src = open_log(host, path, where=where)
    except NotRegularFile as exc:
        if not host.is_dir(path):
            raise
        raise UsageError(
            f"{where}: is a directory, not a log file",
            hint=f"forensics classify {shlex.quote(where + '/*.log')}",
        ) from exc
    return classifier.classify_source(src, model, tail=REMOTE_LOG_MAX, warn=warn)


def classify_location(text: str, model: Any = None, *, warn: Any = None) -> list[Any]:
    """``forensics classify`` of one LOG: a local path, ``NAME:/path`` or
    ``ssh://user@host[:port]/path`` (forensics.hosts: unknown NAME exit 2, unreachable 5).
    ``warn(message)`` hears of a damaged compressed log (what decoded is classified)."""
    from forensics.errors import FileMissing, InputNotFound
    from forensics.hosts import is_remote, resolve_location

    if not is_remote(text):
        return classifier.classify_file(os.path.expanduser(text), model, warn=warn)
    host, path = resolve_location(text)
    try:
        return classify_remote(host, path, model, warn=warn)
    except FileMissing:
        raise InputNotFound(
            f"{host.name}:{path}: no such file (asked {host.name})",
            hint=f"forensics diagnose {Path(path).stem} --log {shlex.quote(text)} to diagnose "
            "a log that was never written",
        ) from None


def _diagnose_on(h: Any, path: str, name: str) -> list[dict[str, Any]]:
    """Classify an existing log on this machine or on a remote host. A damaged compressed
    log is diagnosed from what decoded; its reports carry ``warnings`` saying so."""
    warnings: list[str] = []
    model = classifier.load_model(None)
    if h.name == "local":
        reports = _file_reports(
            classifier.classify_file(path, model, warn=warnings.append), path, name
        )
    else:
        where = f"{h.name}:{path}"
        verdicts = classify_remote(h, path, model, warn=warnings.append)
        reports = _file_reports(verdicts, where, name, host=h.name)
    for rep in reports if warnings else []:
        rep["warnings"] = warnings
    return reports
