"""The secrets rules' search (parsers/secret_search.py: a rule's literals first, the key rules
tried at the words that hold one) finds what searching every rule over the whole text finds:
the same matches, so the same redactions, spans and masks, on text that mixes the secrets
tests' own spellings, near misses, ordinary log lines and the letters that fold to ASCII."""

from __future__ import annotations

import ast
import re
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics_parsers import secret_search, secrets
from forensics_parsers.secret_search import Text, leading_literals, matches

TESTS = Path(__file__).parent


def _harvested() -> list[str]:
    """The strings of the secrets tests (their secrets, near misses, and prose)."""
    found: set[str] = set()
    for f in sorted(TESTS.glob("test_secrets_round*.py")) + [TESTS / "test_parser_secrets.py"]:
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if 3 <= len(node.value) <= 300:
                    found.add(node.value)
    return sorted(found)


KEYS = [
    # keys, in every case, quoted, after a path, with the letters that fold to ASCII ones
    "api_key", "API-KEY", "x-api-key", "apikey", "hf_token", "HF_TOKEN", "new_token",
    "hugging_face_hub_token", "password", "db_password_file", "passwd", "my_pwd", "secret",
    "client_secret", "passphrase", "Authorization", "proxy-authorization", "Cookie",
    "x-auth-token", "X-Session-Token", "access_key_id", "ssh_private_key", "token", "TOKEN",
    "apİ_key", "ApI_KEY", "ſecret", "paſſword", "coo\u212aie", "hf_to\u212aen", "aı_token",
    "'api_key'", '"token"', "\\'api_key\\'", '\\"token\\"', "/api_key", "/etc/passwd",
    "#token", "-token", "--api-key", "--hf-token", "--ssl-keyfile-password", "--token",
    "bos_token", "mask_token", "max_new_tokens", "ms_per_token", "tokens", "tokenizer", "tokenı",
    "api_org_abcdef12", "x", "",
]  # fmt: skip
SEPS = ["=", ": ", " ", "='", '": "', "=\\'", "\t", "==", ":", "%3D", "\\u003d", '", "']
VALUES = [
    "abcdef123456", "Vx7Kp9Qm2Rz", "'quoted v4l'", '"dq v4l"', "None", "True", "''", "12",
    "12.5", "-3e5", "$DB_PASS", "${X}", "<|MASK|>", "***", "not set", "is", "Bearer abc.def-123",
    "Basic dXNlcjpwdw==", "«redacted:0a1b2c3d»", "x", "",
]  # fmt: skip
PAIRS = [k + s + v for k in KEYS for s in SEPS for v in VALUES]
SPELLINGS = [
    # provider tokens and near misses
    "sk-abcdefghijklmnop1234", "sk-short", "hf_aBcDeFgHiJkLmNoP", "hf_transfer", "hf_Xy12ab",
    "api_org_abcdef12", "AKIAABCDEFGHIJKLMNOP", "AKIAshort", "ghp_" + "a" * 36, "glpat-" + "b" * 20,
    "xoxb-1234567890ab", "AIza" + "c" * 35, "eyJabcdefg.eyJhijklmn.opqrstuv",
    "-----BEGIN RSA PRIVATE KEY-----", "MIIEvQIBADANBg", "-----END RSA PRIVATE KEY-----",
    # addresses, queries, escapes, lists, other programs' options
    "https://bob:pw0rd@host/x", "bob:pw0rd@host", "user@host", "?api_key=q1&sig=s2", "&x=1", "&sig=abc", "&Token=abc12",
    "%3D", "%22", "\\u005f", "\\u00abredacted:", '["--api-key", "X"]', "['--hf-token', 'Y']",
    "mysql -pS3cret db", "mysql -p", "curl -u bob:pw http://h", "sshpass -p pw ssh h",
    "7z a -pPw x.7z", "docker login -p pw", "keytool -storepass pw", "mount.cifs -o x",
    "zip -P pw a.zip", "bcp -P pw", "redis-cli -a pw", "openssl enc -pass pass:pw",
]  # fmt: skip
LOG_LINES = [
    "[2026-03-01 09:00:15 TP0] Decode batch, #running-req: 1, #token: 90, token usage: 0.00, "
    "cuda graph: True, gen throughput (token/s): 88.25, #queue-req: 0",
    "[2026-03-01 09:00:15 TP0] Prefill batch, #new-seq: 1, #new-token: 8192, #cached-token: 0",
    "server_args=ServerArgs(model_path='/m', api_key=None, tokenizer_path='/m', tp_size=8)",
    'INFO:     127.0.0.1:50846 - "POST /generate HTTP/1.1" 200 OK',
    "Finish: obj=GenerateReqInput(text=['a', 'b'], sampling_params={'max_new_tokens': 8})",
]
FRAGMENTS = _harvested() + KEYS + VALUES + SPELLINGS + LOG_LINES
JOINS = ["", " ", "=", ": ", "/", "'", '"', "-", "_", ",", "\\", '\\"', "%22", "@", ":", "\t"]
NOISE = st.text(alphabet="aAkKtT_-=:'\"\\/%@ 1İıſ\u212a\u0307«»éx", max_size=12)

