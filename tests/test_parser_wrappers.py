"""How a log is stored around SGLang's text: JSON lines, markdown quoting, lone-CR endings,
and transport prefixes found by SGLang's own line shapes (parsers/wrappers.py, prefixes.py).

Each case wraps a real fixture and expects exactly the frames of the unwrapped fixture."""

from __future__ import annotations

import json

import polars as pl
import pytest

from forensics_parsers.prefixes import PrefixFinder, locate, shape_of
from forensics_parsers.sglang import PREFIX_RX, Frames, LogParser, parse_bytes, stage_of
from forensics_parsers.wrappers import WRAPPERS, detect, lone_cr
from scripts.real_fields import require_corpus
from tests.rewrap import FIX, assert_frames_of_fixture, canon, fixture_lines, rewrap

CASES = ["sglang_fail_capture.log", "sglang_eagle3_cg_16dt.log", "edge_interleaved_ranks.log"]


def docker(line: str) -> str:
    return json.dumps({"log": line + "\n", "stream": "stderr", "time": "2026-03-02T09:00:00Z"})


WRAPS = {
    "docker-json-file": docker,
    "fluent-bit": lambda s: json.dumps(
        {"date": 1.7e9, "log": s + "\n", "kubernetes": {"pod": "p"}}
    ),
    "vector": lambda s: json.dumps({"message": s, "host": "h", "source_type": "docker_logs"}),
    "loki": lambda s: json.dumps({"line": s, "timestamp": "1740000000000000000"}),
    "msg": lambda s: json.dumps({"level": "info", "msg": s}),
    "markdown-quote": lambda s: "> " + s if s else ">",
    "markdown-indent": lambda s: "    " + s,
}


@pytest.mark.parametrize("wrap", sorted(WRAPS))
@pytest.mark.parametrize("name", CASES)
def test_wrapped_logs_give_the_frames_of_the_plain_log(name, wrap):
    assert_frames_of_fixture(name, rewrap(name, lambda i, s: WRAPS[wrap](s)))


def test_markdown_fences_are_blank_lines_around_the_log():
    lines = fixture_lines("sglang_fail_capture.log")
    f = parse_bytes(("```text\n" + "\n".join(lines) + "\n```\n").encode(), "x.log")
    plain = parse_bytes((FIX / "sglang_fail_capture.log").read_bytes(), "x.log")
    assert f.errors.drop("line", "last_line").equals(plain.errors.drop("line", "last_line"))
    assert f.counts["blank"] == plain.counts.get("blank", 0) + 2
    assert not [k for k in f.counts if k.startswith("unknown")]


