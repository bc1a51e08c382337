"""Experiments (issue 13): a store of three models, two TP sizes, single-stream and 4-stream
benchmarks is judged like with like; the report's figures are those of `runs --json`."""

from __future__ import annotations

import datetime as dt
import json
import re

import polars as pl
import pytest
from click.testing import CliRunner

from forensics.advise import advise, render_advice, run_points
from forensics.baseline import resolve
from forensics.cli import cli
from forensics.errors import UsageError
from forensics.experiment import parse_group_by
from forensics.report import build_report
from forensics.store import Store
from tests.test_plots_story import story_store

KIMI = "/models/Kimi-K2.5"
LLAMA = "/models/Llama-3.1-8B-Instruct"
QWEN = "/models/Qwen3-8B"
K8 = "Kimi-K2.5 · tp8 · local · c=1"
K4 = "Kimi-K2.5 · tp4 · local · c=1"
L1 = "Llama-3.1-8B-Instruct · tp1 · local · c=1"
L4 = "Llama-3.1-8B-Instruct · tp1 · local · c=4 out=256"  # prompt lengths unknown: no in=
Q4 = "Qwen3-8B · tp1 · local · c=4"
SPEC = {"steps": 3, "topk": 4, "dt_tokens": 5}

# (file name, log options): each experiment's story, in launch order
MIXED = [
    ("kimi8_plain", {"spec": False, "tok": 90.0, "model": KIMI}),
    ("kimi8_cg_5dt", {**SPEC, "accept": 2.38, "tok": 82.3, "model": KIMI}),
    ("kimi8_cg_2step", {**SPEC, "steps": 2, "fail": "capture", "model": KIMI}),
    ("kimi4_plain", {"spec": False, "tok": 60.0, "model": KIMI, "tp": 4}),
    ("kimi4_cg_5dt", {**SPEC, "accept": 2.4, "tok": 75.0, "model": KIMI, "tp": 4}),
    ("llama_plain", {"spec": False, "tok": 200.0, "model": LLAMA, "tp": 1}),
    ("llama_cg_5dt", {**SPEC, "accept": 2.4, "tok": 192.0, "model": LLAMA, "tp": 1}),
    # benchmarked at --concurrency 4 (below): 263 tok/s summed over four streams
    ("llama_cg_5dt_c4", {**SPEC, "accept": 2.4, "tok": 190.0, "model": LLAMA, "tp": 1}),
    ("qwen_plain_bs4", {"spec": False, "tok": 600.0, "model": QWEN, "tp": 1, "bs": 4}),
    ("qwen_cg_5dt_bs4", {**SPEC, "accept": 2.6, "tok": 640.0, "model": QWEN, "tp": 1, "bs": 4}),
]


def _bench(store: Store, run_id: str, tok: float, concurrency: int) -> None:
    row = {
        "bench_id": f"b-{run_id}",
        "run_id": run_id,
        "mode": "concurrency",
        "concurrency": concurrency,
        "max_new_tokens": 256,
        "completed": 16,
        "output_tok_s": tok,
        "accept_len_client": 2.4,
        "accept_len_server": None,
        "started_at": dt.datetime(2026, 3, 1, 12, 0),
    }
    with store.transaction() as tx:
        tx.append("bench", pl.DataFrame([row], schema_overrides={"accept_len_server": pl.Float64}))


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Store:
    store = story_store(tmp_path_factory.mktemp("mixed"), runs=MIXED)
    rid = {r["name"]: r["run_id"] for r in run_points(store).iter_rows(named=True)}
    _bench(store, rid["llama_cg_5dt_c4"], 263.0, 4)
    return store


def _sections(data: dict) -> dict[str, dict]:
    return {s["experiment"]: s for s in data["experiments"]}


def test_each_run_has_its_experiment(mixed):
    exp = {r["name"]: r["experiment"] for r in run_points(mixed).iter_rows(named=True)}
    assert exp == {
        "kimi8_plain": K8,
        "kimi8_cg_5dt": K8,
        "kimi8_cg_2step": K8,  # never served: its deployment's single-stream experiment
        "kimi4_plain": K4,
        "kimi4_cg_5dt": K4,
        "llama_plain": L1,
        "llama_cg_5dt": L1,
        "llama_cg_5dt_c4": L4,  # the benchmark's shape, not its decode lines'
        "qwen_plain_bs4": Q4,
        "qwen_cg_5dt_bs4": Q4,
    }


