"""Issue 14, "Remedies must fit the log's own values": every setting a remedy suggests is
checked against the run's own server_args (signatures.SETTINGS, one row per suggestion, one
function ``fit`` wherever remedies are shown).

For each row: a run whose settings contradict the suggestion (the line is replaced or left
out) and one whose settings do not (the suggestion stays, with a value from the run); then the
catalog's texts against the table, and ``diagnose --log`` / ``diagnose NAME`` end to end on logs
whose server_args contradict a remedy.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
from click.testing import CliRunner

from forensics import signatures as sigs
from forensics.classifier.verdict import NEXT_STEPS_HUNG_STAGE
from forensics.cli import cli
from forensics.signatures.remedies import SETTINGS, unfit_row
from tests.conftest import FIXTURES

# row id -> (a remedy line, settings that contradict it, settings that do not, text expected
# in the fitted line when it still fits)
CASES = {
    "mem_up": (
        "raise --mem-fraction-static (e.g. {mem_up})",
        {"mem_fraction_static": 0.95},
        {"mem_fraction_static": 0.8},
        "--mem-fraction-static 0.85",
    ),
    "mem_down": (
        "lower --mem-fraction-static (e.g. {mem_down})",
        {"mem_fraction_static": 0.5},
        {"mem_fraction_static": 0.9},
        "--mem-fraction-static 0.85",
    ),
    "not_speculative": (
        "try smaller speculative settings: --speculative-eagle-topk 1",
        {"speculative_algorithm": None, "speculative_eagle_topk": None},
        {"speculative_algorithm": "EAGLE3", "speculative_eagle_topk": 4},
        "--speculative-eagle-topk 1",
    ),
    "topk_1": (
        "e.g. --speculative-eagle-topk 1 (a chain draft)",
        {"speculative_algorithm": "EAGLE", "speculative_eagle_topk": 1},
        {"speculative_algorithm": "EAGLE", "speculative_eagle_topk": 8},
        "--speculative-eagle-topk 1",
    ),
    "page_1": ("e.g. --page-size 1", {"page_size": 1}, {"page_size": 64}, "--page-size 1"),
    "attn_other": (
        "try another --attention-backend (e.g. {attn_other})",
        None,  # never contradicted: the example names backends other than the run's
        {"attention_backend": "fa3"},
        "triton or flashinfer",
    ),
    "no_cuda_graph": (
        "confirm with --disable-cuda-graph (slower)",
        {"disable_cuda_graph": True},
        {"disable_cuda_graph": False},
        "--disable-cuda-graph",
    ),
    "graph_bs_no_graphs": (
        "lower --cuda-graph-max-bs (e.g. {graph_bs_down})",
        {"disable_cuda_graph": True, "cuda_graph_max_bs": 160},
        {"disable_cuda_graph": False, "cuda_graph_max_bs": 160},
        "(e.g. 16)",
    ),
    "graph_bs_down": (
        "try a smaller --cuda-graph-max-bs (e.g. {graph_bs_down})",
        {"disable_cuda_graph": False, "cuda_graph_max_bs": 1},
        {"disable_cuda_graph": False, "cuda_graph_max_bs": 8},
        "(e.g. 4)",
    ),
    "chunk_down": (
        "lower --chunked-prefill-size (e.g. {chunk_down})",
        {"chunked_prefill_size": 256},
        {"chunked_prefill_size": 8192},
        "(e.g. 4096)",
    ),
    "running_down": (
        "lower --max-running-requests (e.g. {running_down})",
        {"max_running_requests": 1},
        {"max_running_requests": 48},
        "(e.g. 24)",
    ),
    "context_down": (
        "lower --context-length (e.g. {context_down})",
        {"context_length": 2048},
        {"context_length": 32768},
        "(e.g. 16384)",
    ),
    "tp_up": (
        "spread the model over more GPUs (--tp-size)",
        {"tp_size": 8},
        {"tp_size": 2},
        "--tp-size",
    ),
    "quantized": (
        "use a quantized checkpoint, or free GPU memory held by other processes",
        {"quantization": "fp8"},
        {"quantization": None},
        "a quantized checkpoint",
    ),
    "dist_up": (
        "for slow startups raise --dist-timeout (e.g. {dist_up})",
        None,
        {"dist_timeout": 3600},
        "(e.g. 7200)",
    ),
    "watchdog_up": (
        "raise --watchdog-timeout (e.g. {watchdog_up})",
        None,
        {"watchdog_timeout": 300},
        "(e.g. 600)",
    ),
    "warmup_skip": (
        "retry with --skip-server-warmup",
        {"skip_server_warmup": True},
        {"skip_server_warmup": False},
        "--skip-server-warmup",
    ),
    "custom_ar_off": (
        "try --disable-custom-all-reduce",
        {"disable_custom_all_reduce": True},
        {"disable_custom_all_reduce": False},
        "--disable-custom-all-reduce",
    ),
    "radix_off": (
        "rule out the prefix cache: --disable-radix-cache",
        {"disable_radix_cache": True},
        {"disable_radix_cache": False},
        "--disable-radix-cache",
    ),
    "log_folder": (
        "create the log folder (mkdir -p) before launching",
        {"log_path": "/tmp/x.log"},  # a log was read: its folder exists
        {},
        "mkdir -p",
    ),
}


def test_every_settings_row_has_its_cases():
    assert set(CASES) == {r.id for r in SETTINGS}


@pytest.mark.parametrize("row", SETTINGS, ids=lambda r: r.id)
def test_each_row_contradicted_and_not(row):
    line, bad, good, kept = CASES[row.id]
    assert row.matches(line)
    fitted = sigs.fit([line], good)
    assert len(fitted) == 1 and kept in fitted[0], fitted
    assert unfit_row(line, good) is None
    if bad is None:
        return
    assert unfit_row(line, bad) is row
    out = sigs.fit([line], bad)
    assert out == ([sigs.render(row.instead, **bad, cur=bad.get(row.key))] if row.instead else [])
    for said in out:  # what is said instead makes no suggestion of its own: fit is idempotent
        assert unfit_row(said, bad) is None and sigs.fit(out, bad) == out


def test_an_unknown_setting_keeps_the_suggestion_with_a_generic_value():
    out = sigs.fit(["raise --mem-fraction-static (e.g. {mem_up})"], {})
    assert out == ["raise --mem-fraction-static (e.g. +0.05 over the current value)"]


def test_settings_come_from_server_args_else_from_the_config_columns():
    s = sigs.run_settings({"mem_fraction": 0.9, "cuda_graph": False, "topk": None})
    assert s == {"mem_fraction_static": 0.9, "disable_cuda_graph": True}
    args = json.dumps({"mem_fraction_static": 0.7, "cuda_graph_backend_decode": "disabled"})
    s = sigs.run_settings({"mem_fraction": 0.9}, args, log_path="a.log")
    assert s["mem_fraction_static"] == 0.7 and s["disable_cuda_graph"] is True
    assert s["log_path"] == "a.log"
    text = "[2026-01-01 00:00:00] server_args=ServerArgs(tp_size=8, page_size=1)\n"
    assert sigs.settings_from_text(text) == {"tp_size": 8, "page_size": 1}


def _all_remedy_lines() -> list[str]:
    lines = [r for e in sigs.CATALOG for r in e["remedies"]]
    lines += [r for c in sigs.CAPTURE_CAUSES for r in c["remedies"]]
    lines += [r for steps in NEXT_STEPS_HUNG_STAGE.values() for r in steps]
    return lines


@pytest.mark.parametrize("line", _all_remedy_lines())
def test_a_remedy_line_makes_one_suggestion(line):
    """The rows that recognise a line all point at one place in it, so replacing the line
    never drops a second, still fitting suggestion."""
    spans = [m.span() for r in SETTINGS for m in [r.rx.search(line)] if m]
    for a in spans:
        for b in spans:
            assert a[0] < b[1] and b[0] < a[1], (line, spans)


def test_every_flag_a_remedy_suggests_has_a_row():
    """A flag suggested in a remedy is either a SETTINGS row's or named here with why no value
    of the run contradicts it."""
    unjudged = {
        "--port": "another port is always possible",
        "--model-path": "whether the path exists on the GPU host is not in the log",
        "--speculative-draft-model-path": "as --model-path",
        "--cuda-graph-max-bs-decode": "the same setting under SGLang >= 0.5.14's name",
        **dict.fromkeys(
            ("--help", "--force-reinstall", "--query-compute-apps", "--format"),
            "another tool's option (launch_server --help, pip, nvidia-smi), not a setting",
        ),
    }
    for line in _all_remedy_lines():
        for flag in re.findall(r"--[a-z][\w-]*", line):
            judged = any(r.matches(line) for r in SETTINGS)
            assert judged or flag in unjudged, (flag, line)


def test_diagnose_log_says_what_the_server_args_contradict(tmp_path):
    """The issue's example: `--speculative-eagle-topk 1` suggested at topk 1; and the prefix
    cache already off, in a copy of the same log."""
    res = CliRunner().invoke(
        cli, ["diagnose", "ima", "--log", str(FIXTURES / "sglang_fail_runtime_ima.log"), "--json"]
    )
    assert res.exit_code == 0, res.output
    (rep,) = json.loads(res.output)
    steps = rep["next_steps"]
    assert rep["signature"] == "illegal_memory_access"
    assert not any("--speculative-eagle-topk 1" in s for s in steps)
    assert any("speculative_eagle_topk is already 1" in s for s in steps)
    assert any("another --attention-backend (e.g. triton or flashinfer)" in s for s in steps)
    assert any("--disable-radix-cache" in s for s in steps)
    log = tmp_path / "ima_noradix.log"
    text = (FIXTURES / "sglang_fail_runtime_ima.log").read_text()
    log.write_text(text.replace("'disable_radix_cache': False", "'disable_radix_cache': True"))
    res = CliRunner().invoke(cli, ["diagnose", "ima", "--log", str(log)])
    assert res.exit_code == 0, res.output
    assert "--disable-radix-cache" not in res.output
    assert "the prefix cache is already off in this run" in res.output


def test_diagnose_of_a_stored_run_fits_its_remedies(tmp_path):
    """kv_pool_oom at mem_fraction_static=0.95 ingested: diagnose NAME and show agree."""
    shutil.copy(FIXTURES / "sglang_fail_load_kv_oom.log", tmp_path / "kv.log")
    store = tmp_path / "store"
    r = CliRunner()
    assert r.invoke(cli, ["--store", str(store), "ingest", str(tmp_path / "kv.log")]).exit_code == 0
    res = r.invoke(cli, ["--store", str(store), "diagnose", "kv", "--json"])
    (rep,) = json.loads(res.output)
    steps = " | ".join(rep["next_steps"])
    assert "raise --mem-fraction-static" not in steps
    assert "mem_fraction_static is already 0.95" in steps


def test_the_launchers_fix_is_fitted_to_the_logs_server_args():
    """forensics launch names one fix from the log's text (launcher.causes.match_log)."""
    from forensics.launcher.causes import match_log

    head = "[2026-01-01 00:00:00] server_args=ServerArgs(mem_fraction_static={m}, tp_size=1)\n"
    tail = "Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    low = match_log(head.format(m=0.5) + tail)
    assert low["id"] == "capture_failed"
    assert low["fix"].startswith("mem_fraction_static is already 0.5"), low["fix"]
    high = match_log(head.format(m=0.9) + tail)
    assert high["fix"].startswith("lower --mem-fraction-static (e.g. --mem-fraction-static 0.85)")


def test_the_report_shows_the_fitted_remedies(tmp_path):
    shutil.copy(FIXTURES / "sglang_fail_load_kv_oom.log", tmp_path / "kv.log")
    store = tmp_path / "store"
    r = CliRunner()
    assert r.invoke(cli, ["--store", str(store), "ingest", str(tmp_path / "kv.log")]).exit_code == 0
    out = tmp_path / "r.html"
    res = r.invoke(cli, ["--store", str(store), "report", "-o", str(out)])
    assert res.exit_code == 0, res.output
    html = out.read_text()
    assert "mem_fraction_static is already 0.95" in html
    assert "raise --mem-fraction-static" not in html
