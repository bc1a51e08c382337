"""Property tests: whatever a collector puts around SGLang's lines (a prefix on every line:
random text, timestamps, container names; JSON-lines wrapping) changes no frame, field or
count of a fixture (parsers/prefixes.py, parsers/wrappers.py)."""

from __future__ import annotations

import json
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics_parsers.prefixes import ANCHOR_RX
from forensics_parsers.wrappers import JSON_KEYS
from tests.rewrap import FIX, assert_frames_of_fixture, fixture_text, rewrap

# edge_utf16.log is an encoding fixture of the log source (forensics/logsource.py), not text
NAMES = sorted(
    p.name for p in FIX.glob("*.log") if p.name not in ("binary.log", "empty.log", "edge_utf16.log")
)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


_PRINTABLE = string.ascii_letters + string.digits + "!#$%&'()*+,-./:;<=@[]^_`~|?"


def _plain_text(s: str) -> bool:
    """Random prefix text that is not itself SGLang text or another wrapper's marker."""
    return (
        not ANCHOR_RX.search(s + "x")
        and not s.startswith((">", "{", "```", "~~~"))
        and "batch" not in s
        and "File" not in s
    )


# a prefix is a function of the line number: constant text, or a timestamp that moves
random_text = (
    st.tuples(st.text(_PRINTABLE, min_size=1, max_size=24), st.sampled_from([" ", " | ", ": "]))
    .map("".join)
    .filter(_plain_text)
    .map(lambda t: lambda i: t)
)
container = st.tuples(
    st.from_regex(r"[a-z][a-z0-9-]{0,15}", fullmatch=True), st.integers(1, 12)
).map(lambda nw: lambda i: nw[0] + " " * nw[1] + "| ")
kubectl = st.integers(0, 10**6).map(
    lambda b: (
        lambda i: f"2026-04-12T21:{(b + i) // 60 % 60:02d}:{(b + i) % 60:02d}.{b * 7 + i:09d}Z "
    )
)
aggregator = st.integers(0, 10**6).map(
    lambda b: lambda i: f"May 16, 2026 @ 20:44:{(b + i) % 60:02d}.{(b + i) % 1000:03d}    "
)
journald = st.sampled_from(["gpu8", "node-1"]).map(
    lambda h: lambda i: f"Mar 02 09:00:{i % 60:02d} {h} sglang[4242]: "
)
torchrun = st.integers(0, 63).map(lambda r: lambda i: f"[rank{r}]: ")
prefixes = st.one_of(random_text, container, kubectl, aggregator, journald, torchrun)


@SETTINGS
@given(st.sampled_from(NAMES), prefixes)
def test_a_prefix_on_every_line_changes_no_frame(name, prefix):
    assert_frames_of_fixture(name, rewrap(name, lambda i, s: prefix(i) + s))


@SETTINGS
@given(
    st.sampled_from([n for n in NAMES if fixture_text(n).endswith("\n")]),
    st.sampled_from(JSON_KEYS),
    st.booleans(),
    st.dictionaries(st.sampled_from(["stream", "time", "host", "pod"]), st.text(max_size=8)),
    st.one_of(st.none(), prefixes),
)
def test_json_lines_wrapping_changes_no_frame(name, key, newline, extra, prefix):
    def record(i: int, s: str) -> str:
        s = (prefix(i) if prefix else "") + s
        return json.dumps({**extra, key: s + ("\n" if newline else "")})

    assert_frames_of_fixture(name, rewrap(name, record))


# pieces of every anchor's shape, glued at random: the anchors searched one by one
# (prefixes._first_anchor, what locate uses) find what the one alternation ANCHOR_RX finds
_PIECES = [
    "[2026-11-01 10:00:00",
    "[04:40:55",
    " TP3",
    "] ",
    "2026-06-07 10:59:31,659 ",
    "[INFO] ",
    "name.mod: ",
    "INFO ",
    "WARNING ",
    "03-06 10:05:08 ",
    "__init__.py:190] ",
    "server_args.py:12: ",
    "sglang.srt.x: ",
    "INFO:     ",
    "Traceback (most recent call last):",
    'File "/a/b.py", line 3, in ',
    "RuntimeError: ",
    "torch.cuda.OutOfMemoryError: ",
    "x.KeyboardInterrupt: ",
    "SystemExit: ",
    "BusFault: ",
    "MyException: ",
    "node:12:34 [2] NCCL INFO ",
    "| ",
    "  ",
    "x",
    ".",
    ":",
    "1234 ",
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=8), st.text(_PRINTABLE, max_size=6))
def test_anchors_one_by_one_find_what_the_alternation_finds(pieces: list[str], tail: str) -> None:
    from forensics_parsers.prefixes import _first_anchor

    line = "".join(pieces) + tail
    m = ANCHOR_RX.search(line)
    want = None if m is None else (m.start(), int(m.lastgroup[1:]))
    assert _first_anchor(line) == want, line
