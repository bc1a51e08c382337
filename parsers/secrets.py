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
from typing import TYPE_CHECKING, NamedTuple

from forensics_parsers import secret_search
from forensics_parsers.secret_search import OnFirstUse, Text, leading_literals, matches, sub

if TYPE_CHECKING:  # polars only for ``redact_lines``: the rest runs on a bare python3 (a
    import polars as pl  # launch's host runs this module's source: launcher/scrub.py)

MARK = "«redacted:"

# Keys whose values are secrets, in `server_args` (repr `api_key='x'` or dict `'api_key': 'x'`),
# environment dumps (`HF_TOKEN=x`) and headers (`Authorization: x`).
SECRET_KEY = (
    # (a tokenizer's special tokens, `mask_token=<|MASK|>`, `eos_token`, are not credentials)
    r"(?!(?:bos|eos|pad|unk|mask|sep|cls|additional_special)_token\b)"
    r"(?:[A-Za-z_]*api[_-]?key|[A-Za-z_]*_token|hf_token|hugging_?face_hub_token|"
    r"[A-Za-z_]*password[A-Za-z_]*|[A-Za-z_]*passwd|[A-Za-z]\w*_pwd|[A-Za-z_]*secret[A-Za-z_]*|"
    r"[A-Za-z_]*passphrase|"
    r"authorization|proxy-authorization|cookie|x-api-key|x-[a-z-]*(?:auth|access|session)-token|"
    r"access_key(?:_id)?|[A-Za-z_]*private_key)"
)
SECRET_KEYS = re.compile(r"(?i)^" + SECRET_KEY + r"$")
# one of these is in every key of SECRET_KEY (``RULES``' literals)
KEY_LITERALS = ("api", "_token", "-token", "pass", "_pwd", "secret", "authorization", "cookie")
KEY_LITERALS += ("access_key", "private_key")
# the same keys as command-line flags (`--api-key`, `--ssl-keyfile-password`, `--hf-token`)
SECRET_FLAG = (
    r"(?:[a-z-]*api-key|[a-z-]*-token|hf-token|token|[a-z-]*password[a-z-]*|[a-z-]*passwd|"
    r"[a-z-]*secret[a-z-]*|[a-z-]*passphrase|access-key(?:-id)?|oauth2-bearer)"
)
# Passwords other programs take as options on a command line (a chain that lint quotes, the
# launch journal): (name, the programs, the option whose value follows, glued or after a space).
SECRET_OPTIONS: tuple[tuple[str, str, str], ...] = (
    ("mysql", r"mysql\w*|mariadb\w*", r"-p(?=[^\s-])"),  # glued only: a lone -p prompts for it
    ("sshpass", r"sshpass", r"-p\s*"),
    ("redis", r"redis-cli", r"-a\s+"),
    ("ldap", r"ldap[a-z]+", r"-w\s+"),
    ("login", r"(?:docker|podman|nerdctl|buildah|skopeo|helm)(?:\s+registry)?\s+login", r"-p\s+"),
    ("openssl", r"openssl", r"-pass(?:in|out)?\s+['\"]?pass:"),
    ("curl", r"curl", r"(?:-u\s*|--user[=\s]+|-U\s*|--proxy-user[=\s]+)['\"]?[^\s:'\"]*:"),
    ("smb", r"smbclient|rpcclient|smbmap|mount\.cifs", r"-U\s*['\"]?[^\s%'\"]*%"),
    (
        "htpasswd",
        r"htpasswd",
        r"-[a-zA-Z]*b[a-zA-Z]*\s+(?:-\S+\s+)*\S+\s+\S+\s+",
    ),  # -b FILE USER PASSWORD
    # seventh round (issue 14): archivers, BMCs, Java key stores, database and broker clients
    ("mongo", r"mongo\w*", r"-p\s+"),
    ("zip", r"zip|unzip|zipcloak|zipsplit", r"-P\s*"),
    ("7z", r"7z[ar]?|7za|7zr|rar|unrar", r"-p(?=[^\s-])"),  # glued only, as 7z reads it
    ("ipmitool", r"ipmitool", r"-P\s*"),
    ("keytool", r"keytool|jarsigner", r"-(?:src|dest)?(?:store|key)pass\s+(?:(?:env|file):)?"),
    ("mssql", r"sqlcmd|bcp|osql|isql", r"-P\s*"),
    ("lftp", r"lftp", r"-u\s+['\"]?[^\s,'\"]*,"),
    ("rdp", r"xfreerdp|wlfreerdp", r"[/-]p:"),
    ("rdesktop", r"rdesktop", r"-p\s*"),
    ("mosquitto", r"mosquitto_(?:pub|sub|rr)", r"-P\s+"),
    ("cqlsh", r"cqlsh", r"-p\s+"),
    ("influx", r"influx", r"-password\s+"),
    ("rabbitmq", r"rabbitmqadmin", r"-p\s+"),
)
# The programs of SECRET_OPTIONS, one alternation (the sieve and HINT read the same table)
OPTION_PROGRAMS = "|".join(programs for _, programs, _ in SECRET_OPTIONS)
_OPTION_VALUE = r"(?P<v>'[^'\n]*'|\"[^\"\n]*\"|[^\s'\";&|]+)"
# an Authorization header's scheme word: the credential is what follows it
AUTH_SCHEME = r"(?:Bearer|Basic|Token|Digest)"

