"""parsers/benchresults.py: the real result files of bench_serving, vllm bench serve and AIPerf
(fixtures/benchresults/README.md says which version wrote each) -> exact bench rows."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics_parsers.benchresults import FORMATS, NotBenchResult, detect, parse

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "benchresults"
SHAPE = ("tool", "mode", "concurrency", "input_len", "output_len", "completed", "failed")


def rows(name: str) -> list[dict]:
    return parse((FIX / name).read_bytes(), source="s").bench.to_dicts()


def test_sglang_bench_serving_jsonl_one_row_per_line():
    got = rows("sglang_bench_serving.jsonl")
    assert [tuple(r[k] for k in SHAPE) for r in got] == [
        ("sglang.bench_serving", "single", 1, 256, 128, 6, None),
        ("sglang.bench_serving", "concurrency", 4, 512, 64, 8, None),
    ]
    one = got[0]
    assert one["bench_id"] == "s:0" and got[1]["bench_id"] == "s:1"
    assert round(one["output_tok_s"], 2) == 79.27
    assert round(one["ttft_s_p50"] * 1000, 2) == 27.68  # median_ttft_ms
    assert round(one["tpot_s_p50"] * 1000, 2) == 12.93
    assert one["ttft_s_p90"] is None  # 0.5.9 writes no p90 TTFT
    assert round(one["e2e_s_p90"], 4) == 1.7167
    assert round(one["accept_len_server"], 3) == 2.477
    assert one["accept_len_server_scope"] == "lifetime"
    assert one["started_at"] is None  # bench_serving writes no time
    assert one["url"] == "http://127.0.0.1:31801" and one["model"] == "sim://kimi-k2.5"
    assert one["server_version"] == "0.5.9" and one["rate"] is None
    server = json.loads(one["server"])
    assert (server["port"], server["tp_size"], server["speculative_num_steps"]) == (31801, 8, 4)


def test_sglang_output_details_gives_request_rows():
    res = parse((FIX / "sglang_bench_serving_details.jsonl").read_bytes(), source="s")
    (row,) = res.bench.to_dicts()
    assert tuple(row[k] for k in SHAPE) == ("sglang.bench_serving", "concurrency", 2, 128, 32, 4, 0)
    assert row["num_prompts"] == 4
    reqs = res.requests.to_dicts()
    assert [(r["index"], r["ok"], r["prompt_tokens"], r["output_tokens"]) for r in reqs] == [
        (i, True, 128, 32) for i in range(4)
    ]
    # e2e = TTFT + the chunk gaps (the file has no per-request latency): within 0.1 ms of
    # the latency bench_serving measured around each request
    mean_e2e = sum(r["e2e_s"] for r in reqs) / 4
    assert abs(mean_e2e - row["e2e_s_mean"]) < 1e-4


def test_vllm_save_result():
    (row,) = rows("vllm_bench_serve.json")
    assert tuple(row[k] for k in SHAPE) == ("vllm.bench_serve", "concurrency", 4, 256, 64, 16, 0)
    # `date` is written when the benchmark ends: it started `duration` earlier
    assert row["started_at"] == dt.datetime(2026, 12, 1, 10, 47, 56, 800000)
    assert row["accept_len_server"] == 2.5 and row["accept_len_server_scope"] == "window"
    assert row["e2e_s_p50"] == pytest.approx(0.783) and row["e2e_s_p90"] is None
    assert row["decode_tok_s_median"] == pytest.approx(1 / 0.0116)


def test_vllm_save_detailed_and_append_result():
    base = json.loads((FIX / "vllm_bench_serve.json").read_text())
    detailed = {
        **base,
        "input_lens": [256, 256],
        "output_lens": [64, 0],
        "ttfts": [0.04, 0.0],
        "itls": [[0.012] * 63, []],
        "latencies": [0.8, 0.0],
        "start_times": [1.0, 1.1],
        "errors": ["", "HTTP 500: boom"],
    }
    # --append-result: objects one per line
    data = (json.dumps(base) + "\n" + json.dumps(detailed)).encode()
    res = parse(data)
    assert res.bench["bench_id"].to_list() == ["0", "1"]
    reqs = res.requests.to_dicts()
    assert [(r["ok"], r["reason"], r["detail"], r["e2e_s"]) for r in reqs] == [
        (True, None, None, 0.8),
        (False, "error", "HTTP 500: boom", 0.0),
    ]
    assert reqs[0]["tpot_s"] == pytest.approx((0.8 - 0.04) / 63)


def test_aiperf_profile_export():
    c1, c4 = (
        rows("aiperf_c1/profile_export_aiperf.json"),
        rows("aiperf_c4/profile_export_aiperf.json"),
    )
    assert tuple(c1[0][k] for k in SHAPE) == ("aiperf", "single", 1, 256, 64, 8, 0)
    assert tuple(c4[0][k] for k in SHAPE) == ("aiperf", "concurrency", 4, 256, 64, 8, 0)
    row = c4[0]
    assert row["tool_version"] == "0.13.0" and row["api"] == "chat"
    assert row["started_at"] == dt.datetime(2026, 12, 1, 10, 47, 54, 428589)
    assert round(row["output_tok_s"], 2) == 243.92
    assert round(row["duration_s"], 3) == 2.089
    assert row["url"] == "http://127.0.0.1:31801" and row["output_tokens"] == 512


def test_every_format_is_detected_by_its_keys_only():
    assert [f.name for f in FORMATS] == ["sglang.bench_serving", "vllm.bench_serve", "aiperf"]
    for f in FORMATS:
        assert detect(dict.fromkeys(f.keys, 1)) is f
        assert detect(dict.fromkeys(f.keys[1:], 1)) in (None, *[g for g in FORMATS if g is not f])


@pytest.mark.parametrize(
    ("data", "cause"),
    [
        (b"", "empty file"),
        (b"\xff\xfe\x00garbage", "not UTF-8"),
        (b"{not json", "not JSON"),
        (b"[1, 2]", "a JSON list, not an object"),
        (b"[]", "a JSON list, not an object"),
        (b'{"model": "x", "tok_s": 3}', "keys (model, tok_s) match no known tool"),
        (b"a\nb\nc\n" + json.dumps({"completed": 1}).encode(), "not JSON lines"),
    ],
)
def test_bad_or_unknown_json_is_one_reason(data, cause):
    with pytest.raises(NotBenchResult) as exc:
        parse(data)
    assert cause in exc.value.cause
    assert "bench_serving" in exc.value.fix


def test_a_cut_last_line_keeps_the_complete_results():
    lines = (FIX / "sglang_bench_serving.jsonl").read_bytes().splitlines()
    res = parse(lines[0] + b"\n" + lines[1][:300])
    assert res.bench.height == 1
    assert res.warnings == ["line 2: not JSON (Unterminated string starting at), skipped"]


def test_wrong_types_read_as_null():
    rec = json.loads((FIX / "sglang_bench_serving.jsonl").read_text().splitlines()[0])
    rec.update(output_throughput="fast", max_concurrency=[1], completed=True, duration=None)
    (row,) = parse(json.dumps(rec).encode()).bench.to_dicts()
    assert (row["output_tok_s"], row["concurrency"], row["completed"], row["duration_s"]) == (
        None,
        None,
        None,
        None,
    )


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=400) | st.text(max_size=400).map(str.encode))
def test_any_bytes_give_rows_or_not_a_result(data):
    try:
        res = parse(data)
    except NotBenchResult as exc:
        assert exc.cause and exc.fix
    else:
        assert res.bench.height >= 1


# nested keys the formats read (server_info, input_config, error_summary), and any others
NESTED = ("port", "host", "tp_size", "internal_states", "phases", "kind", "concurrency", "rate",
          "endpoint", "urls", "type", "models", "items", "name", "datasets", "prompts", "isl",
          "osl", "mean", "count", "avg", "p50")  # fmt: skip
JSON = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(NESTED) | st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)
READ_BY_DERIVE = {
    "sglang.bench_serving": ("server_info", "dataset_name", "random_input_len",
                             "random_output_len", "sharegpt_output_len", "total_input_tokens",
                             "total_output_tokens", "completed"),
    "vllm.bench_serve": ("date", "num_prompts", "total_input_tokens", "total_output_tokens",
                         "completed"),
    "aiperf": ("input_config", "error_summary", "was_cancelled"),
}  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(FORMATS), st.data())
def test_any_values_under_a_formats_keys_give_a_row(fmt, data):
    """Whatever a tool (or a hand edit) put under the keys it reads, the row comes out."""
    keys = {k.split(".")[0] for _, k, _ in fmt.fields}
    keys |= set(fmt.details.values()) | set(fmt.keys) | set(READ_BY_DERIVE[fmt.name])
    rec = data.draw(st.fixed_dictionaries({k: JSON for k in sorted(keys)}))
    res = parse(json.dumps(rec).encode())
    assert res.bench.height == 1 and res.bench["tool"][0] == fmt.name
    # and it attaches (or not) without an error
    import polars as pl

    from forensics.bench_results import attach

    runs = pl.DataFrame({"run_id": ["a:0"], "name": ["a"], "port": [30000]})
    attach(runs, res.bench)
