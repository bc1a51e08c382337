"""forensics bench against the fault server (bad-inputs.md §2.3, H01-H10) and its pure parts."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics import bench
from forensics.bench import BenchConfig, SSEParser, run_bench
from forensics.cli import cli
from forensics.errors import ForensicsError, ParseError, UsageError
from forensics.runs import latest_bench
from forensics.store import Store
from tests.plugins.faultserver import (
    CHUNKS,
    H04_VARIANTS,
    OK_TOKENS,
    TOKENS_PER_CHUNK,
    chat_events,
    free_port,
    native_events,
    variant_bytes,
)

ROOT = Path(__file__).resolve().parent.parent


def cfg(url: str, **kw) -> BenchConfig:
    kw.setdefault("num_prompts", 3)
    kw.setdefault("warmup", 0)
    return BenchConfig(url=url, **kw)


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def invoke(*args: str) -> Result:
    """The CLI in-process, with forensics.cli.main's error contract (Error: line + exit code)."""
    res = CliRunner().invoke(cli, list(args))
    exc = res.exception
    if isinstance(exc, ForensicsError):
        return Result(exc.exit_code, res.stdout, res.stderr + f"Error: {exc}\n")
    if exc is not None and not isinstance(exc, SystemExit):
        raise exc
    return Result(res.exit_code, res.stdout, res.stderr)


# --------------------------------------------------------------------------------------
# The SSE parser (H04) on its own
# --------------------------------------------------------------------------------------
def _events(writes: list[bytes]) -> list[str]:
    p = SSEParser()
    out = [e.data for w in writes for e in p.feed(w)]
    return out + [e.data for e in p.close()]


@pytest.mark.parametrize("variant", H04_VARIANTS)
def test_h04_sse_variants_give_the_same_events(variant):
    events = native_events()
    got = _events(variant_bytes(variant, events))
    assert got[-1] == "[DONE]"
    # multi-line data is joined with "\n", which JSON reads as whitespace
    assert [json.loads(d) for d in got[:-1]] == events


@settings(max_examples=60, deadline=None)
@given(
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
    variant=st.sampled_from(H04_VARIANTS),
)
def test_h04_any_split_of_the_stream_gives_the_same_events(cuts, variant):
    """A JSON object (or a CRLF, or the BOM) split across TCP reads changes nothing."""
    raw = b"".join(variant_bytes(variant, chat_events()))
    points = sorted({c % (len(raw) + 1) for c in cuts})
    pieces = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)])]
    assert _events(pieces) == _events([raw])


def test_sse_comment_only_and_empty_data_dispatch_nothing():
    assert _events([b": ping\n\n: again\r\n\r\n"]) == []


def test_sse_invalid_utf8_is_an_error():
    p = SSEParser()
    with pytest.raises(bench.SSEError):
        p.feed(b"data: \xff\xfe\n\n")


# --------------------------------------------------------------------------------------
# Requests against the fault server
# --------------------------------------------------------------------------------------
def test_tokens_come_from_completion_tokens_not_chunks(faultserver):
    url = faultserver.fresh("ok")
    rep = run_bench(cfg(url))
    s = rep.summary
    assert s["completed"] == 3 and s["failed"] == 0
    assert s["output_tokens"] == 3 * OK_TOKENS  # 4 chunks of 2 tokens each
    assert all(r.chunks == CHUNKS + 1 for r in rep.results)  # + [DONE]
    assert s["accept_len_client"] == pytest.approx(OK_TOKENS / CHUNKS)  # tokens / spec_verify_ct
    assert rep.accept_len_server == 2.5 and rep.accept_len_server_scope == "window"
    assert rep.flush == "ok"
    # the first chunk carried 2 tokens at TTFT; each later gap is spread over its 2 tokens
    assert all(len(r.itls) == OK_TOKENS - TOKENS_PER_CHUNK for r in rep.results)


def test_native_payload_and_flush_before_measuring(faultserver):
    url = faultserver.fresh("ok")
    tag = url.rsplit("/", 1)[1]
    n0 = len(faultserver.bodies)
    run_bench(cfg(url, warmup=2, max_new_tokens=17, temperature=0.5, ignore_eos=False))
    bodies = faultserver.bodies[n0:]
    assert len(bodies) == 5  # 2 warmup + 3 measured
    sp = bodies[-1]["sampling_params"]
    assert sp == {"max_new_tokens": 17, "temperature": 0.5, "ignore_eos": False}
    assert bodies[-1]["stream"] is True and isinstance(bodies[-1]["text"], str)
    assert faultserver.counts[tag] == 5