# What follows a secret key but is no secret (issue 14, seventh round: a false positive mangles
# the text it is in, `/etc/passwd: no runs` became `«redacted»`): None, booleans, empty quotes,
# words that say a value is absent or that carry on a sentence (`password: not set`,
# `passwd: no such user`), a reference to a variable (`password=$DB_PASS`), a tokenizer's
# special token (`<|MASK|>`, `</s>`), a placeholder (`***`, `<redacted>`).
NOT_A_VALUE = (
    r"None|True|False|null|nil|''|\"\"|no|not|none|yes|is|are|was|were|be|been|the|an?|of|for|"
    r"to|in|on|at|with|from|by|and|or|if|set|unset|empty|missing|required|invalid|provided|"
    r"given|needed|hidden|found|changed|expired|incorrect|wrong|must|should|will|can|"
    r"\$\{?[A-Za-z_]\w*\}?|<[^\s<>]*>|\*+"
)
_NOT_A_VALUE = r"(?!\s*['\"]?(?:" + NOT_A_VALUE + r")['\"]?(?:[\s,;.)}\]]|$))"
# a credential-shaped word (for the forms with only a space between key and value, `KEY value`
# of an environment dump): 8 or more characters of a token's alphabet, letters and digits both
_CREDENTIAL = r"(?=[^\s,;]*\d)(?=[^\s,;]*[A-Za-z])[A-Za-z0-9_\-./+=~:]{8,}(?![^\s,;)\]}])"

# a `*_token` key followed by a plain number, unquoted (a count or a rate): not a secret
# key's value; a quoted one (`"access_token": "12345"`) may be a credential
_TOKEN_COUNT = (
    r"(?![A-Za-z_]*_token['\"]?\s*[:=]\s*-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
    r"(?:[\s,;)}\]]|$))"
)


# the prefixes of AWS access key ids (one list: the rule, its literals, HINT, HINT_SIEVE)
AWS_KEY_PREFIXES = ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "AIPA", "ANPA", "ANVA")
_AWS = "|".join(AWS_KEY_PREFIXES)


