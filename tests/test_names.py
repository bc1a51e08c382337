"""parsers.names: configuration from a log's file name (seed-session convention)."""

from __future__ import annotations

import pytest

from parsers.names import config_from_name


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