def test_openai_and_native_agree_on_tokens(faultserver):
    native = run_bench(cfg(faultserver.fresh("ok")))
    chat = run_bench(cfg(faultserver.fresh("ok"), api="openai"))
    comp = run_bench(cfg(faultserver.fresh("ok"), api="openai-completions"))
    assert native.summary["output_tokens"] == chat.summary["output_tokens"] == OK_TOKENS * 3
    assert comp.summary["completed"] == 3
    body = faultserver.bodies[-1]
    assert body["stream_options"] == {"include_usage": True} and body["model"] == "fault-model"


def test_h01_http_errors_counted_per_status_with_bodies(faultserver):
    rep = run_bench(cfg(faultserver.fresh("h01_mixed"), num_prompts=6))
    s = rep.summary
    assert (s["completed"], s["failed"]) == (3, 3)
    assert s["failures"]["reasons"] == {"http_error": 3}
    assert s["failures"]["http_status"] == {"429": 3}
    bodies = s["failures"]["bodies"]["429"]
    assert len(bodies) == 3 and bodies[0].startswith("boom #")


def test_h02_connection_refused_ends_the_run_and_reports_death():
    url = f"http://127.0.0.1:{free_port()}"
    rep = run_bench(cfg(url, num_prompts=50, dead_after=3))
    assert rep.server_dead
    assert "connection refused" in rep.death
    assert rep.summary["completed"] == 0
    assert 3 <= rep.summary["failed"] < 50
    assert set(rep.summary["failures"]["reasons"]) == {"conn_error"}


def test_h02_server_dies_mid_run_partial_results_stored(faultserver_factory, tmp_path):
    srv = faultserver_factory(die_after=4)
    store = tmp_path / "store"
    res = invoke("--store", str(store), "bench", srv.url("ok"), "--num-prompts", "40", "--json")
    assert res.exit_code == 4, res.output
    out = json.loads(res.stdout)
    assert out["server_dead"] is True and out["completed"] == 3  # 1 warmup + 3 measured
    assert "stopped answering" in res.stderr
    df = Store.open(store).table("bench")
    assert df["server_dead"].to_list() == [True] and df["completed"].to_list() == [3]
    reqs = Store.open(store).table("bench_requests")
    assert reqs.filter(pl.col("ok")).height == 3


def test_h03_dropped_stream_is_truncated_not_success(faultserver):
    rep = run_bench(cfg(faultserver.fresh("h03_drop"), num_prompts=2))
    assert rep.summary["completed"] == 0
    assert rep.summary["failures"]["reasons"] == {"truncated": 2}
    # the tokens seen before the cut are recorded on the request
    assert all(r.output_tokens == 3 * 2 for r in rep.results)


def test_h04_bad_json_event_is_a_protocol_error(faultserver):
    rep = run_bench(cfg(faultserver.fresh("h04_bad_json"), num_prompts=2))
    assert rep.summary["failures"]["reasons"] == {"protocol_error": 2}
    assert "not JSON" in rep.summary["failures"]["first_detail"]["protocol_error"]


@pytest.mark.parametrize("variant", ["crlf", "split", "bom", "noterm"])
def test_h04_unusual_sse_over_real_http(faultserver, variant):
    rep = run_bench(cfg(faultserver.fresh(f"h04_{variant}"), num_prompts=2))
    assert rep.summary["completed"] == 2 and rep.summary["output_tokens"] == 2 * OK_TOKENS


def test_h05_ttft_and_idle_deadlines(faultserver):
    # the server stalls 30 s each; the client's own deadlines end the requests (by reason)
    ttft = run_bench(cfg(faultserver.fresh("h05_ttft"), num_prompts=1, ttft_timeout=0.3))
    stall = run_bench(cfg(faultserver.fresh("h05_stall"), num_prompts=1, idle_timeout=0.3))
    assert ttft.summary["failures"]["reasons"] == {"timeout": 1}
    assert "ttft-timeout" in ttft.summary["failures"]["first_detail"]["timeout"]
    assert "idle-timeout" in stall.summary["failures"]["first_detail"]["timeout"]