# (name, literals, pattern): the whole match, or its group `v` when it has one, is the secret.
# Every match holds one of the literals (lower case where the pattern ignores case): a text
# without any is not searched by that rule (parsers/secret_search.py); () searches every text.
RULES: list[tuple[str, tuple[str, ...], str]] = [
    # key=value / key: value with a secret key; None, '' and booleans are not secrets
    (
        "secret_key_value",
        KEY_LITERALS,
        # (a key right after `/` is a path's last name: `…/api_key=X.log` is a key, but
        # `/etc/passwd: no such file` a message's separator: only `=` follows it there)
        r"(?i)(?:(?<=/)(?P<path>)|(?<![\w/-]))(?P<q>['\"]?)"
        # a `*_token` key holding a number is a count or a rate (`ms_per_token: 12.5`,
        # `new_token=8192`, `kv_bytes_per_token: 70272`), never a credential
        + _TOKEN_COUNT
        + SECRET_KEY
        + r"(?P=q)\s*(?(path)=(?!=)|(?:=(?!=)|:))\s*"
        + _NOT_A_VALUE
        # (a value in escaped quotes, `key=\'x\'`, is read by the escaped forms: ESCAPES)
        + r"(?!\\['\"])(?P<v>'[^'\n]*'|\"[^\"\n]*\"|(?:"
        + AUTH_SCHEME
        + r"\s+)?[^\s,)}\]'\"]+)",
    ),
    # a bare `token` key (`token=X`, `"token": "X"`, `TOKEN: X`): not a count (`#token: 90`,
    # `token=128`) nor a word of a sentence
    (
        "bare_token",
        ("token",),
        r"(?i)(?<![\w#/.-])(?P<q>['\"]?)token(?P=q)\s*(?:=(?!=)|:)\s*"
        + _NOT_A_VALUE
        + r"(?!\s*['\"]?\d+(?:\.\d+)?['\"]?(?:[\s,;)}\]]|$))(?!\\['\"])"
        r"(?P<v>'[^'\n]*'|\"[^\"\n]*\"|[^\s,)}\]'\"]+)",
    ),
    # an environment dump's `KEY value` (a space only): a secret key (or `token`) followed by a
    # credential-shaped word (`WANDB_API_KEY 0a1b…`; `HF_TOKEN to enable` is a sentence)
    (
        "secret_key_space",
        (*KEY_LITERALS, "token"),
        r"(?i)(?<![\w/#.-])(?:" + SECRET_KEY + r"|token)[ \t]+(?P<v>" + _CREDENTIAL + r")",
    ),
    # a secret flag on a command line: `--api-key X`, `--admin-api-key=X`, `--hf-token X`
    (
        "secret_flag",
        ("--",),
        r"(?i)(?<![\w-])--(?=[a-z])"
        + SECRET_FLAG
        + r"(?:=|\s+)(?!-)(?P<v>'[^'\n]*'|\"[^\"\n]*\"|[^\s'\"]+)",
    ),
    # Hugging Face tokens of any length (`hf_transfer`, `hf_quant_config` are not tokens)
    # (after `_` too: a file name `sglang_hf_X.log`; `use_hf_transfer` has no token's shape)
    (
        "hf_token",
        ("hf_",),
        r"(?<![A-Za-z0-9-])hf_(?:(?=[A-Za-z0-9]*[A-Z0-9])[A-Za-z0-9]{4,}|[a-z]{16,})(?![\w-])",
    ),
    ("hf_org_token", ("api_org_",), r"(?<![\w-])api_org_[A-Za-z0-9]{6,}"),
    ("openai_key", ("sk-",), r"(?<![\w-])sk-[A-Za-z0-9_\-]{16,}"),
    # provider tokens recognisable by their prefix alone
    (
        "aws_key_id",
        AWS_KEY_PREFIXES,
        r"(?<![A-Za-z0-9])(?:" + _AWS + r")[A-Z0-9]{16}(?![A-Za-z0-9])",
    ),
    (
        "github_token",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        r"(?<![\w-])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{20,})",
    ),
    ("gitlab_token", ("glpat-",), r"(?<![\w-])glpat-[A-Za-z0-9_\-]{20,}"),
    ("slack_token", ("xox",), r"(?<![\w-])xox[abposr]-[A-Za-z0-9\-]{10,}"),
    ("google_api_key", ("AIza",), r"(?<![\w-])AIza[0-9A-Za-z_\-]{35}"),
    (
        "jwt",
        ("eyJ",),
        r"(?<![\w-])eyJ[A-Za-z0-9_\-]{6,}\.eyJ[A-Za-z0-9_\-]{6,}\.[A-Za-z0-9_\-]{6,}",
    ),
    # a PEM private key on one line (BEGIN … END, or BEGIN to the end of the line)
    (
        "private_key",
        ("-----BEGIN ",),
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?P<v>.+?)(?=-----END [A-Z ]*PRIVATE KEY-----|$)",
    ),
    ("bearer", ("bearer",), r"(?i)(?<![\w-])Bearer\s+(?P<v>[A-Za-z0-9._\-+/=~]{6,})"),
    # credentials in URLs: scheme://user:password@host
    ("url_password", ("://",), r"(?<=://)[^/\s:@'\"]*:(?P<v>[^/\s@'\"]+)(?=@)"),
    # the same without a scheme, an ssh-style address: user:password@host
    # (not the word after a mark's `«`: `«redacted:…»@` is a mark already)
    (
        "address_password",
        ("@",),
        r"(?<![\w/:@.%*«-])[A-Za-z0-9._~-]+:(?P<v>[^\s/@:'\"]+)@(?=[\w\[])",
    ),
    # a query parameter that carries a credential (`?api_key=`, `&sig=`, an S3 presigned URL's
    # `X-Amz-Signature=`, `X-Amz-Security-Token=`, `X-Amz-Credential=`, `?password=`)
    (
        "query_token",
        ("?", "&"),
        r"(?i)[?&](?:key|sig|[\w.-]*(?:token|api_key|signature|secret|passw(?:or)?d|credential))="
        r"(?P<v>[^&\s'\"]+)",
    ),
    # a password option of another program (SECRET_OPTIONS), after the words before it
    *(
        (
            "option_" + name,
            leading_literals(programs),
            r"(?<![\w-])(?:"
            + programs
            + r")(?![\w-])(?:\s+[^\s;&|]+)*?\s+"
            + option
            + _OPTION_VALUE,
        )
        for name, programs, option in SECRET_OPTIONS
    ),
]
# Where the matches of a rule start, for the search (parsers/secret_search.py; a rule not named
# here: anywhere): at a literal of theirs (the pattern begins with it, after a look-behind),
# right after one, or at a word holding one (a key: a look-behind refuses a word character
# before it), or at the quote before that word
_AT = ["secret_flag", "hf_token", "hf_org_token", "openai_key", "aws_key_id", "github_token",
       "gitlab_token", "slack_token", "google_api_key", "jwt", "private_key", "bearer",
       "query_token", *("option_" + name for name, _, _ in SECRET_OPTIONS)]  # fmt: skip
