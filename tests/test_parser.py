"""parsers.sglang on the fixtures: every layout variant parses into exact values.

Fixture files are in fixtures/ (see fixtures/README.md). IDs P01-P26 are from
../shared/bad-inputs.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from forensics_parsers.sglang import (
    RULES,
    Frames,
    LogParser,
    parse_bytes,
    parse_server_args,
    parse_text,
)

FIX = Path(__file__).resolve().parent.parent / "fixtures"


def parse_fixture(name: str):
    data = (FIX / name).read_bytes()
    return data, parse_bytes(data, name)


def physical_lines(data: bytes) -> int:
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def stage_counts(frames) -> dict[tuple[str, str], int]:
    ev = frames.events.group_by("stage", "scope").agg(pl.len())
    return {(s, sc): n for s, sc, n in ev.iter_rows()}


# name -> (run config, decode lines, median tok/s, mean accept len, mean accept rate, style tag)
SEED_RUNS = {
    # 0.4.6: `[.. TP0]` tags, ServerArgs repr, `Decode batch.`, per-rank capacity lines
    "sglang_baseline.log": (
        dict(
            spec_algorithm=None, num_steps=None, num_draft_tokens=None, cuda_graph=True, tp_size=8
        ),
        21,
        90.0,
        None,
        None,
    ),
    # 0.5.9: `elapsed=` on load lines, accept rate = len / num_draft_tokens
    "sglang_eagle3_nocg_16dt.log": (
        dict(
            spec_algorithm="EAGLE3",
            num_steps=5,
            topk=4,
            num_draft_tokens=16,
            cuda_graph=False,
            tp_size=8,
        ),
        15,
        53.2,
        2.8,
        0.1747,
    ),
    # 0.5.11 with SGLANG_LOG_MS: milliseconds, `#pending-token`, accept rate excludes the bonus
    "sglang_eagle3_nocg_16dt_other.log": (
        dict(
            spec_algorithm="EAGLE3",
            num_steps=5,
            topk=4,
            num_draft_tokens=16,
            cuda_graph=False,
            tp_size=8,
        ),
        15,
        50.5,
        2.6,
        0.1067,
    ),
    # 0.5.23: server_args={...} dict, tp=8, `Capture target verify CUDA graph` family
    "sglang_eagle3_cg_16dt.log": (
        dict(
            spec_algorithm="EAGLE3",
            num_steps=5,
            topk=4,
            num_draft_tokens=16,
            cuda_graph=True,
            tp_size=8,
        ),
        15,
        74.9,
        3.9,
        0.1927,
    ),
    # 0.5.4: `Decode batch [N], ` iteration tags, trailing `, `, accept rate = len / (steps+1)
    "sglang_eagle3_cg_5dt.log": (
        dict(
            spec_algorithm="EAGLE3",
            num_steps=4,
            topk=1,
            num_draft_tokens=5,
            cuda_graph=True,
            tp_size=8,
        ),
        15,
        82.3,
        2.55,
        0.51,
    ),
}


@pytest.mark.parametrize("name", sorted(SEED_RUNS))
def test_seed_session_runs_parse_exactly(name):
    cfg, n_decode, tok_s, acc_len, acc_rate = SEED_RUNS[name]
    data, f = parse_fixture(name)
    assert len(f.runs) == 1
    run = f.runs.row(0, named=True)
    for k, v in cfg.items():
        assert run[k] == v, k
    assert run["config_source"] == "server_args"
    assert run["first_line"] == 1 and run["last_line"] == physical_lines(data)
    assert len(f.decode) == n_decode
    assert f.decode["rank"].unique().to_list() == ["TP0"]
    assert f.decode["gen_throughput"].median() == pytest.approx(tok_s, abs=1e-3)
    if acc_len is None:
        assert f.decode["accept_len"].null_count() == n_decode
    else:
        assert f.decode["accept_len"].mean() == pytest.approx(acc_len, abs=1e-3)
        assert f.decode["accept_rate"].mean() == pytest.approx(acc_rate, abs=2e-3)
    assert f.errors.is_empty()
    # every physical line is accounted for, and nothing fell through to "unknown"
    assert sum(f.counts.values()) == physical_lines(data) == f.stats["lines_total"]
    assert not [k for k in f.counts if k.startswith("unknown")]
    assert len(f.prefill) == 2


def test_baseline_0_4_6_stages_per_rank():
    _, f = parse_fixture("sglang_baseline.log")
    st = stage_counts(f)
    assert st[("load_begin", "target")] == 8 and st[("load_end", "target")] == 8
    assert st[("capture_begin", "target")] == 8 and st[("capture_end", "target")] == 8
    assert st[("capacity", "")] == 8  # every rank prints it in <= 0.4.6
    assert st[("ready", "")] == 1
    end = f.events.filter((pl.col("stage") == "capture_end") & (pl.col("rank") == "TP0")).row(
        0, named=True
    )
    # 0.4.4-0.4.6 order: avail mem before mem usage
    assert (end["elapsed_s"], end["avail_mem_gb"], end["mem_usage_gb"]) == (21.37, 32.10, 1.35)
    load = f.events.filter(pl.col("stage") == "load_end").row(0, named=True)
    assert load["detail"] == "DeepseekV3ForCausalLM"
    assert f.stats["progress_frames_collapsed"] == 23  # one capture bar of 24 frames (P06)
    assert f.counts["shard_progress"] == 5  # `\rLoading ...\n` lines of 0.4.x


def test_0_5_23_dict_server_args_and_capture_scopes():
    _, f = parse_fixture("sglang_eagle3_cg_16dt.log")
    run = f.runs.row(0, named=True)
    assert run["cuda_graph_max_bs"] == 48  # cuda_graph_max_bs_decode (0.5.14+)
    assert run["draft_model_path"] == "/data/eagle3/output_10k_sglang/4"
    assert ">=0.5.19" in run["style"] and ">=0.5.14" in run["style"]
    args = json.loads(run["server_args"])
    assert (
        args["speculative_num_draft_tokens"] == 16 and args["cuda_graph_backend_decode"] == "full"
    )
    st = stage_counts(f)
    assert st[("capture_end", "target")] == 8
    assert st[("capture_end", "draft")] == 1 and st[("capture_end", "draft_extend")] == 1
    assert st[("load_end", "draft")] == 8 and st[("kv_pool", "draft")] == 8
    ends = (
        f.events.filter(pl.col("stage") == "capture_end")
        .group_by("scope")
        .agg(pl.col("elapsed_s").max())
    )
    assert dict(ends.iter_rows()) == {"target": 24.8, "draft": 9.4, "draft_extend": 6.1}
    # 0.5.10+ shard bar: one physical line of \r frames
    assert f.counts["shard_progress"] == 1
    assert f.stats["progress_frames_collapsed"] == 8 + 3 * 12


def test_0_5_4_iteration_tags_and_trailing_comma():
    _, f = parse_fixture("sglang_eagle3_cg_5dt.log")
    assert f.decode["iter"].to_list() == [40 * (i + 1) for i in range(15)]
    assert f.prefill["iter"].to_list() == [1, 4]
    assert f.decode["extra"].null_count() == 15  # the trailing `, ` leaves nothing behind
    assert f.decode["cuda_graph"].to_list() == [True] * 15
    st = stage_counts(f)
    assert st[("capture_end", "draft")] == 8 and st[("capture_end", "draft_extend")] == 8
    assert f.counts["capture_bs_list"] == 1


def test_0_5_11_milliseconds_and_pending_token_extra():
    _, f = parse_fixture("sglang_eagle3_nocg_16dt_other.log")
    assert str(f.runs["started_at"][0]) == "2026-05-10 09:12:03.481000"
    assert f.decode["ts"].dt.microsecond().max() > 0
    assert f.prefill["extra"].to_list() == ['{"#pending-token": 0}'] * 2
    assert f.prefill["input_throughput"].to_list()[1] == pytest.approx(1030.51, abs=1e-2)


def test_failure_in_load_kv_pool_oom():
    _, f = parse_fixture("sglang_fail_load_kv_oom.log")
    tb = f.errors.filter(pl.col("kind") == "traceback")
    assert tb["rank"].to_list() == ["TP0", "TP1"]
    assert tb["exc_type"].to_list() == ["RuntimeError"] * 2
    assert tb["message"][0].startswith(
        "Not enough memory. Please try to increase --mem-fraction-static."
    )
    assert tb.select("line", "last_line").rows() == [(10, 24), (25, 39)]
    assert tb["component"].to_list() == ["Scheduler", "Scheduler"]
    kinds = f.errors.filter(pl.col("kind") != "traceback")["kind"].to_list()
    assert kinds == ["sigquit", "scheduler_dead", "exit_code"]
    assert set(f.events["stage"]) == {
        "server_args",
        "dist_init_begin",
        "dist_init_end",
        "load_begin",
        "load_end",
    }


def test_failure_in_capture_keeps_the_chained_exception_and_hints():
    data, f = parse_fixture("sglang_fail_capture.log")
    tb = f.errors.filter(pl.col("kind") == "traceback").row(0, named=True)
    # the last exception of the chain, not the first one
    assert tb["exc_type"] == "Exception"
    assert tb["message"].startswith(
        "Capture cuda graph failed: CUDA error: operation not permitted"
    )
    assert (tb["line"], tb["last_line"]) == (12, 47)
    assert "During handling of the above exception" in tb["text"]
    assert "Possible solutions:" in tb["text"] and "Not recommonded" in tb["text"]
    assert f.counts["traceback"] == 35
    assert "unknown_bare" not in f.counts
    prog = f.events.filter(pl.col("stage") == "capture_progress")["detail"].to_list()
    assert prog == ["2/23"]  # the bar froze at its last frame
    assert sum(f.counts.values()) == physical_lines(data)


def test_failure_at_runtime_after_ready():
    _, f = parse_fixture("sglang_fail_runtime_ima.log")
    tb = f.errors.filter(pl.col("kind") == "traceback")
    assert tb["rank"].to_list() == ["TP0", "TP3"]
    assert set(tb["message"]) == {"CUDA error: an illegal memory access was encountered"}
    assert tb["exc_type"].to_list() == ["torch.AcceleratorError"] * 2
    ready_line = f.events.filter(pl.col("stage") == "ready")["line"][0]
    assert tb["line"].min() > ready_line
    assert len(f.decode) == 3
    assert f.errors.filter(pl.col("kind") == "sigquit").height == 1


def test_two_launches_appended_are_two_runs_P14():
    _, f = parse_fixture("sglang_two_launches.log")
    assert f.runs.select("run_index", "first_line", "last_line").rows() == [(0, 1, 26), (1, 27, 52)]
    assert f.runs["mem_fraction"].to_list() == [0.88, 0.8]
    med = f.decode.group_by("run_index").agg(pl.col("gen_throughput").median()).sort("run_index")
    assert med["gen_throughput"].to_list() == pytest.approx([61.0, 64.0], abs=1e-3)
    assert f.decode["rank"].unique().to_list() == [""]  # tp=1 from 0.4.7: no rank tag
    assert f.events.filter(pl.col("stage") == "ready")["run_index"].to_list() == [0, 1]


def test_config_from_file_name_when_no_server_args():
    _, f = parse_fixture("sglang_eagle3_cg_3step.log")
    run = f.runs.row(0, named=True)
    assert run["config_source"] == "filename"
    assert (run["spec_algorithm"], run["num_steps"], run["cuda_graph"]) == ("EAGLE3", 3, True)
    assert run["server_args"] is None and run["model_path"] is None
    assert f.decode["accept_len"].mean() == pytest.approx(2.1, abs=1e-3)


def test_name_pattern_overrides_the_table():
    data = (FIX / "sglang_eagle3_cg_3step.log").read_bytes()
    f = parse_bytes(data, "run-s7-k2.log", name_pattern=r"s(?P<num_steps>\d+)-k(?P<topk>\d+)")
    run = f.runs.row(0, named=True)
    assert (run["num_steps"], run["topk"], run["cuda_graph"]) == (7, 2, None)


def test_baseline_name_is_not_counted_as_a_config_source():
    _, f = parse_fixture("sglang_baseline.log")
    assert f.runs["config_source"][0] == "server_args"


# -- edge cases ------------------------------------------------------------------------------
def test_ansi_colours_and_tqdm_bars_P06_P07():
    data, f = parse_fixture("edge_ansi_tqdm.log")
    assert f.stats["ansi_stripped"] > 0
    assert not f.lines["text"].str.contains("\x1b").any()
    assert f.counts["deprecated"] == 1
    assert f.counts["capture_progress"] == 3 and f.counts["shard_progress"] == 1
    assert f.stats["progress_frames_collapsed"] == 4 + 3 * 6
    assert f.decode.row(0, named=True)["gen_throughput"] == pytest.approx(201.3, abs=1e-3)
    assert stage_counts(f)[("uvicorn_started", "")] == 1  # coloured `INFO:` still matched
    details = f.events.filter(pl.col("stage") == "capture_progress")["detail"].to_list()
    assert details == ["bs=48 6/6"] * 3
    assert sum(f.counts.values()) == physical_lines(data)


def test_crlf_gives_the_same_records_as_lf_P05():
    crlf = (FIX / "edge_crlf.log").read_bytes()
    assert b"\r\n" in crlf
    a = parse_bytes(crlf, "edge_crlf.log")
    b = parse_bytes(crlf.replace(b"\r\n", b"\n"), "edge_crlf.log")
    for name in ("runs", "events", "decode", "prefill", "errors", "lines"):
        assert getattr(a, name).equals(getattr(b, name)), name
    assert a.counts == b.counts
    assert a.decode["gen_throughput"].to_list() == pytest.approx([812.45, 815.05], abs=1e-2)


def test_interleaved_ranks_in_any_tag_order_P08():
    _, f = parse_fixture("edge_interleaved_ranks.log")
    assert set(f.decode["rank"]) == {"DP0 PP0 TP0 EP0", "DP1 PP0 TP2 EP2"}
    assert f.runs.row(0, named=True)["dp_size"] == 2
    loads = f.events.filter(pl.col("stage") == "load_end")
    assert sorted(loads["rank"]) == [f"DP{i // 2} PP0 TP{i} EP{i}" for i in range(4)]
    tb = f.errors.filter(pl.col("kind") == "traceback")
    assert tb.select("rank", "ambiguous", "exc_type").rows() == [
        ("DP0 PP0 TP1 EP1", True, None),
        ("DP1 PP0 TP3 EP3", False, "RuntimeError"),
    ]


def test_line_cut_in_the_middle_and_no_final_newline_P04():
    data, f = parse_fixture("edge_cut_line.log")
    assert not data.endswith(b"\n")
    assert f.stats["partial_lines"] == 1
    cut = f.decode.filter(pl.col("token") == 600).row(0, named=True)
    assert cut["accept_len"] is None and cut["gen_throughput"] is None
    assert json.loads(cut["extra"]) == {"_unparsed": ["accept le"]}
    assert f.decode["gen_throughput"].drop_nulls().to_list() == pytest.approx(
        [80.1, 81.3], abs=1e-3
    )
    last = f.events.filter(pl.col("stage") == "load_begin").row(0, named=True)
    assert last["line"] == 6 and last["avail_mem_gb"] is None  # "avail mem=1" lost its unit
    assert sum(f.counts.values()) == 6


def test_container_prefix():
    _, f = parse_fixture("edge_container_prefix.log")
    assert f.runs.row(0, named=True)["tp_size"] == 2
    assert f.decode["rank"].to_list() == ["TP0", "TP0"]
    assert str(f.decode["ts"][0]) == "2026-02-25 15:01:50"
    assert sorted(f.events.filter(pl.col("stage") == "load_end")["rank"]) == ["TP0", "TP1"]
    assert not [k for k in f.counts if k.startswith("unknown")]


def test_python_logging_fork_prefixes():
    _, f = parse_fixture("edge_pylogging_fork.log")
    run = f.runs.row(0, named=True)
    assert (run["model_path"], run["num_steps"]) == ("/models/Qwen3-8B", 3)
    assert str(run["started_at"]) == "2026-06-07 10:59:30.101000"
    assert [str(t) for t in f.decode["ts"]] == ["2026-06-07 11:00:01.250000", "2026-06-07 11:00:02"]
    assert f.decode["accept_len"].to_list() == pytest.approx([3.1, 3.3], abs=1e-3)
    assert f.events.filter(pl.col("stage") == "load_end").height == 1
    assert f.counts["generic_warning"] == 1


def test_time_only_prefix_largest_len_cache_hit_rate_P13():
    data = (FIX / "edge_time_only_2024.log").read_bytes()
    p = LogParser("edge_time_only_2024.log", date_hint="2024-09-01")
    f = Frames.concat([p.feed(data), p.finish()])
    assert [str(t) for t in f.decode["ts"]] == ["2024-09-01 04:40:55", "2024-09-01 04:40:56"]
    assert str(f.runs["started_at"][0]) == "2024-09-01 04:40:50"
    assert json.loads(f.decode["extra"][1]) == {"largest-len": 0}
    assert f.decode["accept_len"].to_list()[1] == pytest.approx(1.85, abs=1e-3)
    assert json.loads(f.prefill["extra"][0]) == {"cache hit rate": 20.0}
    assert f.prefill.row(0, named=True)["cached_token"] == 3


def test_npu_cpu_graph_and_pd_disaggregation_fields():
    _, f = parse_fixture("edge_npu_pd.log")
    assert f.decode["cuda_graph"].to_list() == [
        True,
        False,
    ]  # `npu graph: True`, `cpu graph: False`
    assert json.loads(f.decode["extra"][0]) == {
        "pre-allocated usage": 0.02,
        "#prealloc-req": 1,
        "#transfer-req": 2,
        "#retracted-req": 0,
    }
    assert json.loads(f.prefill["extra"][0]) == {"#prealloc-req": 0, "#inflight-req": 1}
    cap = f.events.filter(pl.col("stage") == "capture_end").row(0, named=True)
    assert cap["elapsed_s"] == 12.5 and cap["scope"] == "target"
    assert str(f.decode["ts"][0]) == "2026-01-10 08:01:02.375000"


def test_empty_input_P01():
    f = parse_bytes(b"", "empty.log")
    assert f.runs.is_empty() and f.decode.is_empty()
    assert sum(f.counts.values()) == 0


def test_unknown_lines_are_counted_not_dropped():
    f = parse_text("[2025-01-01 00:00:00 TP0] something new\nbare words\n\n")
    assert f.counts == {"unknown_prefixed": 1, "unknown_bare": 1, "blank": 1}
    assert f.lines["kind"].to_list() == ["unknown", "unknown"]


def test_nul_bytes_and_invalid_utf8_P09_P10():
    data = (
        b"[2025-01-01 00:00:00] The server is fired up and ready to roll!\nok \xff\xfe\n"
        + b"\0" * 64
    )
    f = parse_bytes(data)
    assert f.stats["nul_bytes"] == 64 and f.stats["decode_errors"] == 2
    assert sum(f.counts.values()) == physical_lines(data)


def test_secrets_in_server_args_are_redacted():
    f = parse_text(
        "[2025-01-01 00:00:00] server_args=ServerArgs(model_path='m', api_key='sk-abcdefghijklmnopqrstuvwxyz', port=1)\n"
    )
    assert "sk-abc" not in f.runs["server_args"][0] and "sk-abc" not in f.lines["text"][0]
    assert "«redacted:" in f.runs["server_args"][0]


def test_parse_server_args_both_forms_and_cut_line():
    repr_form = "ServerArgs(model_path='a,b', tp_size=8, cuda_graph_bs=[1, 2], json_model_override_args='{}', x=None)"
    assert parse_server_args(repr_form) == {
        "model_path": "a,b",
        "tp_size": 8,
        "cuda_graph_bs": [1, 2],
        "json_model_override_args": "{}",
        "x": None,
    }
    assert parse_server_args("{'model_path': 'm', 'tp_size': 2, 'd': {'k': 1}}") == {
        "model_path": "m",
        "tp_size": 2,
        "d": {"k": 1},
    }
    assert parse_server_args("ServerArgs(model_path='m', tp_si") == {"model_path": "m"}


def test_rules_are_a_table_with_unique_names():
    names = [r.name for r in RULES]
    assert len(names) == len(set(names)) > 40
