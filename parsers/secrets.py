"""Secrets in log text: what is never stored verbatim (issue 14; bad-inputs §3.3).

``parsers.sglang`` passes every line through ``redact_lines`` once, right after the file's
wrapper is removed and before any rule reads it, so every table (lines, errors, events, runs,
the parser state an ingest keeps) only ever sees the redacted text. A secret becomes
``«redacted:<8 hex of its sha256>»``: equal secrets stay recognisably equal, and nothing of
the value is kept.
"""

from __future__ import annotations

import hashlib
import re

import polars as pl

MARK = "«redacted:"

# Keys whose values are secrets, in `server_args` (repr `api_key='x'` or dict `'api_key': 'x'`),
# environment dumps (`HF_TOKEN=x`) and headers (`Authorization: x`).
SECRET_KEY = (
    r"(?:[A-Za-z_]*api[_-]?key|[A-Za-z_]*_token|hf_token|hugging_?face_hub_token|"
    r"[A-Za-z_]*password[A-Za-z_]*|[A-Za-z_]*passwd|[A-Za-z_]*secret[A-Za-z_]*|authorization|"
    r"x-api-key|access_key(?:_id)?)"
)
SECRET_KEYS = re.compile(r"(?i)^" + SECRET_KEY + r"$")
# the same keys as command-line flags (`--api-key`, `--ssl-keyfile-password`, `--hf-token`)
SECRET_FLAG = (
    r"(?:[a-z-]*api-key|[a-z-]*-token|hf-token|token|[a-z-]*password[a-z-]*|[a-z-]*passwd|"
    r"[a-z-]*secret[a-z-]*|access-key(?:-id)?)"
)
# an Authorization header's scheme word: the credential is what follows it
AUTH_SCHEME = r"(?:Bearer|Basic|Token|Digest)"

# (name, pattern): the whole match, or its group `v` when it has one, is the secret.
RULES: list[tuple[str, str]] = [
    # key=value / key: value with a secret key; None, '' and booleans are not secrets
    (
        "secret_key_value",
        r"(?i)(?<![\w-])(?P<q>['\"]?)"
        + SECRET_KEY
        + r"(?P=q)\s*(?:=(?!=)|:)\s*(?!\s*(?:None|True|False|null|''|\"\")(?:[\s,)}\]]|$))"
        r"(?P<v>'[^'\n]*'|\"[^\"\n]*\"|(?:" + AUTH_SCHEME + r"\s+)?[^\s,)}\]'\"]+)",
    ),
    # a secret flag on a command line: `--api-key X`, `--admin-api-key=X`, `--hf-token X`
    (
        "secret_flag",
        r"(?i)(?<![\w-])--(?=[a-z])"
        + SECRET_FLAG
        + r"(?:=|\s+)(?!-)(?P<v>'[^'\n]*'|\"[^\"\n]*\"|[^\s'\"]+)",
    ),
    # Hugging Face tokens of any length (`hf_transfer`, `hf_quant_config` are not tokens)
    ("hf_token", r"(?<![\w-])hf_(?:(?=[A-Za-z0-9]*[A-Z0-9])[A-Za-z0-9]{4,}|[a-z]{16,})(?![\w-])"),
    ("hf_org_token", r"(?<![\w-])api_org_[A-Za-z0-9]{6,}"),
    ("openai_key", r"(?<![\w-])sk-[A-Za-z0-9_\-]{16,}"),
    # provider tokens recognisable by their prefix alone
    (
        "aws_key_id",
        r"(?<![A-Za-z0-9])(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA)[A-Z0-9]{16}(?![A-Za-z0-9])",
    ),
    ("github_token", r"(?<![\w-])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{20,})"),
    ("gitlab_token", r"(?<![\w-])glpat-[A-Za-z0-9_\-]{20,}"),
    ("slack_token", r"(?<![\w-])xox[abposr]-[A-Za-z0-9\-]{10,}"),
    ("google_api_key", r"(?<![\w-])AIza[0-9A-Za-z_\-]{35}"),
    ("jwt", r"(?<![\w-])eyJ[A-Za-z0-9_\-]{6,}\.eyJ[A-Za-z0-9_\-]{6,}\.[A-Za-z0-9_\-]{6,}"),
    # a PEM private key on one line (BEGIN … END, or BEGIN to the end of the line)
    (
        "private_key",
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?P<v>.+?)(?=-----END [A-Z ]*PRIVATE KEY-----|$)",
    ),
    ("bearer", r"(?i)(?<![\w-])Bearer\s+(?P<v>[A-Za-z0-9._\-+/=~]{6,})"),
    # credentials in URLs: scheme://user:password@host
    ("url_password", r"(?<=://)[^/\s:@'\"]*:(?P<v>[^/\s@'\"]+)(?=@)"),
    ("query_token", r"(?i)[?&](?:token|access_token|api_key|key|sig|signature)=(?P<v>[^&\s'\"]+)"),
]
_RULES = [(n, re.compile(p)) for n, p in RULES]
# a cheap vectorised test for lines that may hold one (polars' regex: no look-around)
HINT = (
    r"(?i)hf_|--[a-z-]*token|api_org_|sk-|bearer|://|_token|token=|api[_-]?key|password|passwd|"
    r"secret|authorization|access_key|[?&](?:key|sig|signature)=|akia|asia|agpa|aida|aroa|aipa|"
    r"anpa|anva|gh[pousr]_|github_pat_|glpat-|xox[abposr]-|aiza|eyj|private key"
)
# A cheaper first sieve (~3x on a busy log): every line HINT matches, matches one of these
# (hf_, api_org_, _token, access_key: `_`; token=, [?&]..=: `=`; --..token: `--`; the letter
# words by a shorter stem, case-insensitive as HINT), and polars runs these short patterns far
# faster than HINT's long case-insensitive alternation. HINT then decides on what they pick.
HINT_SIEVE = (
    r"(?i)api[_-]?k|bearer|passw|secret|authoriz|sk-",
    r"[_=]",
    # the provider prefixes of RULES, as they are written (case-sensitive, like those rules)
    r"AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|AIza|glpat-|xox[abposr]-|eyJ|PRIVATE KEY",
    r"--|://",
)


