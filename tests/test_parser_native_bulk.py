"""The compiled reader's access and warning lines (parsers/sglang/_linescan.c, native.py,
issue 15): a line it types is the row bulk.py gives it, and it types exactly the lines whose
first rule is a ``compiled`` one, that the secrets step leaves as they are. The literals it
rules the earlier rules out by (parsers/regex_literals.py) hold in every match of their
patterns.
"""

from __future__ import annotations

import re
from datetime import datetime

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from forensics_parsers.regex_literals import required
from forensics_parsers.secrets import HINT_SIEVE, PEM_BEGIN, redact
from forensics_parsers.sglang import native
from forensics_parsers.sglang.metrics import BATCH_HEAD
from forensics_parsers.sglang.rules import RULES, find_rule
from tests.conftest import require_compiled
from tests.test_parser_native import HEADS, ODD_HEADS, both

# pieces of messages near the two shapes, and text that earlier rules, the secrets step or a
# metrics head need (some of them a match, some only the literal)
EARLIER = [
    "Capture cuda graph failed: x",
    "Capture CUDA graph failed: ",
    "Capture cuda graph ",
    "Uvicorn running on http://x",
    "Shutting down",
    "Application startup complete",
    "Waiting for application shutdown",
    "ERROR: ",
    "[Errno 98] error while attempting to bind on address",
    "INFO: ",
    "WARNING: ",
    "deprecated",
    "Error: x",
]
SECRET = [
    "api_key=abc123def",
    "api key",
    "token: abc",
    "token:",
    "tokens",
    "token 123abc",
    "Bearer abcdefgh123",
    "-----BEGIN PRIVATE KEY-----",
    "PRIVATE KEY",
    "hf_ABCDEFGHIJ",
    "user:pw@host",
    "%41",
    "%zz",
    "curl -u a:b",
    "zip",
    "?sig=abc",
    "_",
    "=",
]
ODD = ["\t", "\x7f", "\u00e9", "\r", "\x1b[0m", "\ufffd", "\x00", "Decode batch, #token: 1"]
PLAIN = [" ", "  ", "x", "OK", "200", "GET", "/a", '"', "-", ".", "1.1", "a b", "Z"]
piece = st.sampled_from(EARLIER + SECRET + ODD + PLAIN * 4)


@st.composite
def message(draw) -> str:
    tail = "".join(draw(st.lists(piece, max_size=4)))
    if draw(st.integers(0, 2)) == 0:
        return "WARNING:" + draw(st.sampled_from(["", " ", "  ", "x"])) + tail
    # the shape's parts (the first of each) with at most one of them another
    parts = [
        [" ", "", "     ", "x"],
        ["127.0.0.1:5", "h", "", "a b", "\u00e9"],
        [' - "', " - ", ' -"'],
        ["POST", "GET", "", "get", "P0"],
        [" ", "  ", ""],
        ["/generate", "/v1/models?x=1", "", "/a b"],
        [" HTTP/", " HTTP", "HTTP/"],
        ["1.1", "2", "", "x"],
        ['" ', '"', " "],
        ["200", "20", "2000", "abc", "404 OK", "2x0"],
    ]
    odd = draw(st.integers(-3, len(parts) - 1))
    shape = [draw(st.sampled_from(p)) if i == odd else p[0] for i, p in enumerate(parts)]
    return "INFO:" + "".join(shape) + tail


SETTINGS = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])


ACCESS = 'INFO:     127.0.0.1:5 - "POST /generate HTTP/1.1" 200'