STARTS = {**dict.fromkeys(_AT, "at"), "url_password": "after"}  # (python3 of any launch host)
STARTS.update(dict.fromkeys(["secret_key_value", "bare_token", "secret_key_space"], "word"))
_rules = OnFirstUse(RULES, STARTS)  # RULES compiled when a text is first searched
# a cheap vectorised test for lines that may hold one (polars' regex: no look-around)
HINT = (
    r"(?i)hf_|--[a-z-]*token|api_org_|sk-|bearer|://|_token|token=|api[_-]?key|password|passwd|"
    r"passphrase|[a-z0-9._~-]:[^\s/@:'\"]+@|%[0-9a-f]{2}|\\u[0-9a-f]{4}|cookie|access-key|private_key|"
    r"token\W{0,3}[:=]\W{0,3}\d*[^\W\d]|token[ \t]+\S*\d|"
    r"secret|authorization|access_key|[?&][\w.-]*(?:key|sig|signature|credential)=|"
    + _AWS.lower()
    + r"|gh[pousr]_|github_pat_|glpat-|xox[abposr]-|aiza|eyj|"
    r"private key|_pwd|oauth2-bearer|" + OPTION_PROGRAMS
)
# A cheaper first sieve (~3x on a busy log): every line HINT matches, matches one of these
# (hf_, api_org_, _token, access_key: `_`; token=, [?&]..=: `=`; --..token: `--`; the letter
# words by a shorter stem, case-insensitive as HINT), and polars runs these short patterns far
# faster than HINT's long case-insensitive alternation. HINT then decides on what they pick.
HINT_SIEVE = (
    r"(?i)api[_-]?k|bearer|passw|passphr|secret|authoriz|sk-|cookie|access-k|"
    # (`token: X`, `\"token\": \"X`; not a count: `#token: 90`, `token usage: 0.01`)
    r"token\W{0,3}:\W{0,3}\d*[^\W\d]|token[ \t]+\S*\d",
    r"[_=]",
    # the provider prefixes of RULES, as they are written (case-sensitive, like those rules),
    # and the programs of SECRET_OPTIONS (`_pwd` is `[_=]`'s). Header names (`Cookie:`,
    # `X-Auth-Token:`) are not sieved (they cost 2x here): their lines are redacted when a
    # program of the line is (`curl -H …`), and lint and the journal redact every text whole.
    _AWS + r"|AIza|glpat-|xox[abposr]-|eyJ|PRIVATE KEY|" + OPTION_PROGRAMS,
    # and escaped forms (ESCAPES: what the views decode), a scheme-less user:password@host
    r"--|://|%[0-9A-Fa-f]{2}|\\['\"]|\\u[0-9A-Fa-f]{4}|@",
)
# ... run as one regex, each pattern's flags scoped to it: one polars pass, not four (~2.5x less)
_SIEVE_RX = "|".join(f"(?i:{p[4:]})" if p.startswith("(?i)") else f"(?:{p})" for p in HINT_SIEVE)


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
    """Every secret of a text replaced by its mark (a text of several lines: also the body
    lines of a PEM private key block, ``pem_lines``), in its plain form and in its escaped
    forms (``ESCAPES``: JSON- or shell-escaped quotes, URL-encoded)."""
    if "\n" in text and _PEM_BEGIN in text:
        return "\n".join(pem_lines([redact(t) for t in text.split("\n")])[0])
    t = Text(text)
    escaped = _redact_escaped(t)
    t = t if escaped == text else Text(escaped)
    for rule in _rules():
        new = sub(rule, _sub, t)
        if new is not t.text:  # (a mark: the rules after it search the text as it is now)
            t = Text(new)
    return t.text


