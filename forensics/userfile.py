"""Reading a small file the user named (a sweep file, a bench dataset): one way, for every command.

The file is opened through ``LocalHost.iter_chunks`` (the one reader of local files): a FIFO,
socket or device is refused before a read could block or never end (exit 2, issue 14
"non-regular inputs"), a stat/open error goes through ``hosts.base.PATH_ERRORS`` (missing:
exit 3; a name over NAME_MAX, a symlink loop: exit 2), and a file over ``cap`` bytes is
refused before it is read, so memory stays bounded (``USER_FILE_CAPS`` lists each cap).
"""

from __future__ import annotations

from pathlib import Path

from forensics.errors import UsageError

# what is read -> the most bytes it may have (documented in docs/bad-inputs.md)
USER_FILE_CAPS: dict[str, int] = {
    "sweep file": 16 * 1024 * 1024,
    "dataset": 2 * 1024 * 1024 * 1024,
    "config file": 16 * 1024 * 1024,  # forensics.toml, $FORENSICS_HOME/config.toml
}


def read_user_file(path: str | Path, what: str) -> bytes:
    """The bytes of the regular file ``path``, at most ``USER_FILE_CAPS[what]`` of them.

    ``path`` as the user typed it: a ``pathlib.Path`` drops a trailing slash, so ``x.toml/``
    would read ``x.toml`` where the system says "not a directory" (exit 2)."""
    from forensics.hosts.base import require_regular
    from forensics.hosts.local import LocalHost

    shown = str(path)
    host = LocalHost()
    st = host.stat(shown)
    require_regular(st, shown, what)  # a folder, FIFO, socket or device: exit 2 with its kind
    cap = USER_FILE_CAPS[what]
    if st.size > cap:
        raise UsageError(
            f"{shown}: the {what} has {st.size:,} bytes, over the {cap:,}-byte cap",
            hint=f"split it or pass a smaller {what}",
        )
    return b"".join(host.iter_chunks(shown, limit=cap))


__all__ = ["USER_FILE_CAPS", "read_user_file"]