def test_overall_deadline_cancels_and_marks(faultserver):
    rep = run_bench(cfg(faultserver.fresh("slow"), num_prompts=50, deadline=0.6))
    assert rep.deadline_hit
    assert rep.summary["completed"] < 50
    assert any(r.reason == "timeout" and "deadline" in (r.detail or "") for r in rep.results)


def test_h07_empty_output_is_a_failure(faultserver):
    rep = run_bench(cfg(faultserver.fresh("h07_empty"), num_prompts=2))
    assert rep.summary["failures"]["reasons"] == {"empty_output": 2}
    assert rep.summary["output_tok_s"] is None


def test_h08_missing_usage_is_estimated_and_flagged(faultserver):
    rep = run_bench(cfg(faultserver.fresh("h08_nousage"), api="openai", num_prompts=2))
    assert rep.summary["completed"] == 2
    assert rep.summary["tokens_estimated"] == 2
    assert all(r.tokens_estimated and r.output_tokens == CHUNKS for r in rep.results)


def test_concurrency_mode_completes_all(faultserver):
    rep = run_bench(cfg(faultserver.fresh("ok"), concurrency=8, num_prompts=40))
    assert rep.config.mode == "concurrency"
    assert rep.summary["completed"] == 40
    assert sorted(r.index for r in rep.results) == list(range(40))


def test_rate_mode_poisson_arrivals(faultserver):
    rep = run_bench(cfg(faultserver.fresh("ok"), num_prompts=None, rate=40, duration=0.5))
    assert rep.config.mode == "rate"
    assert rep.summary["failed"] == 0
    assert 3 <= rep.summary["completed"] <= 80  # ~20 expected; loose, not a timing test
    starts = [r.start_s for r in rep.results]
    assert starts == sorted(starts)
    # no arrival past the 0.5 s window: each wait lasts at least its gap, so the requests sent
    # are at most the seeded arrivals whose gaps sum under 0.5 s (an exact bound; a bound on
    # start_s measured the machine: 0.67 s was seen at load 19)
    rng, t, arrivals = random.Random(rep.config.seed), 0.0, 0
    while (t := t + rng.expovariate(40)) < 0.5:
        arrivals += 1
    assert len(rep.results) <= arrivals