# Escaped forms of a text (one mechanism for all of them): each row decodes one escape
# (`\\"` -> `"`, `%3D` -> `=`); a view decodes them all, up to ESCAPE_DEPTH times (a JSON
# document quoted inside another, then in a shell chain, then in a stored recipe's JSON), and
# the same RULES search each view; what they find is mapped back to the original's characters.
# A list of words (`["--api-key", "X"]`, `['--hf-token', 'X']`: an argv printed as JSON or a
# repr) is one more view, its items joined by spaces as a command line has them.
ESCAPES: tuple[tuple[str, str, object], ...] = (
    ("backslash", r"\\[\"'\\/]", lambda t: t[1]),
    ("percent", r"%[0-9A-Fa-f]{2}", lambda t: chr(int(t[1:], 16))),
    # a JSON or Python unicode escape (`"api\u005fkey": "\u0058…"`), seventh round
    ("unicode", r"\\u[0-9A-Fa-f]{4}", lambda t: chr(int(t[2:], 16))),
)
_ESCAPED = re.compile("|".join(f"(?P<{n}>{p})" for n, p, _ in ESCAPES))
_DECODE = {n: d for n, _, d in ESCAPES}
_LIST_ITEMS = re.compile(r"""["']\s*,\s*["']""")
ESCAPE_DEPTH = 6


