"""Readiness (H06/H11): ``/health`` answered 200 several times in a row, then the launched
process group still alive and a 1-token ``/generate`` answered, all as seen from the host."""

from __future__ import annotations

import json
import shlex
import time
from typing import TYPE_CHECKING

from forensics.launcher.hostinfo import is_local

if TYPE_CHECKING:
    from forensics.hosts import Host

HEALTH_POLL_S = 0.5
# H06/H11: ready = this many 200s in a row from /health (each probe with its own timeout), then
# the server's process group alive and a 1-token /generate answered: /health alone is not trusted
HEALTH_OK_STREAK = 3
HEALTH_CONFIRM_S = 0.2  # between the probes of a streak
HEALTH_PROBE_TIMEOUT_S = 5.0
GENERATE_PROBE_TIMEOUT_S = 30.0
HTTP_BODY_MAX = 64 << 10  # the most of a /health or probe answer read (curl discards it)


def http_status(
    host: Host, url: str, tools: set[str], *, timeout: float, body: bytes | None = None
) -> int | None:
    """HTTP status of ``url`` as seen from the host (None when nothing answers in ``timeout``).

    GET, or POST of the JSON ``body``. Locally with urllib; on a remote host with curl (or
    wget), so the request comes from where the server runs.
    """
    if is_local(host):
        import http.client
        import urllib.error
        import urllib.request

        req = urllib.request.Request(url, data=body)  # noqa: S310 - our URL
        if body is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
                if len(resp.read(HTTP_BODY_MAX + 1)) > HTTP_BODY_MAX:
                    return None  # an answer without end is no answer (bounded memory)
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except (OSError, ValueError, http.client.HTTPException):
            return None  # refused, timed out, a bad URL (`--port x`) or not HTTP at all
    q, t = shlex.quote(url), f"{timeout:g}"
    if "curl" in tools:
        post = (
            f"-X POST -H 'Content-Type: application/json' --data-binary {shlex.quote(body.decode())} "
            if body is not None
            else ""
        )
        script = f"curl -s -o /dev/null -m {t} {post}-w '%{{http_code}}' {q}"
    elif "wget" in tools:
        post = (
            f"--header='Content-Type: application/json' --post-data={shlex.quote(body.decode())} "
            if body is not None
            else ""
        )
        script = (
            f"wget -q -T {t} -t 1 -O /dev/null -S {post}{q} 2>&1 "
            "| awk '/HTTP\\//{c=$2} END{print c}'"
        )
    else:
        return None
    res = host.run(script, timeout=timeout + 10, allow_timeout=True)
    try:
        code = int(res.text.strip()[-3:])
    except ValueError:
        return None
    return code or None


def health_status(host: Host, url: str, tools: set[str]) -> int | None:
    """HTTP status of the health URL as seen from the host (None when nothing answers)."""
    return http_status(host, url, tools, timeout=HEALTH_PROBE_TIMEOUT_S)


def ready_round(
    host: Host, health_url: str, pgid: int | None, tools: set[str], seen: int = 0
) -> tuple[int | None, bool, str | None, str | None]:
    """One readiness round (H06/H11): ``/health`` probed ``HEALTH_CONFIRM_S`` apart until
    ``HEALTH_OK_STREAK`` 200s in a row (``seen`` of them already), then ``verify_ready``.

    Returns ``(last health code, streak reached, problem, note)``; ready is a reached streak
    with no problem. A non-200 ends the round at once (no streak).
    """
    code: int | None = 200
    while seen < HEALTH_OK_STREAK:
        if seen:
            time.sleep(HEALTH_CONFIRM_S)
        code = health_status(host, health_url, tools)
        if code != 200:
            return code, False, None, None
        seen += 1
    problem, note = verify_ready(host, health_url, pgid, tools)
    return code, True, problem, note


def _generate_url(health_url: str) -> str:
    """The server's /generate beside its health URL (same scheme, host and port)."""
    from urllib.parse import urlsplit, urlunsplit

    u = urlsplit(health_url)
    return urlunsplit((u.scheme, u.netloc, "/generate", "", ""))


PROBE_BODY = json.dumps(
    {"text": "ping", "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
).encode()


def verify_ready(
    host: Host, health_url: str, pgid: int | None, tools: set[str]
) -> tuple[str | None, str | None]:
    """H11: after /health said 200, is the server really serving? ``(problem, note)``.

    ``problem`` (None when ready): the launched process group is gone (then something else
    answers the port), or a 1-token /generate failed or did not answer in time. ``note``: what
    could not be checked (no /generate on this server, no curl on the host).
    """
    if pgid:
        res = host.run(f"kill -0 -{int(pgid)} 2>/dev/null && echo alive", timeout=10)
        if res.text.strip() != "alive":
            return (
                f"/health answers 200 but the launched process group {pgid} is gone: "
                "another process serves that port",
                None,
            )
    url = _generate_url(health_url)
    if not is_local(host) and not tools & {"curl", "wget"}:
        return None, f"{host.name} has neither curl nor wget: a 1-token {url} was not tried"
    code = http_status(host, url, tools, timeout=GENERATE_PROBE_TIMEOUT_S, body=PROBE_BODY)
    if code == 200:
        return None, None
    if code in (404, 405):  # not an SGLang /generate: health and the group are all we have
        return None, f"{url} answered {code}: readiness rests on /health and the process group"
    seen = f"answered {code}" if code else f"did not answer within {GENERATE_PROBE_TIMEOUT_S:g} s"
    return f"/health answers 200 but a 1-token {url} {seen}", None