def redact_value(v: str) -> str:
    """One secret -> its mark (idempotent: a mark stays as it is)."""
    if v.startswith(MARK) or v.strip("'\"").startswith(MARK):
        return v
    return MARK + hashlib.sha256(v.encode()).hexdigest()[:8] + "»"


def _sub(m: re.Match[str]) -> str:
    v = m.groupdict().get("v")
    if not v:
        return redact_value(m.group(0))
    start, end = m.span("v")
    q = v[0] if v[0] in "'\"" and v[-1] == v[0] and len(v) > 1 else ""
    inner = v[1:-1] if q else v
    bearer = re.match(r"(?i)" + AUTH_SCHEME + r"\s+", inner)
    if bearer:
        inner = inner[bearer.end() :]
        q_pre = v[: len(q) + bearer.end()]
    else:
        q_pre = q
    whole = m.group(0)
    s0 = start - m.start()
    return whole[:s0] + q_pre + redact_value(inner) + q + whole[end - m.start() :]


def redact(text: str) -> str:
    """Every secret of a text replaced by its mark."""
    for _, rx in _RULES:
        text = rx.sub(_sub, text)
    return text


def redact_lines(lines: pl.Series) -> tuple[pl.Series, int]:
    """``redact`` on the lines that may hold a secret (a vectorised test picks them)
    -> (lines, how many of them changed)."""
    sieve = pl.select(pl.any_horizontal(pl.lit(lines).str.contains(p) for p in HINT_SIEVE))
    idx = sieve.to_series().arg_true()
    if idx.is_empty():
        return lines, 0
    idx = idx.filter(lines.gather(idx).str.contains(HINT))
    if idx.is_empty():
        return lines, 0
    old = lines.gather(idx).to_list()
    new = [redact(v) if v is not None else None for v in old]
    changed = sum(a != b for a, b in zip(old, new))
    if not changed:
        return lines, 0
    out = lines.clone()
    out.scatter(idx, pl.Series(new, dtype=pl.String))
    return out, changed


__all__ = [
    "HINT",
    "HINT_SIEVE",
    "MARK",
    "RULES",
    "SECRET_KEYS",
    "redact",
    "redact_lines",
    "redact_value",
]