text = st.lists(
    st.one_of(st.sampled_from(PAIRS), st.sampled_from(FRAGMENTS), NOISE, st.sampled_from(JOINS)),
    min_size=1,
    max_size=14,
).map("".join)


@contextmanager
def whole_search():
    """The per-line behaviour before the literals and words: every rule over the whole text."""

    def every(rule: secret_search.Rule, t: Text) -> list[re.Match[str]]:
        return list(rule.rx.finditer(t.text))

    with (
        mock.patch.object(secret_search, "matches", every),
        mock.patch.object(secrets, "matches", every),
    ):
        yield


def _spans(found: list[re.Match[str]]) -> list[tuple[int, int]]:
    return [m.span() for m in found]


LIKE_A_LOG = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("dense", [secret_search.DENSE, 10**9])
def test_each_rule_finds_what_it_finds_searching_the_whole_text_on_every_spelling(dense):
    """(dense: also where literals close together would have the text searched whole)"""
    glued = [j + w + k for j in JOINS for w in SPELLINGS + KEYS for k in ("", "x", "-", " ")]
    with mock.patch.object(secret_search, "DENSE", dense):
        for s in FRAGMENTS + PAIRS + glued + [p + " " + q for p, q in zip(PAIRS, PAIRS[::-1])]:
            t = Text(s)
            for rule in secrets._rules():
                assert _spans(matches(rule, t)) == _spans(rule.rx.finditer(s)), (s, rule.rx.pattern)


@LIKE_A_LOG
@given(text, st.sampled_from([secret_search.DENSE, 10**9]))
def test_each_rule_finds_what_it_finds_searching_the_whole_text(s, dense):
    t = Text(s)
    with mock.patch.object(secret_search, "DENSE", dense):
        for rule in secrets._rules():
            assert _spans(matches(rule, t)) == _spans(rule.rx.finditer(s)), rule.rx.pattern[:60]


@LIKE_A_LOG
@given(text)
def test_redact_spans_and_mask_are_those_of_the_whole_search(s):
    got = (secrets.redact(s), secrets.secret_spans(s), secrets.mask(s.encode()))
    with whole_search():
        assert got == (
            secrets.redact(s),
            secrets.secret_spans(s),
            secrets.mask(s.encode()),
        )


@settings(max_examples=60, deadline=None)
@given(st.lists(text, min_size=1, max_size=20))
def test_redact_lines_is_that_of_the_whole_search(lines):
    series = pl.Series("text", lines, dtype=pl.String)
    got = secrets.redact_lines(series)
    with whole_search():
        want = secrets.redact_lines(series)
    assert (got.lines.to_list(), got.changed) == (want.lines.to_list(), want.changed)


def test_a_key_is_found_past_the_letters_that_fold_to_ascii_ones():
    for s in (
        "apİ_key=abcdef123456",
        "ſecret: abcdef123456",
        "coo\u212aie=abc",
        "\u0307api_key=abcdef12",
    ):
        assert secrets.redact(s) != s, s


def test_only_the_letters_folded_match_ascii_ones_ignoring_case():
    """``_FOLD`` holds every character that a pattern ignoring case takes for an ASCII letter
    and that ``lower`` does not make one (on this Python's Unicode tables)."""
    odd = {
        c
        for c in map(chr, range(0x80, 0x110000))
        if re.fullmatch("(?i)[a-z]", c) and not (c.lower().isascii() and len(c.lower()) == 1)
    }
    assert odd == {"\u0130", "\u0131", "\u017f"}


def test_the_leading_literals_of_a_programs_pattern():
    assert leading_literals(r"mysql\w*|mariadb\w*") == ("mysql", "mariadb")
    assert leading_literals(r"7z[ar]?|rar") == ("7z", "rar")
    assert leading_literals(r"(?:docker|helm)(?:\s+registry)?\s+login") == ("docker", "helm")
    assert leading_literals(r"abc?|x") == ("ab", "x")  # a letter that may be absent is not one
    assert leading_literals(r"\w+x|y") == ()  # an alternative without one: every text


def test_a_rule_is_compiled_only_for_a_text_that_holds_one_of_its_literals():
    """Compiling all 40 rules cost ~8 ms of an ingest's first chunk, where a server log's lines
    call for 4: a rule's pattern is compiled when a text first holds one of its literals."""
    rules = secret_search.compiled(secrets.RULES, secrets.STARTS)
    plain = Text("[2026-01-01 00:00:00] Decode batch, #running-req: 1, gen throughput: 2.5")
    assert all(matches(rule, plain) == [] for rule in rules)
    assert [rule for rule in rules if rule.regex.compiled] == []
    keyed = Text("api_key='sk-0123456789abcdef0123456789abcdef'")
    searched = [rule for rule in rules if matches(rule, keyed) is not None and rule.regex.compiled]
    assert searched and len(searched) < len(rules)
    assert all(any(w in keyed.low for w in rule.literals) for rule in searched)