def _decoded(text: str, at: list[int], rx: re.Pattern[str], dec) -> tuple[str, list[int]]:  # noqa: ANN001
    """``text`` with each match of ``rx`` replaced by ``dec(match)``, and where each of its
    characters starts in the original (``at``: the same for ``text``, plus its end)."""
    chars: list[str] = []
    out: list[int] = []
    pos = 0
    for m in rx.finditer(text):
        chars.append(text[pos : m.start()])
        out.extend(at[pos : m.start()])
        chars.append(dec(m))
        out.append(at[m.start()])
        pos = m.end()
    chars.append(text[pos:])
    out.extend(at[pos:])
    return "".join(chars), out


def _views(text: str) -> list[tuple[str, list[int]]]:
    """The decoded views of ``text`` (each level of ESCAPES, then each as a list of words):
    (view, where each view character starts in ``text``, plus the end)."""
    levels: list[tuple[str, list[int]]] = [(text, list(range(len(text) + 1)))]
    for _ in range(ESCAPE_DEPTH):
        view, at = levels[-1]
        if not _ESCAPED.search(view):
            break
        levels.append(_decoded(view, at, _ESCAPED, lambda m: _DECODE[m.lastgroup](m.group(0))))
    joined = [
        _decoded(view, at, _LIST_ITEMS, lambda m: " ") for view, at in levels
        if _LIST_ITEMS.search(view)
    ]  # fmt: skip
    return levels[1:] + joined


def _escaped_spans(t: Text) -> list[tuple[int, int, str]]:
    """Secrets of ``t`` found only in an escaped form: (start, end, the decoded value).
    A span that overlaps one found before it (plainly, or in an earlier view) is left out."""
    text = t.text
    if "\\" not in text and "%" not in text and not _LIST_ITEMS.search(text):
        return []
    taken = _plain_spans(t)
    found: list[tuple[int, int, str]] = []
    for view, at in _views(text):
        for s, e in _plain_spans(Text(view)):
            span = (at[s], at[e])
            if span[0] < span[1] and not any(a < span[1] and span[0] < b for a, b in taken):
                taken.append(span)
                found.append((*span, view[s:e]))
    return sorted(found)


def _redact_escaped(t: Text) -> str:
    text = t.text
    for s, e, value in reversed(_escaped_spans(t)):
        text = text[:s] + redact_value(value) + text[e:]
    return text


# A PEM private key over several lines: the BEGIN line is redacted by the `private_key` rule,
# the base64 lines after it (up to the END line) by ``pem_lines``, whole.
PEM_BEGIN = "PRIVATE KEY-----"  # a line holding it opens a block (pem_lines)
_PEM_BEGIN = PEM_BEGIN
_PEM_OPEN = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")
_PEM_END = re.compile(r"-----END [A-Z ]*PRIVATE KEY-----")
# what a line inside the block looks like: base64 (64 a line), or a header (`Proc-Type: …`,
# `DEK-Info: …`); any other line (a log line: a BEGIN never closed) ends the block unredacted
_PEM_BODY = re.compile(r"\s*(?:[A-Za-z0-9+/=]+|[A-Za-z][A-Za-z-]*: \S.*)\s*")


def pem_lines(lines: list[str], inside: bool = False) -> tuple[list[str], bool]:
    """``lines`` with every line inside a PEM private key block replaced by its mark;
    ``inside``: a block was open before the first line (a stream read in pieces). Returns
    (lines, whether a block is still open after the last)."""
    out = []
    for line in lines:
        if inside and _PEM_END.search(line):
            inside = False
            out.append(line)
            continue
        if inside and (_PEM_BODY.fullmatch(line) or not line.strip()):
            out.append(redact_value(line) if line.strip() else line)
            continue
        # outside a block, or a line no key has (which ends one: a BEGIN never closed)
        out.append(line)
        opened = _PEM_OPEN.search(line)
        inside = bool(opened) and not _PEM_END.search(line, opened.end())
    return out, inside