# --------------------------------------------------------------------------------------
# Prompts and configuration
# --------------------------------------------------------------------------------------
def test_prompt_sources(tmp_path):
    jl = tmp_path / "p.jsonl"
    jl.write_text('{"prompt": "a b c"}\n\n{"text": "d e"}\n', encoding="utf-8")
    assert [p.text for p in bench.load_dataset(jl)] == ["a b c", "d e"]
    sg = tmp_path / "sg.json"
    sg.write_text(
        json.dumps(
            [{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "x"}]}]
        )
    )
    assert [p.text for p in bench.load_dataset(sg)] == ["hi"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{oops\n')
    with pytest.raises(ParseError, match=r"bad.jsonl:2"):
        bench.load_dataset(bad)
    ids = bench.random_prompts(32, 3, seed=1, ids=True)
    assert all(len(p.input_ids) == 32 for p in ids)
    assert len({len(p.text.split()) for p in bench.builtin_prompts()}) == 1  # fixed length


def test_random_input_ids_sent_to_native(faultserver):
    run_bench(cfg(faultserver.fresh("ok"), num_prompts=1, random_input_len=16))
    assert len(faultserver.bodies[-1]["input_ids"]) == 16


@pytest.mark.parametrize(
    "kw",
    [
        {"api": "grpc"},
        {"concurrency": 0},
        {"rate": 2.0, "num_prompts": None},
        {"duration": 3.0},
        {"url": "ftp://x"},
    ],
)
def test_bad_configs_are_usage_errors(kw):
    kw = {"url": "http://127.0.0.1:1", **kw}
    with pytest.raises(UsageError):
        BenchConfig(**kw).validate()


def test_server_accept_length_by_version():
    assert bench.server_accept_length({"avg_spec_accept_length": 3.1}) == 3.1  # 0.4.4-0.4.6
    assert bench.server_accept_length({"internal_states": [{"avg_spec_accept_length": 2.2}]}) == 2.2
    assert bench.server_accept_length({"decode": [{"avg_spec_accept_length": 1.7}]}) == 1.7
    assert bench.server_accept_length({"internal_states": [{}]}) is None


def test_resolve_target():
    assert bench.resolve_target("http://h:1/") == "http://h:1"
    assert bench.resolve_target("gpu9", 31000) == "http://gpu9:31000"
    assert bench.resolve_target("gpu9:8000") == "http://gpu9:8000"
    assert bench.resolve_target("gpu9") == "http://gpu9:30000"


def test_configured_host_name_resolves(tmp_path):
    (tmp_path / "forensics.toml").write_text('[hosts.gpu8]\naddress = "root@10.1.2.3"\n')
    assert bench.resolve_target("gpu8", 30001) == "http://10.1.2.3:30001"


# --------------------------------------------------------------------------------------
# CLI, storage, runs, baseline
# --------------------------------------------------------------------------------------
def _ingest_run(store: Path, tmp_path: Path, port: int, name: str) -> None:
    log = tmp_path / f"{name}.log"
    log.write_text(
        "[2025-04-28 10:00:00] server_args=ServerArgs(model_path='m', host='127.0.0.1', "
        f"port={port}, tp_size=1, speculative_algorithm='EAGLE3', speculative_num_steps=3, "
        "speculative_eagle_topk=4, speculative_num_draft_tokens=5)\n"
        "[2025-04-28 10:00:05] The server is fired up and ready to roll!\n"
        "[2025-04-28 10:00:10 TP0] Decode batch. #running-req: 1, #token: 100, token usage: "
        "0.00, accept len: 2.50, cuda graph: True, gen throughput (token/s): 82.30, #queue-req: 0, \n"
    )
    res = invoke("--store", str(store), "ingest", str(log))
    assert res.exit_code == 0, res.output


def test_cli_stores_and_attaches_to_the_run_on_that_port(faultserver, tmp_path):
    store = tmp_path / "store"
    _ingest_run(store, tmp_path, faultserver.port, "sglang_eagle3_cg_5dt")
    _ingest_run(store, tmp_path, faultserver.port + 1, "other_port")
    res = invoke("--store", str(store), "bench", faultserver.fresh("ok"), "--num-prompts", "4")
    assert res.exit_code == 0, res.output
    assert "tok/s" in res.stdout and "4 completed, 0 failed" in res.stdout
    s = Store.open(store)
    row = s.table("bench").row(0, named=True)
    from forensics.runs import runs_table

    rt = runs_table(s)
    want = rt.filter(pl.col("name") == "sglang_eagle3_cg_5dt")["run_id"][0]
    assert row["run_id"] == want
    assert row["completed"] == 4 and row["interrupted"] is False
    assert s.table("bench_requests").height == 4
    latest = latest_bench(s)
    # the figures, then the benchmark's shape (its experiment: forensics.experiment)
    assert latest.columns[:4] == ["run_id", "bench_tok_s", "bench_accept_len", "bench_at"]
    assert latest["bench_streams"].to_list() == [1]
    assert latest["bench_accept_len"].to_list() == [pytest.approx(2.0)]
    assert rt.filter(pl.col("run_id") == want)["bench_tok_s"][0] == pytest.approx(
        row["output_tok_s"]
    )


def test_cli_explicit_run_and_baseline_ratio(faultserver, tmp_path):
    store = tmp_path / "store"
    _ingest_run(store, tmp_path, 39999, "sglang_baseline_nospec")
    res = invoke(
        "--store", str(store), "bench", faultserver.fresh("ok"), "--run", "baseline_nospec"
    )
    assert res.exit_code == 0, res.output
    res = invoke("--store", str(store), "baseline", "sglang_baseline_nospec")
    assert res.exit_code == 0 and "Baseline:" in res.stdout
    res = invoke("--store", str(store), "baseline", "--tok-s", "100", "--json")
    assert json.loads(res.stdout)["tok_s"] == 100.0
    res = invoke("--store", str(store), "bench", faultserver.fresh("ok"), "--json", "--no-flush")
    out = json.loads(res.stdout)
    assert out["flush_cache"] == "skipped"
    assert out["vs_baseline"] == pytest.approx(out["output_tok_s"] / 100.0)
    res = invoke("--store", str(store), "bench", faultserver.fresh("ok"))
    assert re.search(r"^[\d.]+ tok/s, [\d.]+× baseline", res.stdout)


def test_cli_baseline_refuses_a_run_benchmarked_with_many_requests_in_flight(faultserver, tmp_path):
    """A baseline is what one person sees: a concurrency-8 figure would make every
    speculative configuration look hopeless."""
    store = tmp_path / "store"
    _ingest_run(store, tmp_path, 39998, "sglang_baseline_batched")
    url = faultserver.fresh("ok")
    args = ("--store", str(store), "bench", url, "--run", "baseline_batched")
    res = invoke(*args, "--concurrency", "4", "--num-prompts", "4")
    assert res.exit_code == 0, res.output
    res = invoke("--store", str(store), "baseline", "sglang_baseline_batched")
    assert res.exit_code == 2
    assert "4 requests in flight" in res.stderr and "single stream" in res.stderr
    assert invoke(*args).exit_code == 0  # single stream: now it may be the baseline
    res = invoke("--store", str(store), "baseline", "sglang_baseline_batched")
    assert res.exit_code == 0 and "Baseline:" in res.stdout


def test_cli_run_not_found_and_baseline_without_bench(faultserver, tmp_path):
    store = tmp_path / "store"
    _ingest_run(store, tmp_path, 39998, "sglang_x")
    res = invoke("--store", str(store), "bench", faultserver.fresh("ok"), "--run", "nope")
    assert res.exit_code == 3 and "sglang_x" in res.stderr
    # issue 13: `baseline RUN` takes the figure advise uses for it (here its single-stream
    # decode lines; it refused a run without a benchmark)
    res = invoke("--store", str(store), "baseline", "sglang_x")
    assert res.exit_code == 0 and "Baseline: 82.3 tok/s (run sglang_x)" in res.stdout


def test_cli_failure_rate_exit_4_with_reasons(faultserver, tmp_path):
    res = invoke("bench", faultserver.fresh("h01_500"), "--num-prompts", "2")
    assert res.exit_code == 4
    assert "HTTP 500" in res.stdout and "http_error 2" in res.stderr


def test_cli_json_is_one_object(faultserver):
    res = invoke("bench", faultserver.fresh("ok"), "--json", "--num-prompts", "2", "--no-store")
    out = json.loads(res.stdout)
    assert out["completed"] == 2 and out["stored"] is False
    for key in ("ttft_s_p50", "itl_s_p99", "tpot_s_mean", "e2e_s_p90", "req_tok_s_p10"):
        assert key in out


def _interrupted_bench(store, url, extra, started, settle: float = 0.0):
    """A real `forensics bench` process (100 prompts, 2 streams), SIGINT once ``started()``
    holds (or after 30 s); returns (process, stderr)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "forensics", "--store", str(store), "bench", url]
        + ["--num-prompts", "100", "--concurrency", "2", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while not started() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(settle)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc, err


def test_h10_sigint_saves_partial_results_exit_130(faultserver, tmp_path):
    store = tmp_path / "store"
    url = faultserver.fresh("slow")
    tag = url.rsplit("/", 1)[1]
    proc, err = _interrupted_bench(
        store, url, [], lambda: faultserver.counts.get(tag, 0) >= 6, settle=0.3
    )
    assert proc.returncode == 130, err
    assert "Interrupted" in err and "Traceback" not in err
    row = Store.open(store).table("bench").row(0, named=True)
    assert row["interrupted"] is True
    assert 1 <= row["completed"] < 100
    reqs = Store.open(store).table("bench_requests")
    assert reqs.filter(pl.col("reason") == "cancelled").height >= 1


# --------------------------------------------------------------------------------------
# /health sampled during the benchmark (H06)
# --------------------------------------------------------------------------------------
def _tag(url: str) -> str:
    return url.rsplit("/", 1)[1]


def test_h06_health_summary_counts_and_longest_stretch():
    S = bench.HealthSample
    samples = [
        S(0.0, 200, 1.0),
        S(1.0, 503, 2.0),
        S(2.0, None, 500.0, "timeout"),
        S(3.0, 200, 3.0),
        S(4.0, None, 0.5, "conn_error"),
    ]
    h = bench.health_summary(samples, 1.0, 0.5)
    assert h == {
        "every_s": 1.0,
        "probe_timeout_s": 0.5,
        "count": 5,
        "non_200": 3,
        "timeouts": 1,
        "errors": 1,
        "latency_ms_p50": 2.0,  # of the answered probes only
        "latency_ms_max": 3.0,
        "longest_non_200_s": 2.0,  # 503 at 1.0 until the 200 at 3.0 (the tail lasts 0.0005)
    }
    assert bench.health_breakdown(samples) == {"200": 2, "503": 1, "timeout": 1, "conn_error": 1}
    assert bench.health_summary([], 2.0, 5.0)["longest_non_200_s"] is None
    assert bench.health_summary(samples[:1], 2.0, 5.0)["longest_non_200_s"] == 0.0


def test_h06_flapping_health_is_recorded_while_the_bench_succeeds(faultserver):
    url = faultserver.fresh("h06_flap")
    rep = run_bench(cfg(url, num_prompts=2, health_every=0.1))
    assert (rep.summary["completed"], rep.summary["failed"]) == (2, 0)
    h = rep.health
    assert h["count"] == len(rep.health_samples) >= 2
    assert h["non_200"] > 0 and h["longest_non_200_s"] > 0
    assert h["timeouts"] == 0 and h["errors"] == 0
    statuses = [s.status for s in rep.health_samples]
    assert statuses[:2] == [503, 200]  # the server alternates, starting with 503
    assert set(statuses) == {200, 503}
    assert faultserver.health_counts[_tag(url)] >= h["count"]  # every sample hit the server
    offsets = [s.t_s for s in rep.health_samples]
    assert offsets == sorted(offsets) and offsets[0] < 0.1


def test_h06_slow_health_records_timeouts_and_the_bench_ends_on_time(faultserver):
    """/health answers after 1 s; probes give up at 0.3 s. A /health that hangs 30 s with a
    20 s probe deadline must not hold the end of the benchmark: the probe is cancelled."""
    rep = run_bench(cfg(faultserver.fresh("h06_slowhealth"), num_prompts=2, health_timeout=0.3))
    assert rep.summary["completed"] == 2
    assert rep.health["timeouts"] == rep.health["count"] == rep.health["non_200"] >= 1
    assert all(s.status is None and s.error == "timeout" for s in rep.health_samples)
    assert all(s.latency_ms >= 250 for s in rep.health_samples)
    assert rep.health["latency_ms_p50"] is None  # no probe got an answer

    rep = run_bench(
        cfg(faultserver.fresh("h06_hanghealth"), num_prompts=2, health_every=0.1, health_timeout=20)
    )
    assert rep.summary["completed"] == 2
    # the probe still pending at the end was cancelled, not awaited: awaiting it would have
    # recorded it (as a timeout after 20 s)
    assert rep.health["count"] == 0


def test_h06_cli_flapping_health_warns_and_stores_the_samples(faultserver, tmp_path):
    store = tmp_path / "store"
    url = faultserver.fresh("h06_flap")
    res = invoke(
        "--store", str(store), "bench", url, "--num-prompts", "2", "--warmup", "0",
        "--health-every", "0.1",
    )  # fmt: skip
    assert res.exit_code == 0, res.output  # a flapping /health does not fail the benchmark
    line = next(x for x in res.stdout.splitlines() if x.strip().startswith("/health samples"))
    assert re.search(r"\d+ every 0.1s, [1-9]\d* not 200, p50 [\d.]+ / max [\d.]+ ms$", line)
    warning = [x for x in res.stderr.splitlines() if x.startswith("Warning:")]
    assert len(warning) == 1 and "/health was not 200" in warning[0] and "503 ×" in warning[0]
    s = Store.open(store)
    row = s.table("bench").row(0, named=True)
    samples = s.table("bench_health")
    assert row["health_count"] == samples.height >= 2
    assert row["health_non_200"] == samples.filter(pl.col("status") == 503).height > 0
    assert row["health_every_s"] == 0.1 and row["health_longest_non_200_s"] > 0
    assert samples["bench_id"].unique().to_list() == [row["bench_id"]]
    assert samples.columns == ["bench_id", "t_s", "status", "latency_ms", "error"]


def test_h06_health_every_0_samples_nothing(faultserver):
    url = faultserver.fresh("h06_flap")
    res = invoke(
        "bench", url, "--json", "--no-store", "--num-prompts", "1", "--warmup", "0",
        "--health-every", "0",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    h = json.loads(res.stdout)["health"]
    assert h["every_s"] == 0 and h["count"] == 0 and h["samples"] == []
    assert faultserver.health_counts.get(_tag(url), 0) == 0
    res = invoke(
        "bench", url, "--no-store", "--num-prompts", "1", "--warmup", "0", "--health-every", "0"
    )
    assert "not sampled (--health-every 0)" in res.stdout and "Warning" not in res.stderr


def test_h06_json_has_the_summary_and_the_samples(faultserver):
    res = invoke(
        "bench", faultserver.fresh("h06_flap"), "--json", "--no-store", "--num-prompts", "2",
        "--warmup", "0", "--health-every", "0.1",
    )  # fmt: skip
    h = json.loads(res.stdout)["health"]
    assert set(h) == set(bench.HEALTH_FIELDS) | {"samples"}
    assert h["count"] == len(h["samples"]) >= 2 and h["non_200"] > 0
    assert set(h["samples"][0]) == {"t_s", "status", "latency_ms", "error"}
    assert h["probe_timeout_s"] == bench.HEALTH_TIMEOUT >= 5  # the CLI keeps H06's >= 5 s


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "0.05"])
def test_h06_bad_health_every_is_a_one_line_usage_error(faultserver, value):
    url = faultserver.fresh("ok")
    res = invoke("bench", url, "--no-store", "--health-every", value)
    assert res.exit_code == 2
    errors = [x for x in res.stderr.splitlines() if x.startswith("Error:")]
    assert len(errors) == 1 and f"--health-every {value}" in errors[0]
    assert faultserver.counts.get(_tag(url), 0) == 0  # refused before any request
    with pytest.raises(UsageError, match="probe timeout"):
        BenchConfig(url="http://127.0.0.1:1", health_timeout=0).validate()


def test_h06_store_written_before_health_sampling_still_reads(faultserver, tmp_path):
    """A `bench` part without the health_* columns and no `bench_health` table (what the
    store held before H06 sampling) reads as before, next to a new benchmark's row."""
    store = Store.open(tmp_path / "store")
    old = run_bench(cfg(faultserver.fresh("ok"), num_prompts=2, health_every=0))
    old.run_id = "old-source:0"
    old_bench, old_reqs = bench.bench_frames(old)
    old_bench = old_bench.select(pl.exclude("^health_.*$"))
    assert not any(c.startswith("health") for c in old_bench.columns)
    with store.transaction() as tx:
        tx.append("bench", old_bench)
        tx.append("bench_requests", old_reqs)
    assert store.table("bench").height == 1 and store.table("bench_health").is_empty()

    res = invoke(
        "--store", str(store.root), "bench", faultserver.fresh("h06_flap"),
        "--num-prompts", "2", "--warmup", "0", "--health-every", "0.1",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    df = Store.open(store.root).table("bench").sort("started_at")
    assert df.height == 2
    assert df["bench_id"].to_list()[0] == old.bench_id
    assert df["health_count"][0] is None and df["health_count"][1] >= 2
    assert df["completed"].to_list() == [2, 2]
    assert Store.open(store.root).table("bench_health").height == df["health_count"][1]
    # what `forensics runs` reads of it (the latest benchmark per run) still works
    latest = latest_bench(Store.open(store.root))
    assert latest["run_id"].to_list() == ["old-source:0"]


def test_h06_h10_sigint_keeps_the_health_samples_taken(faultserver, tmp_path):
    store = tmp_path / "store"
    url = faultserver.fresh("h06_flap")
    tag = _tag(url)
    proc, err = _interrupted_bench(
        store, url, ["--health-every", "0.1"], lambda: faultserver.health_counts.get(tag, 0) >= 4
    )
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    s = Store.open(store)
    row = s.table("bench").row(0, named=True)
    assert row["interrupted"] is True
    samples = s.table("bench_health")
    assert row["health_count"] == samples.height >= 3  # 4 probes seen, the last may be cut
    assert row["health_non_200"] >= 1 and set(samples["status"].to_list()) <= {200, 503}
