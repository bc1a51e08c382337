"""parsers.names: configuration from a log's file name (seed-session convention)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forensics_parsers.names import config_from_name, name_from_flags


@pytest.mark.parametrize(
    "path, expected",
    [
        ("/data/eagle3/sglang_eagle3_cg_2step.log", {"spec_algorithm": "EAGLE3", "cuda_graph": True, "num_steps": 2}),
        ("sglang_eagle3_nocg_16dt.log", {"spec_algorithm": "EAGLE3", "cuda_graph": False, "num_draft_tokens": 16}),
        ("sglang_eagle3_cg_5dt_topk4_2step.log", {"spec_algorithm": "EAGLE3", "cuda_graph": True, "num_draft_tokens": 5, "topk": 4, "num_steps": 2}),
        ("run-dt8-k2-bs32-tp8.log.gz", {"num_draft_tokens": 8, "topk": 2, "cuda_graph_max_bs": 32, "tp_size": 8}),
        ("sglang_mtp_steps3.out", {"spec_algorithm": "EAGLE", "num_steps": 3}),
        ("sglang_baseline.log", {"spec_algorithm": None, "no_spec": True}),
        ("notes.txt", {}),
    ],
)  # fmt: skip
def test_name_table(path, expected):
    assert config_from_name(path) == expected


def test_user_pattern_replaces_the_table():
    pat = r"s(?P<num_steps>\d+)_(?P<cuda_graph>cg|nocg)_(?P<spec_algorithm>\w+)$"
    assert config_from_name("x/s3_nocg_eagle3.log", pat) == {
        "num_steps": 3,
        "cuda_graph": False,
        "spec_algorithm": "EAGLE3",
    }
    assert config_from_name("other.log", pat) == {}
    # groups that are not configuration fields are ignored
    assert config_from_name("a7.log", r"a(?P<nope>\d)") == {}


@given(
    algo=st.sampled_from(["EAGLE3", "EAGLE", "NEXTN", None]),
    steps=st.integers(1, 9),
    topk=st.integers(1, 8),
    dt=st.integers(2, 64),
    tp=st.integers(1, 8),
    cg=st.booleans(),
)
def test_name_from_flags_reads_back_as_the_same_config(algo, steps, topk, dt, tp, cg):
    argv = ["--model-path", "m", "--tp", str(tp)]
    if algo:
        argv += ["--speculative-algorithm", algo, "--speculative-num-steps", str(steps),
                 "--speculative-eagle-topk", str(topk), "--speculative-num-draft-tokens", str(dt)]  # fmt: skip
    if not cg:
        argv.append("--disable-cuda-graph")
    name = name_from_flags(argv)
    cfg = config_from_name(name + ".log")
    assert cfg.get("tp_size") == (tp if tp > 1 else None)
    if algo is None:
        assert name.startswith("sglang_baseline") and cfg["no_spec"] is True
    else:
        assert cfg["spec_algorithm"] == {"NEXTN": "EAGLE"}.get(algo, algo)
        assert (cfg["num_steps"], cfg["topk"], cfg["num_draft_tokens"]) == (steps, topk, dt)
        assert cfg["cuda_graph"] is cg
