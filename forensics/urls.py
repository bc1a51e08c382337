"""Credentials in URLs: one helper that hides them wherever a URL is shown or stored.

``http://user:PASSWORD@host:30000/`` reaches the server as HTTP basic auth, but every message,
stored row and JSON document shows ``http://user:***@host:30000/``; query values whose name says
secret (``?token=…``, ``api_key=…``) are hidden the same way. It works on any text, so a message
that quotes a URL is cleaned as a whole (the CLI passes every error line through it).
"""

from __future__ import annotations

import re

MASK = "***"

# scheme://user:password@  (the password is everything up to the last @ before the host)
_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*):(?P<pw>[^\s/]*)@")
_SECRET_QUERY = re.compile(
    r"(?P<head>[?&](?:[A-Za-z0-9_.-]*(?:token|key|secret|password|passwd|pwd|auth)[A-Za-z0-9_.-]*)=)"
    r"(?P<value>[^&#\s]+)",
    re.I,
)


def redact_url(text: str) -> str:
    """``text`` with every URL password and secret query value replaced by ``***``."""
    if "@" not in text and "=" not in text:
        return text
    out = _USERINFO.sub(lambda m: f"{m['head']}:{MASK}@", text)
    return _SECRET_QUERY.sub(lambda m: f"{m['head']}{MASK}", out)


__all__ = ["MASK", "redact_url"]
