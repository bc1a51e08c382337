"""Hosts: where commands run and files are read. ``LocalHost``, ``SSHHost`` (paramiko), config.

Everything that touches a machine goes through the small ``Host`` interface below, so the same
code (ingest, launcher, evidence) runs on this machine and on a GPU host over SSH, and tests run
it against a real sshd on 127.0.0.1.

Contract (the same for every host):

* ``run(script, timeout=...)`` runs ``sh -c script`` with stdin closed (or fed from ``stdin``),
  no pty, both output streams drained concurrently and capped in memory (the *last*
  ``max_output`` bytes of each are kept; ``CmdResult.*_truncated`` says when). Past ``timeout``
  seconds the command's process group is killed and ``DeadlineExceeded`` is raised (or, with
  ``allow_timeout=True``, a ``CmdResult`` with ``timed_out=True`` is returned). ``rc`` follows the
  shell convention: a command killed by signal N has ``rc == 128 + N`` and ``signal == N``.
  With ``spill_dir`` (a directory on *this* machine, created when needed), a stream that outgrows
  ``max_output`` is also written whole to a new file there (S06): created only once the cap is
  exceeded, mode 0600, named ``<spill_name, else the command's first words>.<random>.stdout``
  (or ``.stderr``); its path is in ``CmdResult.stdout_spill`` / ``stderr_spill`` (None when the
  stream fit in memory). Memory stays capped either way. A spill that cannot be written (no
  space, no permission) never fails the command: the partial file is removed, the path is None
  and ``spill_error`` says why.
  SSH: a connection that drops mid-command raises ``RemoteError`` (the remote outcome is
  unknown; S07), so does one that went silent (found at the deadline by a channel-open probe);
  the dead connection is dropped and the next call on the same host object opens a new one.
* ``spawn(script)`` starts ``sh -c script`` detached: new session (``setsid``, so its pid is its
  process-group id), stdin from /dev/null, stdout/stderr appended to ``log`` (or /dev/null);
  returns the pid at once (S17).
* ``glob(pattern)`` expands ``*?[]`` per path component *on the host* without a shell (names may
  hold spaces or newlines); ``*`` skips dot-files; the result is sorted; no match raises
  ``InputNotFound``.
* ``read``/``iter_chunks`` read up to the size the file had when opened (S09). A file that
  shrinks or vanishes mid-read raises ``ReadIncomplete`` after the bytes read so far were
  returned/yielded (S08).

Remote commands are always built as ``sh -c <one shlex-quoted script>`` (S11, bad-inputs §3.1).

The package, one noun per module: ``base`` (the interface, results, read errors), ``capture``
(capped and spilled command output), ``globbing``, ``local`` (LocalHost), ``ssh`` (SSHHost:
connection, commands, streams), ``sftp`` (its files), ``forward`` (``ssh -L``), ``config``
(``[hosts.NAME]``), ``trust`` (host keys), ``lookup`` (names and locations -> cached hosts).
"""

from __future__ import annotations

from forensics.hosts.base import (
    CHUNK,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_OP_TIMEOUT,
    FILE_KINDS,
    KEEPALIVE_S,
    KILL_GRACE_S,
    KIND_TEXT,
    MAX_CONNECT_TIMEOUT,
    MAX_SFTP_REQUESTS,
    PATH_ERRORS,
    STREAM_AHEAD,
    STREAM_WINDOW,
    CmdResult,
    FileStat,
    Host,
    ReadIncomplete,
    file_kind,
    made_when_read,
    path_error,
    require_regular,
)
from forensics.hosts.capture import _Capped, _open_spill
from forensics.hosts.globbing import GLOB_MAX_DEPTH, GLOB_MAX_DIRS
from forensics.hosts.local import LocalHost
from forensics.hosts.lookup import close_all, get_host, is_remote, resolve_location

# name -> its module: the SSH side (paramiko's neighbours: socket, the streams, host keys) and
# the config file (tomllib) load when first named, so a command on local files never imports
# them (an unchanged re-ingest: ~10 ms of its ~0.2 s of CPU)
_LAZY = {
    **dict.fromkeys(
        ("CONFIG_SECTIONS", "HOST_KEYS", "HostConfig", "_host_config", "config_paths"),
        "config",
    ),
    **dict.fromkeys(("forensics_home", "load_config", "parse_address"), "config"),
    "PortForward": "forward",
    "SSHHost": "ssh",
    **dict.fromkeys(("fingerprint", "project_known_hosts", "trust_host"), "trust"),
}


def __getattr__(name: str) -> object:
    """A name of _LAZY, its module imported the first time it is asked for."""
    where = _LAZY.get(name)
    if where == "config":
        from forensics.hosts import config as module
    elif where == "forward":
        from forensics.hosts import forward as module
    elif where == "ssh":
        from forensics.hosts import ssh as module
    elif where == "trust":
        from forensics.hosts import trust as module
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value
    return value


__all__ = [
    "CHUNK",
    "CONFIG_SECTIONS",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_OP_TIMEOUT",
    "FILE_KINDS",
    "GLOB_MAX_DEPTH",
    "GLOB_MAX_DIRS",
    "HOST_KEYS",
    "KEEPALIVE_S",
    "KILL_GRACE_S",
    "KIND_TEXT",
    "MAX_CONNECT_TIMEOUT",
    "MAX_SFTP_REQUESTS",
    "PATH_ERRORS",
    "STREAM_AHEAD",
    "STREAM_WINDOW",
    "CmdResult",
    "FileStat",
    "Host",
    "HostConfig",
    "LocalHost",
    "PortForward",
    "ReadIncomplete",
    "SSHHost",
    "_Capped",
    "_host_config",
    "_open_spill",
    "close_all",
    "config_paths",
    "file_kind",
    "made_when_read",
    "fingerprint",
    "forensics_home",
    "get_host",
    "is_remote",
    "load_config",
    "parse_address",
    "path_error",
    "project_known_hosts",
    "require_regular",
    "resolve_location",
    "trust_host",
]