def test_docker_split_lines_are_joined_again():
    # Docker's json-file driver cuts lines at 16 KiB: the pieces have no trailing newline
    line = "[2026-03-01 09:00:19] Decode batch, #running-req: 1, #token: 90, token usage: 0.00, cuda graph: True, gen throughput (token/s): 88.25, #queue-req: 0"
    recs = [
        docker("[2026-03-01 09:00:18] The server is fired up and ready to roll!"),
        json.dumps({"log": line[:40], "stream": "stdout"}),
        json.dumps({"log": line[40:] + "\n", "stream": "stdout"}),
    ]
    data = ("\n".join(recs) + "\n").encode()
    for cut in (len(data) // 2, len(data) - 3, len(data)):  # streamed in two chunks too
        p = LogParser("x.log")
        f = Frames.concat([p.feed(data[:cut]), p.feed(data[cut:]), p.finish()])
        assert f.decode["gen_throughput"].to_list() == [pytest.approx(88.25)]
        assert f.counts == {"ready": 1, "decode": 1}


def test_wrapper_detection_needs_most_lines_to_agree():
    assert detect(['{"log": "a\\n"}', '{"log": "b\\n"}'])[0] == "json-lines"
    assert detect(['{"log": "a\\n"}', "plain", "plain", "plain"])[0] is None
    assert detect(["> a", "> b", "c"])[0] == "markdown-quote"
    assert detect(["    a", "  b"])[0] is None
    assert detect(["[2026-01-01 00:00:00] ready"])[0] is None
    assert [w.name for w in WRAPPERS] == [
        "json-lines",
        "markdown-quote",
        "markdown-indent",
        "markdown-fence",
    ]


def test_lone_cr_line_endings_are_lines():
    lines = fixture_lines("sglang_fail_runtime_ima.log")
    data = "\r".join(lines).encode() + b"\r"
    assert lone_cr(data)
    f = parse_bytes(data, "x.log")
    assert_frames_of_fixture("sglang_fail_runtime_ima.log", "\n".join(lines) + "\n")
    assert f.stats["lines_total"] == len(lines)
    assert canon(f) == canon(parse_bytes((FIX / "sglang_fail_runtime_ima.log").read_bytes(), "x"))


def test_tqdm_bars_keep_their_cr_frames_inside_a_line():
    # far more \r than \n, but the pieces are bar frames: the lines still end with \n
    bar = "".join(
        f"\rCapturing batches (bs=48 avail_mem=1.00 GB): {k * 100 // 30:3d}%|#| {k}/30 [00:0{k % 9}<00:01, 9.1it/s]"
        for k in range(31)
    )
    data = (
        "[2026-01-01 00:00:00 TP0] Capture cuda graph begin. avail mem=3.00 GB\n"
        + bar
        + "\n[2026-01-01 00:00:09 TP0] Capture cuda graph end. Time elapsed: 9.00 s\n"
    ).encode()
    assert data.count(b"\r") > 2 * data.count(b"\n") and not lone_cr(data)
    f = parse_bytes(data, "x.log")
    assert f.counts == {"capture_edge": 2, "capture_progress": 1}
    assert f.stats["progress_frames_collapsed"] == 30
    details = f.events.filter(pl.col("stage") == "capture_progress")["detail"].to_list()
    assert details == ["bs=48 30/30"]
    assert (
        parse_bytes((FIX / "edge_ansi_tqdm.log").read_bytes(), "x").counts["capture_progress"] == 3
    )


def test_lone_cr_file_streamed_with_a_cr_at_a_chunk_end():
    lines = fixture_lines("sglang_two_launches.log")
    crlf_mix = ("\r".join(lines[:6]) + "\r\n" + "\r".join(lines[6:]) + "\r").encode()
    one = parse_bytes(crlf_mix, "x.log")
    cut = crlf_mix.index(b"\r\n") + 1  # between \r and \n
    p = LogParser("x.log")
    two = Frames.concat([p.feed(crlf_mix[:cut]), p.feed(crlf_mix[cut:]), p.finish()])
    assert canon(two) == canon(one)
    assert one.stats["lines_total"] == len(lines)


# -- transport prefixes ------------------------------------------------------------------
PREFIXED = {
    "kubectl": lambda i: f"2026-04-12T21:16:41.{762854908 + i * 977}Z ",
    "aggregator": lambda i: f"May 16, 2026 @ 20:44:{i % 60:02d}.{i % 1000:03d}    ",
    "compose": lambda i: "deepseek-v32-exp  | ",
    "torchrun": lambda i: "[rank3]: ",
    "journald": lambda i: f"Mar 02 09:00:{i % 60:02d} gpu8 sglang[4242]: ",
}


@pytest.mark.parametrize("kind", sorted(PREFIXED))
@pytest.mark.parametrize("name", [*CASES, "edge_pylogging_fork.log", "edge_time_only_2024.log"])
def test_prefixed_lines_give_the_frames_of_the_plain_log(name, kind):
    assert_frames_of_fixture(name, rewrap(name, lambda i, s: PREFIXED[kind](i) + s))


def test_real_kubectl_and_compose_tracebacks_keep_their_frames():
    shared_real_logs = require_corpus()
    f = parse_bytes((shared_real_logs / "051.log").read_bytes(), "051.log")
    tb = f.errors.filter(pl.col("kind") == "traceback").row(0, named=True)
    assert (tb["line"], tb["last_line"], tb["rank"]) == (1, 14, "TP0")
    assert not [k for k in f.counts if k.startswith("unknown")]
    f = parse_bytes((shared_real_logs / "030.log").read_bytes(), "030.log")
    tb = f.errors.filter(pl.col("kind") == "traceback").row(0, named=True)
    assert (tb["line"], tb["last_line"], tb["exc_type"]) == (1, 16, "Exception")
    assert tb["text"].splitlines()[1] == "    self.init_device_graphs()"  # indentation kept
    f = parse_bytes((shared_real_logs / "067.log").read_bytes(), "067.log")
    assert f.counts == {"uvicorn_access": 1, "decode": 3}
    assert str(f.decode["ts"][0]) == "2026-05-16 12:44:55"  # SGLang's time, not the collector's


def test_locate_finds_sglang_shapes_and_refuses_message_text():
    assert locate("2026-04-12T21:16:41.7Z [2026-04-12 21:16:41 TP0] x")[0] == 23
    assert locate("[rank0]: Traceback (most recent call last):") == (9, True)
    assert locate('x  |   File "a.py", line 3, in f') == (5, True)  # indentation stays
    assert locate('    File "a.py", line 3, in f') == (0, False)
    assert locate("raise ValueError: no") == (0, False)  # no digit, `|` or `]` before it
    assert locate("pod-7 RuntimeError: boom") == (6, True)
    assert locate("fooINFO:     127.0.0.1 - x") == (0, False)
    assert (
        shape_of("May 16, 2026 @ 20:44:54.728    ")
        == r"May\ \d+,\ \d+\ @\ \d+:\d+:\d+\.\d+\ \ \ \ "
    )


def test_a_shape_is_stripped_from_lines_without_an_anchor_once_seen_twice():
    pf = PrefixFinder()
    assert pf.strip("sglang-1  | [2026-01-01 00:00:00] a", PREFIX_RX) == "[2026-01-01 00:00:00] a"
    assert pf.strip("sglang-1  |     x = f()", PREFIX_RX) == "sglang-1  |     x = f()"
    pf.strip("sglang-1  | ValueError: x", PREFIX_RX)
    assert pf.strip("sglang-1  |     x = f()", PREFIX_RX) == "    x = f()"
    resumed = PrefixFinder(pf.state())
    assert resumed.strip("sglang-2  | pip output", PREFIX_RX) == "pip output"


def test_stage_of_sees_through_a_prefix():
    assert stage_of("2026-04-12T21:16:41.7Z [2026-04-12 21:16:41 TP0] Load weight begin.") == (
        "load_begin"
    )


@pytest.mark.parametrize("kind", ["docker-split", "kubectl", "lone-cr"])
def test_resuming_a_wrapped_log_from_its_state_equals_one_pass(kind):
    # what an ingest of a growing file does: state and offset after the complete lines
    lines = fixture_lines("sglang_two_launches.log")
    data = {
        "docker-split": "".join(
            json.dumps({"log": s[:30]}) + "\n" + json.dumps({"log": s[30:] + "\n"}) + "\n"
            for s in lines
        ),
        "kubectl": "".join(PREFIXED["kubectl"](i) + s + "\n" for i, s in enumerate(lines)),
        "lone-cr": "\r".join(lines) + "\r",
    }[kind].encode()
    whole = canon(parse_bytes(data, "x.log"))
    for cut in range(0, len(data), len(data) // 4):
        p1 = LogParser("x.log")
        first = p1.feed(data[:cut])
        state, offset = json.loads(json.dumps(p1.state())), cut - p1.pending_bytes
        p2 = LogParser("x.log", state=state)
        assert canon(Frames.concat([first, p2.feed(data[offset:]), p2.finish()])) == whole, cut