def test_verdicts_compare_only_like_with_like(mixed):
    data = advise(mixed)
    assert data["verdict"]["rule"] == "several_experiments"
    sec = _sections(data)
    assert list(sec) == [K8, K4, L1, Q4, L4]  # biggest first, then by name
    verdicts = {e: s["verdict"]["rule"] for e, s in sec.items()}
    assert verdicts == {
        K8: "drafter_limit",  # 82.3 vs its own 90: the drafter, not tuning
        K4: "speculation_wins",  # 75 vs tp4's plain 60, not tp8's 90
        L1: "tuning_close",  # 192 vs Llama's 200 (−4 %), not Kimi's 90
        Q4: "no_baseline",  # four in flight: no single-stream plain run to compare with
        L4: "no_baseline",  # 263 tok/s summed over 4 streams never meets a 1-stream baseline
    }
    base = {e: (s["baseline"] or {}).get("name") for e, s in sec.items()}
    assert base == {K8: "kimi8_plain", K4: "kimi4_plain", L1: "llama_plain", Q4: None, L4: None}
    assert sec[K4]["verdict"]["text"].startswith(
        "Speculation wins: cg/5dt/topk4/3step gives 75.0 tok/s vs the baseline's 60.0 (+25.0 %)"
    )
    (k8,) = sec[K8]["families"]
    assert k8["accept_needed"] == pytest.approx(2.38 * 90 / 82.3, rel=1e-3)
    assert k8["accept_len"] == pytest.approx(2.38)  # the experiment's own drafter figure
    assert "No single-stream baseline in " + Q4 in sec[Q4]["baseline_note"]
    assert "qwen_plain_bs4" in sec[Q4]["baseline_note"]
    assert {e: s["runs_failed"] for e, s in sec.items()} == {K8: 1, K4: 0, L1: 0, Q4: 0, L4: 0}
    assert "forensics diagnose kimi8_cg_2step" in " ".join(sec[K8]["next_steps"])
    text = render_advice(data)
    assert f"== {K4} (2 runs) ==" in text and "Speculation wins (+186" not in text


def test_a_baseline_from_another_experiment_is_said_to_be(mixed):
    pts = run_points(mixed)
    b = resolve(mixed, pts, K4, "kimi8_plain", n_experiments=5)
    assert (b.name, b.tok_s) == ("kimi8_plain", pytest.approx(90.0))
    assert "another experiment (" + K8 + ")" in b.describe()
    assert resolve(mixed, pts, K8, "kimi8_plain").warning is None


def test_group_by_merges_experiments(mixed):
    """--group-by model: tp4 and tp8 Kimi runs become one experiment, judged against the
    best single-stream plain Kimi run (90)."""
    data = advise(mixed, group_by="model")
    sec = _sections(data)
    assert set(sec) == {"Kimi-K2.5", "Llama-3.1-8B-Instruct", "Qwen3-8B"}
    assert sec["Kimi-K2.5"]["baseline"]["name"] == "kimi8_plain"
    assert sec["Kimi-K2.5"]["runs"] == 5
    assert parse_group_by("shape, model") == ["model", "shape"]
    assert parse_group_by("none") == []
    with pytest.raises(UsageError, match="no such experiment field"):
        parse_group_by("model,gpu")
    res = CliRunner().invoke(
        cli, ["--store", str(mixed.root), "runs", "--json", "--group-by", "model,layout"]
    )
    assert res.exit_code == 0, res.output
    assert {r["experiment"] for r in json.loads(res.output)} == {
        "Kimi-K2.5 · tp8",
        "Kimi-K2.5 · tp4",
        "Llama-3.1-8B-Instruct · tp1",
        "Qwen3-8B · tp1",
    }
    res = CliRunner().invoke(cli, ["--store", str(mixed.root), "runs", "--group-by", "gpu"])
    assert res.exit_code == 2 and "no such experiment field" in res.output


