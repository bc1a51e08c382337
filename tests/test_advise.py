"""The break-even advisor: arithmetic on runs whose answer is known (issue 7)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from forensics.advise import advise, render_advice, resolve_baseline
from forensics.cli import cli
from forensics.errors import RunNotFound, UsageError
from forensics.store import Store
from tests.test_plots_story import STORY, story_store


def _family(data, name):
    (f,) = [f for f in data["families"] if f["family"] == name]
    return f


def test_seed_session_numbers(tmp_path):
    """cg/5dt at 82.3 tok/s and accept 2.38 vs 90 tok/s: 28.92 ms a round, needs 2.603."""
    data = advise(story_store(tmp_path))
    assert data["baseline"]["tok_s"] == pytest.approx(90.0)
    assert data["baseline"]["ms_per_token"] == pytest.approx(1000 / 90)
    f = _family(data, "cg/5dt/topk4/3step")
    assert f["round_ms"] == pytest.approx(1000 * 2.38 / 82.3, rel=1e-4)  # 28.92 ms
    assert f["accept_needed"] == pytest.approx(2.38 * 90 / 82.3, rel=1e-4)  # 2.603
    assert f["gap"] == pytest.approx(82.3 / 90 - 1, rel=1e-3)  # -8.6 %
    assert f["round_needed_ms"] == pytest.approx(2.38 * 1000 / 90, rel=1e-6)  # 26.44 ms
    assert f["beats"] is False and f["n_runs"] == 1 and f["confidence"] == "low"
    assert "a round costs 28.9 ms" in f["text"]
    assert "needs accept len ≥ 2.60" in f["text"] and "gives 2.38 (−8.6 %)" in f["text"]
    assert "cut round cost to 26.4 ms" in f["text"]
    # two drafters in the nocg/16dt family: 2 runs back the round cost, the latest drafter's
    # accept length is the one judged
    g = _family(data, "nocg/16dt/topk8/5step")
    assert g["n_runs"] == 2 and g["spread_source"] == "runs"
    assert g["round_lo"] == pytest.approx(1000 * 2.90 / 50.5, rel=1e-3)  # 57.4 ms
    assert g["round_hi"] == pytest.approx(1000 * 3.10 / 53.2, rel=1e-3)  # 58.3 ms
    assert g["accept_len"] == pytest.approx(2.90)
    assert "CUDA graphs are off" in g["text"]
    # the global verdict: the drafter, not tuning
    v = data["verdict"]
    assert v["rule"] == "drafter_limit" and v["closest_family"] == "cg/5dt/topk4/3step"
    assert "more training data" in v["text"] and "2.60" in v["text"]
    assert any("Repeat sglang_eagle3_cg_5dt" in s for s in data["next_steps"])
    assert any("forensics diagnose sglang_eagle3_cg_2step" in s for s in data["next_steps"])
    assert data["runs_failed"] == 1


def test_repeated_runs_give_spread_and_confidence(tmp_path):
    """Three runs of one family, round cost 20, 21, 22 ms: median 21, spread 20-22."""
    runs = [("base", {"spec": False, "tok": 100.0})]
    for i, tok in enumerate((150.0, 1000 * 3.0 / 21, 1000 * 3.0 / 22)):
        runs.append((f"cg_run{i}", {"accept": 3.0, "tok": tok, "jitter": 0.0}))
    data = advise(story_store(tmp_path, runs=runs))
    f = _family(data, "cg/5dt/topk4/3step")
    assert f["n_runs"] == 3
    assert f["round_ms"] == pytest.approx(21.0, rel=1e-3)
    assert (f["round_lo"], f["round_hi"]) == (pytest.approx(20.0, rel=1e-3),
                                              pytest.approx(22.0, rel=1e-3))  # fmt: skip
    assert f["accept_needed"] == pytest.approx(2.1, rel=1e-3)  # 21 ms / 10 ms per token
    assert f["beats"] is True and f["gap"] == pytest.approx(3.0 / 2.1 - 1, rel=1e-3)
    assert f["confidence"] == "fair"  # 3 runs but 9.5 % spread
    assert data["verdict"]["rule"] == "speculation_wins"
    assert "Speculation wins" in data["verdict"]["text"]


def test_close_gap_says_tuning_is_still_worth_it(tmp_path):
    runs = [("base", {"spec": False, "tok": 100.0}), ("cg_a", {"accept": 2.0, "tok": 97.0})]
    data = advise(story_store(tmp_path, runs=runs))
    assert data["verdict"]["rule"] == "tuning_close"
    assert "still worth it" in data["verdict"]["text"]


def test_no_baseline_says_run_it(tmp_path):
    runs = [("cg_a", {"accept": 2.0, "tok": 70.0})]
    data = advise(story_store(tmp_path, runs=runs))
    assert data["baseline"] is None and data["verdict"]["rule"] == "no_baseline"
    assert "Run the baseline" in data["next_steps"][0]
    f = data["families"][0]
    assert f["accept_needed"] is None and f["round_ms"] == pytest.approx(1000 * 2 / 70, rel=1e-3)
    assert "No baseline" in render_advice(data)


def test_baseline_sources_in_order(tmp_path):
    store = story_store(tmp_path)
    assert resolve_baseline(store, "95").tok_s == 95.0
    assert resolve_baseline(store, "95 tok/s").source == "option"
    b = resolve_baseline(store, "cg_5dt")  # a run as the baseline
    assert (b.name, round(b.tok_s, 1)) == ("sglang_eagle3_cg_5dt", 82.3)
    store.set_meta("bench.baseline", {"tok_s": 88.0, "run_id": None, "name": None})
    assert resolve_baseline(store).tok_s == 88.0 and resolve_baseline(store).source == "meta"
    store.set_meta("bench.baseline", None)
    store.set_meta("baseline", "sglang_baseline")
    assert resolve_baseline(store).name == "sglang_baseline"
    with pytest.raises(UsageError):
        resolve_baseline(store, "-3")
    with pytest.raises(RunNotFound, match="no run matches"):
        resolve_baseline(store, "nosuch")
    with pytest.raises(RunNotFound, match="no tok/s"):
        resolve_baseline(store, "2step")


def test_empty_store_and_no_match(tmp_path):
    with pytest.raises(RunNotFound, match="no runs"):
        advise(Store.open(tmp_path / "empty"))
    with pytest.raises(RunNotFound, match="no run matches"):
        advise(story_store(tmp_path), "nosuch")


def test_match_limits_families_but_keeps_the_baseline(tmp_path):
    data = advise(story_store(tmp_path), "cg_5dt")
    assert [f["family"] for f in data["families"]] == ["cg/5dt/topk4/3step"]
    assert data["baseline"]["name"] == "sglang_baseline"


def test_cli_advise_text_and_json(tmp_path):
    store = story_store(tmp_path)
    runner = CliRunner()
    res = runner.invoke(cli, ["--store", str(store.root), "advise"])
    assert res.exit_code == 0, res.output
    assert "Baseline: 90.0 tok/s (sglang_baseline)" in res.output
    assert "Verdict: Tuning has reached its limit" in res.output
    res = runner.invoke(cli, ["--store", str(store.root), "advise", "--json", "--baseline", "80"])
    data = json.loads(res.output)
    assert data["baseline"]["tok_s"] == 80.0
    assert data["verdict"]["rule"] == "speculation_wins"  # 82.3 > 80
    assert len(data["families"]) == len({"nocg16", "cg16", "cg5"})
    assert len(STORY) == data["runs"]


# --------------------------------------------------------------------------------------
# The default baseline is single-stream (issues 6/7)
# --------------------------------------------------------------------------------------
def test_batched_plain_run_is_never_the_default_baseline(tmp_path):
    """A plain run at 8 requests in flight (600 tok/s) loses to the 90 tok/s single stream."""
    runs = [
        ("sglang_baseline", {"spec": False, "tok": 90.0}),
        ("plain_bs8", {"spec": False, "tok": 600.0, "bs": 8}),
        ("cg_a", {"accept": 2.4, "tok": 82.3}),
    ]
    store = story_store(tmp_path, runs=runs)
    base = resolve_baseline(store)
    assert (base.name, base.tok_s, base.batched) == ("sglang_baseline", 90.0, False)
    f = advise(store)["families"][0]
    assert f["accept_needed"] == pytest.approx(2.4 * 90 / 82.3, rel=1e-3)


def test_only_batched_plain_runs_no_baseline_and_how_to_set_one(tmp_path):
    """A plain run at 8 in flight is its own experiment (c=8): neither it nor the single-stream
    speculative run (c=1) has a single-stream plain run to compare with (issue 13: was one
    store-wide note)."""
    runs = [("plain_bs8", {"spec": False, "tok": 600.0, "bs": 8}), ("cg_a", {"tok": 70.0})]
    store = story_store(tmp_path, runs=runs)
    c1, c8 = "Kimi-K2.5 · tp8 · local · c=1", "Kimi-K2.5 · tp8 · local · c=8"
    assert resolve_baseline(store) is None
    data = advise(store)
    assert data["verdict"]["rule"] == "several_experiments"
    by_exp = {s["experiment"]: s for s in data["experiments"]}
    assert list(by_exp) == [c1, c8]
    for sec in by_exp.values():
        assert sec["baseline"] is None and sec["verdict"]["rule"] == "no_baseline"
        note = sec["baseline_note"]
        assert "forensics baseline --tok-s X" in note and "--baseline TOK_S" in note
        assert note in sec["verdict"]["text"] and sec["next_steps"][0] == note
    assert by_exp[c1]["baseline_note"].startswith(f"No baseline in {c1}: no plain")
    assert by_exp[c8]["baseline_note"].startswith(
        f"No single-stream baseline in {c8}: the plain run(s) plain_bs8 were"
    )
    text = render_advice(data).splitlines()
    assert text[2] == f"== {c1} (1 runs) =="
    assert text[3] == f"Baseline: none. {by_exp[c1]['baseline_note']}"
    # asked for explicitly, a batched run is used, and said to be batched and from another
    # experiment
    base = resolve_baseline(store, "plain_bs8")
    assert base.batched and "several requests in flight" in base.describe()
    assert "another experiment" in base.describe()


def _bench_row(store, run_id: str, tok: float, mode: str, concurrency: int) -> None:
    import datetime as dt

    import polars as pl

    row = {
        "bench_id": f"b-{run_id}-{mode}",
        "run_id": run_id,
        "mode": mode,
        "concurrency": concurrency,
        "completed": 10,
        "output_tok_s": tok,
        "accept_len_client": None,
        "accept_len_server": None,
        "started_at": dt.datetime(2026, 3, 1, 12, 0),
    }
    schema = {"accept_len_client": pl.Float64, "accept_len_server": pl.Float64}
    with store.transaction() as tx:
        tx.append("bench", pl.DataFrame([row], schema_overrides=schema))


def test_benchmark_at_concurrency_is_batched_single_is_not(tmp_path):
    """tok/s from a benchmark: batched when it ran --concurrency N (not from decode lines)."""
    runs = [
        ("sglang_baseline", {"spec": False, "tok": 90.0}),
        ("plain_fast", {"spec": False, "tok": 95.0}),
        ("cg_a", {"accept": 2.4, "tok": 82.3}),
    ]
    store = story_store(tmp_path, runs=runs)
    assert resolve_baseline(store).name == "plain_fast"
    from forensics.advise import run_points

    rid = {r["name"]: r["run_id"] for r in run_points(store).iter_rows(named=True)}
    _bench_row(store, rid["plain_fast"], 700.0, "concurrency", 8)
    base = resolve_baseline(store)
    assert (base.name, base.tok_s) == ("sglang_baseline", 90.0)
    _bench_row(store, rid["sglang_baseline"], 88.0, "single", 1)
    base = resolve_baseline(store)
    assert (base.name, base.tok_s) == ("sglang_baseline", 88.0)  # the benchmark's figure
