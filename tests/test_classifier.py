"""Phase classifier: held-out quality gate, fragments and prefixes, CLI classify/train/label."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics import classifier
from forensics.cli import cli

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "forensics" / "data" / "corpus"
HAND = CORPUS / "hand"


@pytest.fixture(scope="session")
def model():
    return classifier.load_model(None)  # trained once per test process, from the corpus


@pytest.fixture(scope="session")
def report():
    return classifier.evaluate()


def _labels():
    with (CORPUS / "labels.csv").open() as fh:
        return list(csv.DictReader(fh))


def test_corpus_has_every_phase_five_styles_and_150_examples():
    rows = _labels()
    assert len(rows) >= 150
    assert {r["phase"] for r in rows} == set(classifier.PHASES)
    assert len({r["style"] for r in rows if r["split"] != "hand"}) >= 5
    # the held-out split is by family: no family is in both splits
    train = {r["family"] for r in rows if r["split"] == "train"}
    test = {r["family"] for r in rows if r["split"] == "test"}
    assert test and not (train & test)
    assert {r["phase"] for r in rows if r["split"] == "test"} == set(classifier.PHASES)


def test_heldout_macro_f1_quality_gate(report):
    """Quality gate: macro-F1 over the six phases on held-out generator families >= 0.95."""
    assert report["heldout"]["macro_f1"] >= 0.95, report["heldout"]["errors"]
    assert report["cv"]["macro_f1"] >= 0.95
    assert report["hand"]["accuracy"] >= 0.9, report["hand"]["errors"]


def test_generator_is_deterministic(tmp_path):
    spec = importlib.util.spec_from_file_location("gen_corpus", ROOT / "scripts" / "gen_corpus.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.main(tmp_path)
    assert (tmp_path / "labels.csv").read_bytes() == (CORPUS / "labels.csv").read_bytes()
    for name in ("gen/kv_oom-046-1.log", "gen/capture_hang-0523-2.log", "gen/ok_serve-059-1.log"):
        assert (tmp_path / name).read_bytes() == (CORPUS / name).read_bytes()


HAND_ROWS = [r for r in _labels() if r["split"] == "hand"]


@pytest.mark.parametrize("row", HAND_ROWS, ids=[r["file"] for r in HAND_ROWS])
def test_hand_written_logs(row, model, tmp_path):
    """Real-looking logs in other prefixes (Python logging, glog, container, none) and
    fragments (the last screen, a pasted traceback)."""
    log = tmp_path / Path(row["file"]).name
    log.write_bytes((CORPUS / row["file"]).read_bytes())
    old = time.time() - 3600
    os.utime(log, (old, old))  # untouched for an hour: a log that stops mid-stage is hung
    (v,) = classifier.classify_file(log, model)
    assert v.phase == row["phase"]
    assert v.hung == (row["hung"] == "true")
    assert (v.signature or "") == row["signature"]
    assert v.evidence and all("line" in e and "text" in e for e in v.evidence)


OK_NOISY = """\
[2026-01-02 10:00:00] server_args=ServerArgs(model_path='m', tp_size=1)
[2026-01-02 10:00:01] Load weight begin. avail mem=70.00 GB
[2026-01-02 10:00:09] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=50.00 GB
[2026-01-02 10:00:10] The server is fired up and ready to roll!
/tmp/triton/k.py:3:4: error: failed to legalize operation 'tt.dot' (triton)
'--enable-flashinfer-mla' is deprecated and will be removed in a future release.
[2026-01-02 10:00:12] Received output for rid='abc' but the state was deleted in TokenizerManager.
[2026-01-02 10:00:13] Decode batch. #running-req: 1, #token: 90, token usage: 0.00, gen throughput (token/s): 90.00, #queue-req: 0
"""


def test_noise_in_a_run_that_served_is_not_the_cause(model):
    (v,) = classifier.classify_text(OK_NOISY, model)
    assert v.phase == "ok" and v.signature is None and not v.hung


FRAGMENTS = {
    # the last screen of a capture crash, no startup lines, container prefix
    "capture": (
        "svc-1  | [2025-04-28 10:00:12 TP0] Capture cuda graph begin. This can take up to "
        "several minutes. avail mem=20.31 GB\n"
        "svc-1  | [2025-04-28 10:00:40 TP0] Scheduler hit an exception: Traceback (most recent "
        "call last):\n"
        'svc-1  |   File "/x/sglang/srt/model_executor/cuda_graph_runner.py", line 3, in capture\n'
        "svc-1  |     self.capture_one_batch_size(bs, forward)\n"
        "svc-1  | Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate "
        "1.00 GiB\n"
    ),
    # a pasted runtime traceback without any prefix
    "runtime": (
        "Traceback (most recent call last):\n"
        '  File "/x/sglang/srt/managers/scheduler.py", line 9, in event_loop_normal\n'
        "    result = self.run_batch(batch)\n"
        '  File "/x/sglang/srt/speculative/eagle_worker.py", line 9, in verify\n'
        "    res = spec_info.verify(\n"
        "IndexError: index 7 is out of bounds for dimension 0 with size 4\n"
    ),
    # a fork's logging style, argument validation
    "pre-exec": (
        "2026-06-07 10:59:31,659 [ERROR] sglang.launch: boot failed\n"
        "Traceback (most recent call last):\n"
        '  File "/x/sglang/srt/server_args.py", line 9, in __post_init__\n'
        "    self._handle_speculative_decoding()\n"
        "ValueError: the draft and target disagree on vocab_size\n"
    ),
    # glog style: a log that stops mid weight load
    "load": (
        "2026-06-07 10:59:31 INFO 1234 [model_runner.py:12] Load weight begin. avail mem=70.00 GB\n"
        "Loading safetensors checkpoint shards:  10% Completed | 2/20 [00:10<01:30, 5.0s/it]\n"
    ),
    "cleanup": (
        "[2026-01-02 10:00:00] port 31005 is in use. Waiting for 1 seconds for nccl_port to be "
        "available.\n"
    ),
}


@pytest.mark.parametrize("phase", sorted(FRAGMENTS))
def test_fragments_and_prefixes(phase, model):
    vs = classifier.classify_text(FRAGMENTS[phase], model)
    assert vs[-1].phase == phase, vs[-1].explanation


def test_frames_decide_where_an_unknown_error_happened(model):
    """An error no catalog entry knows is placed by its stack, and gets a template id."""
    (v,) = classifier.classify_text(FRAGMENTS["runtime"], model)
    assert v.signature.startswith("unknown:")
    again = FRAGMENTS["runtime"].replace("index 7", "index 31").replace("size 4", "size 16")
    (w,) = classifier.classify_text(again, model)
    assert w.signature == v.signature


def test_confidence_is_a_probability(model):
    for phase, text in FRAGMENTS.items():
        v = classifier.classify_text(text, model)[-1]
        assert 0.0 < v.confidence <= 1.0, phase


def test_classify_cli_json(model):
    runner = CliRunner()
    files = [str(HAND / "kv_oom_pylog.log"), str(HAND / "port_bind_046.log")]
    res = runner.invoke(cli, ["classify", "--json", *files])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert [d["phase"] for d in data] == ["load", "cleanup"]
    keys = {
        "path",
        "run_index",
        "phase",
        "hung",
        "signature",
        "confidence",
        "evidence",
        "explanation",
        "next_steps",
    }
    assert all(keys <= set(d) for d in data)
    assert "--mem-fraction-static" in " ".join(data[0]["next_steps"])


def test_classify_missing_file_exit_3(tmp_path):
    res = CliRunner().invoke(cli, ["classify", str(tmp_path / "nope.log")], standalone_mode=True)
    assert res.exit_code != 0
    from forensics.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["classify", str(tmp_path / "nope.log")])
    assert exc.value.code == 3


def test_train_saves_json_and_learns_user_labels(tmp_path, model):
    runner = CliRunner()
    log = tmp_path / "sglang_eagle3_cg_2step.log"
    log.write_text(FRAGMENTS["runtime"])
    assert runner.invoke(cli, ["ingest", str(log)]).exit_code == 0
    res = runner.invoke(cli, ["label", "sglang_eagle3_cg_2step", "capture"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(cli, ["classify", "train", "--json"])
    assert res.exit_code == 0, res.output
    info = json.loads(res.output)
    assert info["n_user_labels"] == 1
    saved = json.loads(Path(info["path"]).read_text())  # JSON, never a pickle
    assert saved["classes"] == list(classifier.PHASES)
    # the runs table shows the user's label
    res = runner.invoke(cli, ["runs", "--json"])
    assert json.loads(res.output)[0]["phase"] == "capture"


def test_label_rejects_bad_phase_and_unknown_run(tmp_path):
    runner = CliRunner()
    assert runner.invoke(cli, ["label", "x", "exploded"]).exit_code == 2
    from forensics.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["label", "nothing", "load"])
    assert exc.value.code == 3


def test_runs_table_has_phase_hung_signature(tmp_path, model):
    runner = CliRunner()
    for name in ("watchdog_046_dump.log", "kv_oom_pylog.log", "seed_story_ok.log"):
        (tmp_path / name).write_bytes((HAND / name).read_bytes())
    assert runner.invoke(cli, ["ingest", str(tmp_path / "*.log")]).exit_code == 0
    res = runner.invoke(cli, ["runs", "--json"])
    rows = {r["name"]: r for r in json.loads(res.output)}
    assert (rows["watchdog_046_dump"]["phase"], rows["watchdog_046_dump"]["hung"]) == (
        "runtime",
        True,
    )
    assert rows["kv_oom_pylog"]["signature"] == "kv_pool_oom"
    assert rows["seed_story_ok"]["phase"] == "ok"
    # a second read is served from the verdict cache, same answers
    again = {
        r["name"]: r["phase"] for r in json.loads(runner.invoke(cli, ["runs", "--json"]).output)
    }
    assert again == {k: v["phase"] for k, v in rows.items()}


def test_a_log_still_growing_is_not_hung(tmp_path, model):
    log = tmp_path / "loading.log"
    log.write_bytes((HAND / "load_hang_shards.log").read_bytes())
    (v,) = classifier.classify_file(log, model)
    assert (v.phase, v.hung) == ("load", False)


def test_packaged_model_is_current_and_used_by_a_fresh_store(tmp_path):
    """The JSON model shipped in forensics/data matches the corpus and code; a fresh store uses it."""
    from forensics import classifier
    from forensics.store import Store

    digest = classifier.corpus_digest()
    packaged = classifier.packaged_model(digest)
    assert packaged is not None, "stale packaged model: run scripts/train_packaged_model.py"
    classifier._MODEL_CACHE.clear()
    m = classifier.load_model(Store.open(tmp_path / "fresh"))
    assert m.data == packaged.data


def test_the_model_digest_covers_every_file_of_a_package():
    """A package's digest input is every *.py under it, so a split module stays covered."""
    import forensics.sim
    from forensics import classifier

    root = Path(forensics.sim.__file__).parent
    files = classifier._source_files(forensics.sim)
    assert set(files) == set(root.rglob("*.py")) and len(files) > 1
    import forensics.errors

    assert classifier._source_files(forensics.errors) == [Path(forensics.errors.__file__)]