def test_stored_baselines_are_per_experiment(tmp_path):
    store = story_store(tmp_path, runs=MIXED[:5])
    runner = CliRunner()
    base = ["--store", str(store.root), "baseline"]
    res = runner.invoke(cli, [*base, "--tok-s", "70"])
    assert res.exit_code == 2 and "2 experiments" in res.output and K4 in res.output
    res = runner.invoke(cli, [*base, "--tok-s", "70", "--experiment", K4])
    assert res.exit_code == 0 and f"for {K4}" in res.output
    res = runner.invoke(cli, [*base, "kimi8_cg_5dt"])  # a speculative run may be chosen
    assert res.exit_code == 0 and f"82.3 tok/s (run kimi8_cg_5dt) for {K8}" in res.output
    sec = _sections(advise(store))
    assert (sec[K4]["baseline"]["tok_s"], sec[K4]["baseline"]["source"]) == (70.0, "meta")
    assert sec[K8]["baseline"]["name"] == "kimi8_cg_5dt"
    res = runner.invoke(cli, [*base, "--json"])
    assert sorted(v["experiment"] for v in json.loads(res.output)) == [K4, K8]
    res = runner.invoke(cli, [*base, "--clear", "--experiment", K4])
    assert res.exit_code == 0
    assert _sections(advise(store))[K4]["baseline"]["name"] == "kimi4_plain"


def test_report_figures_are_those_of_runs_json(mixed, tmp_path):
    """Every count in the report (header, contents, each experiment) from `runs --json`:
    runs per experiment, failed = the verdict's phase is not ok, or it hung."""
    res = CliRunner().invoke(cli, ["--store", str(mixed.root), "runs", "--json"])
    rows = json.loads(res.output)
    failed = [r for r in rows if r["phase"] not in (None, "ok") or r["hung"]]
    html = build_report(mixed)
    head = html.split('<nav class="toc">')[0]
    got = dict(re.findall(r'data-k="(\w+)">(\d+)<', head))
    assert got == {"runs": str(len(rows)), "failed": str(len(failed)), "experiments": "5"}
    sections = re.findall(
        r'<p class="sub" data-experiment="([^"]+)"><span class="count" data-k="runs">(\d+)'
        r'</span> runs \(<span class="count" data-k="failed">(\d+)</span> failed\)',
        html,
    )
    want = {}
    for r in rows:
        n, f = want.get(r["experiment"], (0, 0))
        want[r["experiment"]] = (n + 1, f + (r in failed))
    assert {e: (int(n), int(f)) for e, n, f in sections} == want
    # the contents list says the same, in the same order as the sections
    toc = re.findall(r'<li><a href="#e\d+-experiment">([^<]+)</a>: (\d+) runs, (\d+) failed', html)
    assert [(e, int(n), int(f)) for e, n, f in toc] == [(e, int(n), int(f)) for e, n, f in sections]
    # failed rows of the tables and diagnoses are those runs
    assert html.count('<tr class="failed">') == len(failed)
    for r in failed:
        assert f"{r['name']}: died in" in html


def test_a_label_puts_runs_in_one_experiment(tmp_path):
    store = story_store(tmp_path, runs=MIXED[:5])
    runner = CliRunner()
    args = ["--store", str(store.root), "experiments"]
    res = runner.invoke(cli, [*args, "--json"])
    assert [(r["experiment"], r["runs"], r["failed"]) for r in json.loads(res.output)] == [
        (K8, 3, 1),
        (K4, 2, 0),
    ]
    res = runner.invoke(cli, [*args, "--label", "kimi all", "kimi4"])
    assert res.exit_code == 0 and "kimi4_plain: experiment kimi all" in res.output
    runner.invoke(cli, [*args, "--label", "kimi all", "kimi8_plain"])
    sec = _sections(advise(store))
    assert sec["kimi all"]["runs"] == 3 and sec["kimi all"]["baseline"]["name"] == "kimi8_plain"
    res = runner.invoke(cli, [*args, "--unlabel", "kimi"])
    assert res.exit_code == 0
    assert set(_sections(advise(store))) == {K8, K4}
    res = runner.invoke(cli, [*args, "--label", "x"])
    assert res.exit_code == 2 and "need MATCH" in res.output
    res = runner.invoke(cli, args)
    assert res.output.splitlines()[0] == (
        f"{K8}: 3 runs (1 failed, 2 speculative); baseline: 90.0 tok/s (kimi8_plain) from best "
        "single-stream plain run"
    )


