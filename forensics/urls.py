"""Credentials in URLs: one helper that hides them wherever a URL is shown or stored.

``http://user:PASSWORD@host:30000/`` reaches the server as HTTP basic auth, but every message,
stored row and JSON document shows ``http://user:***@host:30000/``; query values whose name says
secret (``?token=…``, ``api_key=…``) are hidden the same way. It works on any text, so a message
that quotes a URL is cleaned as a whole (the CLI passes every error line through it).
"""

from __future__ import annotations

import re

MASK = "***"

# (name, pattern, replacement): every credential form a URL or an address can carry, in order.
URL_SECRETS: list[tuple[str, re.Pattern[str], str]] = [
    # scheme://user:password@ (the password is everything up to the last @ before the host)
    (
        "userinfo",
        re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*):(?P<pw>[^\s/]*)@"),
        rf"\g<head>:{MASK}@",
    ),
    # an SSH-style address without a scheme: user:password@host (hosts check u:pw@h, ssh errors)
    (
        "address_password",
        re.compile(
            r"(?P<head>(?<![\w/:@.%*-])[A-Za-z0-9._~-]+):(?![*]{3}@)[^\s/@:'\"]+@(?=[\w\[])"
        ),
        rf"\g<head>:{MASK}@",
    ),
    # ?token=…, &api_key=…: a query value whose name says secret
    (
        "secret_query",
        re.compile(
            r"(?P<head>[?&](?:[A-Za-z0-9_.-]*(?:token|key|secret|password|passwd|pwd|auth)"
            r"[A-Za-z0-9_.-]*)=)(?P<value>[^&#\s]+)",
            re.I,
        ),
        rf"\g<head>{MASK}",
    ),
]


def redact_url(text: str) -> str:
    """``text`` with every URL password and secret query value replaced by ``***``."""
    if "@" not in text and "=" not in text:
        return text
    for _, rx, repl in URL_SECRETS:
        text = rx.sub(repl, text)
    return text


def shown_text(text: str) -> str:
    """``text`` as every output boundary prints it (a `--json` document, a CSV, a table cell, a
    message): the parser's one redaction on each line that may hold a secret (a file or run
    name such as `…api_key=X.log` is shown redacted), then URL passwords hidden."""
    from forensics_parsers.secrets import redact_text

    return redact_url(redact_text(text))


__all__ = ["MASK", "URL_SECRETS", "redact_url", "shown_text"]
