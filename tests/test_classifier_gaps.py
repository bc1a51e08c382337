"""Issue 14's classifier gaps, each class with cases of our own (texts written here in SGLang's
and other tools' formats, not copied)."""

from __future__ import annotations

from pathlib import Path

import pytest

from forensics import classifier, frames, signatures

ROOT = Path(__file__).resolve().parent.parent
NOT_SGLANG = ROOT / "fixtures" / "not_sglang"

LOADING = """\
[2026-11-02 08:00:00] server_args=ServerArgs(model_path='m', tp_size=1, port=30000)
[2026-11-02 08:00:01 TP0] Init torch distributed begin.
[2026-11-02 08:00:02 TP0] Init torch distributed ends. mem usage=0.50 GB
[2026-11-02 08:00:02 TP0] Load weight begin. avail mem=79.00 GB
"""


@pytest.fixture(scope="module")
def model():
    return classifier.load_model(None)


# -- a stop mid-stage is confident only when nothing else follows ---------------------------
@pytest.mark.parametrize(
    "after",
    [
        "root@gpu-host:~# nvidia-smi --query-gpu=memory.used --format=csv\nmemory.used [MiB]\n",
        "+ sleep 30\n+ curl -s http://127.0.0.1:30000/health\ncurl: (7) Failed to connect\n",
        (NOT_SGLANG / "pytest.log").read_text(),
        (NOT_SGLANG / "ollama.log").read_text(),
    ],
    ids=["shell prompt", "bash -x trace", "pytest", "another server"],
)
def test_a_stop_mid_stage_then_other_programs_text_is_undecided(model, after):
    (v,) = classifier.classify_text(LOADING + after, model)
    assert v.phase == "load" and not v.decided and v.basis == "stopped_then_text"
    assert v.confidence < 0.6


@pytest.mark.parametrize(
    "after",
    [
        "",
        # the server's own unprefixed output: Gloo, a tqdm bar, a Python warning's source line
        "[Gloo] Rank 0 is connected to 7 peer ranks. Expected number of connected peer ranks is : 7\n",
        "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:03<00:03,  3.10s/it]\n",
        "  warnings.warn('resource_tracker: There appear to be %d '\n",
    ],
    ids=["nothing", "gloo", "tqdm", "warning source"],
)
def test_a_stop_mid_stage_with_only_the_servers_output_stays_decided(model, after):
    (v,) = classifier.classify_text(LOADING + after, model)
    assert (v.phase, v.decided, v.basis) == ("load", True, "stage")


# -- an error line no catalog entry knows decides only when the process then exited ---------
UNKNOWN_ERROR = "[2026-11-02 08:00:03 TP0] error: plugin frobnicator returned 7\n"
GOES_ON = "[2026-11-02 08:00:40 TP0] Load weight end. type=LlamaForCausalLM, avail mem=60.00 GB\n"


def test_an_unknown_error_line_the_server_outlived_does_not_decide(model):
    (v,) = classifier.classify_text(LOADING + UNKNOWN_ERROR + GOES_ON, model)
    assert not (v.signature or "").startswith("unknown:")
    assert all(e["line"] != 5 for e in v.evidence)


def test_an_unknown_error_line_followed_by_an_exit_decides(model):
    text = LOADING + UNKNOWN_ERROR + "[2026-11-02 08:00:04] Exit code: 1\n"
    (v,) = classifier.classify_text(text, model)
    assert v.phase == "load" and v.decided and (v.signature or "").startswith("unknown:")
    assert v.evidence[0]["line"] == 5


# -- PD: the warm-up lines printed after "ready" do not take the server back ----------------
PD_READY = """\
[2026-11-02 08:00:00] server_args=ServerArgs(model_path='m', disaggregation_mode='prefill')
[2026-11-02 08:00:02 TP0] Load weight begin. avail mem=79.00 GB
[2026-11-02 08:00:40 TP0] Load weight end. type=LlamaForCausalLM, avail mem=60.00 GB
[2026-11-02 08:01:10] Start of pd disaggregation warmup ...
[2026-11-02 08:01:30] The server is fired up and ready to roll!
[2026-11-02 08:01:30] End of prefill warmup with status 200
"""


def test_a_pd_warmup_line_after_ready_leaves_the_server_ready():
    from forensics_parsers.sglang import parse_text

    (a,) = classifier.analyses_for(parse_text(PD_READY, "pd.log"), "pd.log")
    assert [st for st, _, _ in a.stages][-2:] == ["ready", "warmup"]
    assert classifier.decide._stage_at(a, None) == "ready"
    assert a.rule_phase == "ok"


# -- teardown frames: a traceback raised while the server went down never decides ----------
TEARDOWN_TB = """\
[2026-11-02 08:00:50] Received sigquit from a child process. It usually means the child failed.
Traceback (most recent call last):
  File "/usr/lib/python3/site-packages/sglang/srt/managers/tokenizer_manager.py", line 4081, in running_phase_sigquit_handler
    kill_process_tree(os.getpid())
  File "/usr/lib/python3/site-packages/sglang/srt/utils/common.py", line 2530, in kill_process_tree
    itself.send_signal(signal.SIGQUIT)
psutil.NoSuchProcess: process no longer exists (pid=4242)
"""


def test_teardown_frames_are_in_the_frames_table():
    assert frames.phase_of_frame("sglang/srt/utils/common.py", "kill_process_tree") == "teardown"
    assert frames.phase_of_frame("x.py", "sigterm_handler") == "teardown"
    # a signal handler runs on top of whatever was running: teardown wins over the loop's frames
    stack = [
        ("sglang/srt/managers/scheduler.py", "event_loop_normal"),
        ("u.py", "kill_process_tree"),
    ]
    assert frames.phase_of(stack) == "teardown"


def test_a_traceback_of_the_teardown_is_routine(model):
    (v,) = classifier.classify_text(LOADING + GOES_ON + TEARDOWN_TB, model)
    assert v.signature != "unknown" and "NoSuchProcess" not in v.explanation
    assert v.phase == "load"


# -- NOT_SGLANG: every row has a fixture in that tool's format ---------------------------------
@pytest.mark.parametrize("row", signatures.NOT_SGLANG, ids=lambda r: r["id"])
def test_every_not_sglang_row_recognises_its_fixture(model, row):
    log = NOT_SGLANG / f"{row['id']}.log"
    (v, *_) = classifier.classify_file(log, model)
    if row.get("every"):  # no log at all: no phase (tests/test_not_sglang_text.py)
        assert (v.basis, v.phase, v.decided) == ("not_sglang", None, False), v.explanation
        assert v.explanation == f"not an SGLang server log: {row['what']}"
        return
    assert v.basis == "foreign" and not v.decided and v.confidence < 0.5, v.explanation
    assert v.explanation.startswith(f"not an SGLang server log ({row['what']})")


def test_harness_rows_do_not_claim_a_log_that_shows_sglang(model):
    pytest_out = (NOT_SGLANG / "pytest.log").read_text()
    (v,) = classifier.classify_text(LOADING + pytest_out, model)
    assert v.basis != "foreign"