_HINT = secret_search.LazyRegex(HINT)  # (compiled at the first output: most print none)


def redact_text(text: str) -> str:
    """``redact`` on each line of ``text`` that HINT picks (an output as printed: a JSON
    document one value a line, a CSV, a report), the others kept as they are: the one
    redaction at every output boundary, cheap on an output without a secret."""
    hint = _HINT.rx
    if not hint.search(text):
        return text
    lines = text.split("\n")
    out = [redact(t) if hint.search(t) else t for t in lines]
    if _PEM_BEGIN in text:
        out = pem_lines(out)[0]
    return "\n".join(out)


def redact_data(data):  # noqa: ANN001, ANN201 - any JSON-like value
    """``redact`` on every string of a JSON-like value (dicts, lists, tuples; keys kept)."""
    if isinstance(data, str):
        return redact(data)
    if isinstance(data, dict):
        return {k: redact_data(v) for k, v in data.items()}
    if isinstance(data, list) or type(data) is tuple:
        return type(data)(redact_data(v) for v in data)
    return data


def secret_spans(text: str) -> list[tuple[int, int]]:
    """Where ``redact`` finds a secret in ``text`` (one line): the (start, end) of each value,
    by the same RULES (quotes and an Authorization scheme word left out, as ``_sub`` does),
    in its plain and its escaped forms (``ESCAPES``)."""
    t = Text(text)
    return _plain_spans(t) + [(s, e) for s, e, _ in _escaped_spans(t)]


def _plain_spans(t: Text) -> list[tuple[int, int]]:
    spans, text = [], t.text
    for rule in _rules():
        for m in matches(rule, t):
            v = m.groupdict().get("v")
            if not v:
                spans.append(m.span())
                continue
            start, end = m.span("v")
            if v[0] in "'\"" and v[-1] == v[0] and len(v) > 1:
                start, end = start + 1, end - 1
            bearer = re.match(r"(?i)" + AUTH_SCHEME + r"\s+", text[start:end])
            start += bearer.end() if bearer else 0
            if not text.startswith(_MARKS, start):  # a mark already (JSON-escaped or not)
                spans.append((start, end))
    return spans


_MARKS = (MARK, "\\u00abredacted:")


def mask(data: bytes, inside: bool = False) -> tuple[bytes, bool]:
    """Complete lines of bytes with every secret ``redact`` would replace overwritten by ``*``
    instead, byte for byte (a file another process still appends to keeps its length and
    offsets); quotes and backslashes are kept, so a JSON or shell line stays well formed.
    ``inside``: a PEM private key block was open before ``data`` (as ``pem_lines``)."""
    text = data.decode("utf-8", "surrogateescape")
    lines = text.split("\n")
    bodies, inside = pem_lines(lines, inside)
    out = []
    for line, body in zip(lines, bodies):
        chars = list(line)
        spans = [(0, len(line))] if body != line else secret_spans(line)
        for start, end in spans:
            for i in range(start, end):
                if chars[i] not in "\\\"'":
                    chars[i] = "*" * len(chars[i].encode("utf-8", "surrogateescape"))
        out.append("".join(chars))
    return "\n".join(out).encode("utf-8", "surrogateescape"), inside


class StreamRedactor:
    """``redact`` for bytes that arrive in pieces (a command's output spilled to a file):
    whole lines are redacted as they complete, the last partial line waits for its end (at
    most ``hold`` bytes: past that it is redacted as it is), a PEM block spans pieces."""

    def __init__(self, hold: int = 1 << 20):
        self.hold = hold
        self._pending = bytearray()
        self._inside = False

    def feed(self, data: bytes) -> bytes:
        self._pending += data
        cut = self._pending.rfind(b"\n") + 1
        if not cut and len(self._pending) <= self.hold:
            return b""
        cut = cut or len(self._pending)
        done = bytes(self._pending[:cut])
        del self._pending[:cut]
        return self._redact(done)

    def finish(self) -> bytes:
        done, self._pending = bytes(self._pending), bytearray()
        return self._redact(done) if done else b""

    def _redact(self, data: bytes) -> bytes:
        text = data.decode("utf-8", "surrogateescape")
        lines, self._inside = pem_lines([redact(t) for t in text.split("\n")], self._inside)
        return "\n".join(lines).encode("utf-8", "surrogateescape")