def test_diagnose_compares_with_a_run_of_the_same_experiment(mixed):
    """The closest run that worked is a Kimi tp8 single-stream one, though Llama and Qwen runs
    share more of the crashed run's speculative settings' values."""
    from forensics.diagnose import diagnose

    (rep,) = diagnose(mixed, "kimi8_cg_2step")
    cmp = rep["comparison"]
    assert cmp["closest"]["name"] in {"kimi8_plain", "kimi8_cg_5dt"}
    assert cmp["warning"] is None


# -- hardware: the GPU model where the log names it (issue 13, experiments) -----------------
def test_gpu_names_from_sglang_kernel_config_files():
    from forensics.experiment import gpu_models, gpu_name

    assert gpu_name("NVIDIA_H200") == "H200"
    assert gpu_name("NVIDIA_H100_80GB_HBM3") == "H100 80GB HBM3"
    assert gpu_name("AMD_Instinct_MI300X") == "AMD Instinct MI300X"
    assert gpu_name("NVIDIA_") == "NVIDIA "  # nothing after the vendor: kept as printed
    moe = (
        "Using MoE kernel config from /sgl/configs/triton_3_4_0/E=384,N=256,"
        "device_name=NVIDIA_H200,dtype=fp8_w8a8.json."
    )
    fp8 = (
        "Using configuration from /sgl/quantization/configs/N=7168,K=2048,device_name="
        "NVIDIA_B200,dtype=fp8_w8a8,block_shape=[128, 128].json for W8A8 Block FP8 kernel."
    )
    lines = pl.DataFrame(
        {
            "source_id": ["a", "a", "b", "c"],
            "run_index": [0, 0, 0, 0],
            "line": [9, 4, 2, 3],
            "text": [
                moe,
                moe.replace("H200", "H100_80GB_HBM3"),
                fp8,
                "mooncake device_name=mlx5_0",
            ],
        }
    )
    got = gpu_models(lines).sort("source_id").to_dicts()
    # the first line that names it; a device_name= outside a kernel-config name is not a GPU
    assert got == [
        {"source_id": "a", "run_index": 0, "gpu_model": "H100 80GB HBM3"},
        {"source_id": "b", "run_index": 0, "gpu_model": "B200"},
    ]


H200_K8 = "Kimi-K2.5 · tp8 · H200@local · c=1"


def test_the_gpu_model_is_part_of_the_hardware_key(tmp_path):
    """The log names the GPU (kernel-config file name): `H200@local`; a launch that died
    before the first MoE forward names none and still belongs with its host's runs."""
    h200 = {"model": KIMI, "gpu": "NVIDIA_H200"}
    store = story_store(
        tmp_path,
        runs=[
            ("k_plain", {"spec": False, "tok": 90.0, **h200}),
            ("k_cg_5dt", {**SPEC, "accept": 2.38, "tok": 82.3, **h200}),
            ("k_load_oom", {**SPEC, "fail": "load", "model": KIMI}),
        ],
    )
    res = CliRunner().invoke(cli, ["--store", str(store.root), "runs", "--json"])
    assert res.exit_code == 0, res.output
    exp = {r["name"]: r["experiment"] for r in json.loads(res.output)}
    assert exp == {"k_plain": H200_K8, "k_cg_5dt": H200_K8, "k_load_oom": H200_K8}
    data = advise(store)
    assert [s["experiment"] for s in data["experiments"]] == [H200_K8]
    assert data["experiments"][0]["baseline"]["name"] == "k_plain"


def test_two_gpu_models_on_one_host_are_two_experiments(tmp_path):
    store = story_store(
        tmp_path,
        runs=[
            ("h200_plain", {"spec": False, "tok": 90.0, "gpu": "NVIDIA_H200"}),
            ("h100_plain", {"spec": False, "tok": 70.0, "gpu": "NVIDIA_H100_80GB_HBM3"}),
            ("unknown_oom", {"spec": False, "fail": "load"}),
        ],
    )
    exp = {r["name"]: r["experiment"] for r in run_points(store).iter_rows(named=True)}
    assert exp == {
        "h200_plain": H200_K8,
        "h100_plain": "Kimi-K2.5 · tp8 · H100 80GB HBM3@local · c=1",
        # which of the two it ran on, nothing says: the host alone (its own experiment)
        "unknown_oom": "Kimi-K2.5 · tp8 · local · unmeasured",
    }