@SETTINGS
@given(message(), st.sampled_from(HEADS + ODD_HEADS[:4]), st.integers(0, 9))
@example(ACCESS[:-1], HEADS[0], 1)  # `\d{3}`
@example(ACCESS.replace("POST", "Post"), HEADS[0], 1)
@example(ACCESS + " Capture cuda graph failed: x", HEADS[0], 1)  # an earlier rule, floating
@example("WARNING: INFO: x", HEADS[0], 1)
@example(ACCESS + " ?api_key=abc123def", HEADS[0], 1)  # a secret
@example(ACCESS + " -----BEGIN PRIVATE KEY-----", HEADS[0], 1)
@example("WARNING:  Decode batch, #token: 1", HEADS[0], 1)  # a metrics line
def test_it_types_exactly_the_lines_of_a_compiled_rule(msg, head, s):
    """A line is typed iff its first rule is a ``compiled`` one (the table's own matcher),
    it is printable ASCII of SGLang's plain prefix, the secrets step leaves it and it holds
    no metrics head; its row is the prefix's parts and that rule."""
    require_compiled()
    line = head.format(s=s) + msg
    got = native.scan((line + "\n").encode(), 1)
    if got is None:  # (a NUL, a PEM key: the chunk is the polars path's whole)
        assert "\x00" in line or PEM_BEGIN in line
        return
    found = find_rule(msg)
    plain = line.isascii() and line.isprintable() and "\t" not in line
    head_ok = not re.search(r"\]\d| \] |XP|\.25|2[4-9]:|:6\d|-3\d|-1[3-9]", head.format(s=s))
    rule = found[0] if found is not None else None
    expect = (
        rule is not None
        and rule.compiled
        and plain
        and head_ok
        and redact(line) == line
        and PEM_BEGIN not in line
        and "Decode batch" not in line
    )
    if got.bulk.is_empty():
        assert not expect, line
        return
    assert expect, line
    row = got.bulk.row(0, named=True)
    prefix, _, rest = line.partition("] ")
    assert row == {
        "line": 1,
        "kind": rule.name,
        "ts": prefix[1:20],
        "rank": prefix[21:],
        "msg": rest,
        "dt": datetime.strptime(prefix[1:20], "%Y-%m-%d %H:%M:%S"),
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(message(), st.sampled_from(HEADS)), max_size=30))
def test_logs_of_such_lines_give_the_pure_paths_rows(lines):
    """The compiled reader's bulk rows, and the lines it hands back, give the rows of the pure
    path (with and without a traceback open before them), at every chunking."""
    require_compiled()
    text = [h.format(s=i % 10) + m for i, (m, h) in enumerate(lines)]
    tb = ["[2026-02-25 10:00:00 TP0] Scheduler hit an exception: Traceback:", "  File x"]
    for body in (text, tb + text, text + ["x" * 70_000] + text[:3]):
        data = ("\n".join(body) + "\n").encode()
        for cut in (97, 4096, 1 << 20):
            both(data, cut)


def test_the_shapes_are_the_rules_patterns():
    """The C readers' shapes are the patterns of the rules marked ``compiled``: a rule changed
    without its reader makes the reader type none of its lines, which this test sees."""
    require_compiled()
    assert native.bulk_tables() is not None
    data = (
        b'[2026-02-25 10:00:01] INFO:     127.0.0.1:5 - "POST /generate HTTP/1.1" 200 OK\n'
        b"[2026-02-25 10:00:01 TP1] WARNING: Request 1 exceeds the context length\n"
    )
    got = native.scan(data, 1)
    assert got is not None
    assert got.bulk["kind"].to_list() == [r.name for r in native.SHAPED]


def _spans(lit, text: str) -> list[tuple[int, int]]:
    """Where a literal occurs in a text (as the reader compares it)."""
    hay = text.lower() if lit.icase else text
    if lit.anchored:
        return [(0, len(lit.text))] if hay.startswith(lit.text) else []
    return [(m.start(), m.start() + len(lit.text)) for m in re.finditer(re.escape(lit.text), hay)]


def _holds(alts, text: str) -> bool:
    """What the reader checks: some alternative whose clauses all occur, each clause's last
    occurrence starting after the previous clause's first one ends."""
    for alt in alts:
        end_before, ok = -1, True
        for clause in alt:
            spans = [sp for lit in clause for sp in _spans(lit, text)]
            if not spans or max(s for s, _ in spans) < end_before:
                ok = False
                break
            end_before = min(e for _, e in spans)
        if ok:
            return True
    return False


PATTERNS = [r.pattern for r in RULES] + list(HINT_SIEVE) + [BATCH_HEAD]
_LITS = sorted({lit.text for p in PATTERNS for alt in required(p) or [] for c in alt for lit in c})
chunk = st.one_of(
    st.sampled_from(_LITS),
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=4),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(chunk, max_size=6), st.booleans())
def test_every_match_holds_the_literals_read_from_its_pattern(parts, upper):
    """Soundness of parsers/regex_literals.py over the patterns the reader is given: a text
    a pattern matches satisfies what ``required`` read from it."""
    text = "".join(parts)
    text = text.upper() if upper else text
    for pattern in PATTERNS:
        alts = required(pattern)
        if alts is not None and re.search(pattern, text):
            assert _holds(alts, text), (pattern, text)


def test_literals_of_a_pattern():
    """What ``required`` reads: runs of literals (a class, an alternation and a fixed repeat
    spelt out), anchors, case, and None where nothing is needed."""
    lit = lambda alts: [sorted((x.text, x.icase, x.anchored) for x in c) for a in alts for c in a]  # noqa: E731
    assert lit(required(r"^ab[cd]x{2}")) == [[("abcxx", False, True), ("abdxx", False, True)]]
    assert lit(required(r"(?i)Foo\d+bar")) == [[("foo", True, False)], [("bar", True, False)]]
    assert lit(required(r"a+b")) == [[("a", False, False)], [("b", False, False)]]
    assert lit(required(r"x|^yz")) == [[("x", False, False)], [("yz", False, True)]]
    assert required(r"\d+|foo") is None
    assert required(r"(?=abc)\w*") is None