class Redacted(NamedTuple):
    """What ``redact_lines`` returns: the lines, how many changed, and whether a PEM private
    key block is still open after the last line (the next chunk's ``pem_open``)."""

    lines: pl.Series
    changed: int
    pem_open: bool = False


def redact_lines(
    lines: pl.Series, pem_open: bool = False, gaps: pl.Series | None = None, tail_gap: bool = False
) -> Redacted:
    """``redact`` on the lines that may hold a secret (a vectorised test picks them)
    -> (lines, how many of them changed, a PEM block open after them). ``pem_open``: a block
    was open before the first line (a log read in chunks: its body straddles a boundary).
    ``gaps``: per line, whether lines not given here came before it (the compiled reader's
    metrics lines), ``tail_gap``: after the last: such a line ends a block as it would in
    the text itself (no key line is a metrics line), so both line readers agree."""
    import polars as pl

    idx = lines.str.contains(_SIEVE_RX).arg_true()
    if not idx.is_empty():
        idx = idx.filter(lines.gather(idx).str.contains(HINT))
    if idx.is_empty() and not pem_open:
        return Redacted(lines, 0)
    old = lines.gather(idx).to_list()
    new = [redact(v) if v is not None else None for v in old]
    if pem_open or any(v is not None and _PEM_BEGIN in v for v in old):
        # the body lines of a PEM block: no rule matches them alone (its BEGIN line is hinted)
        done = _with_pem_bodies(lines, idx, new, pem_open, gaps)
        return done._replace(pem_open=done.pem_open and not tail_gap)
    changed = sum(a != b for a, b in zip(old, new))
    if not changed:
        return Redacted(lines, 0)
    out = lines.clone()
    out.scatter(idx, pl.Series(new, dtype=pl.String))
    return Redacted(out, changed)


_GAP = "\x00"  # stands for the lines a reader did not hand over: no key line, it ends a block


def _with_pem_bodies(
    lines: pl.Series, idx: pl.Series, new: list, pem_open: bool, gaps: pl.Series | None
) -> Redacted:
    """redact_lines for a chunk holding (or continuing) a PEM block: every line through
    ``pem_lines`` (a gap before a line: a line that ends a block)."""
    import polars as pl

    whole = lines.to_list()
    for i, v in zip(idx.to_list(), new):
        whole[i] = v
    gap = [False] * len(whole) if gaps is None else gaps.to_list()
    fed = [x for v, g in zip(whole, gap) for x in ([_GAP] if g else []) + ["" if v is None else v]]
    done, still_open = pem_lines(fed, pem_open)
    done = [d for d, f in zip(done, fed) if f is not _GAP]
    done = [None if w is None else d for w, d in zip(whole, done)]
    changed = sum(a != b for a, b in zip(lines.to_list(), done))
    if not changed:
        return Redacted(lines, 0, still_open)
    return Redacted(pl.Series(lines.name, done, dtype=pl.String), changed, still_open)


__all__ = [
    "HINT",
    "HINT_SIEVE",
    "MARK",
    "PEM_BEGIN",
    "RULES",
    "Redacted",
    "SECRET_KEYS",
    "SECRET_OPTIONS",
    "StreamRedactor",
    "mask",
    "pem_lines",
    "redact",
    "redact_data",
    "redact_lines",
    "redact_text",
    "redact_value",
    "secret_spans",
]
