"""The signature catalog: every entry hit by a real text, noise never taken for a cause."""

from __future__ import annotations

import pytest

from forensics import signatures as sigs
from tests.conftest import FIXTURES

# One real (or reference §4) text per catalog entry.
SAMPLES = {
    "arg_error": "launch_server.py: error: argument --speculative-algorithm: invalid choice: 'EAGLE4'",
    "invalid_server_args": "ValueError: speculative_eagle_topk > 1 with page_size > 1 is unstable",
    "undefined_symbol": "ImportError: /x/sgl_kernel/common_ops.abi3.so: undefined symbol: _ZN3c10",
    "import_error": "ModuleNotFoundError: No module named 'sgl_kernel'",
    "missing_binary": "bash: line 1: python3.12: command not found",
    "model_path_not_found": "OSError: /data/m is not a local folder and is not a valid model "
    "identifier listed on 'https://huggingface.co/models'",
    "port_in_use": "ERROR:    [Errno 98] error while attempting to bind on address "
    "('127.0.0.1', 30000): address already in use",
    "orphan_gpu_process": "The memory capacity is unbalanced. Some GPUs may be occupied by "
    "other processes. min_per_gpu_memory=10.0",
    "kv_pool_oom": "RuntimeError: Not enough memory. Please try to increase "
    "--mem-fraction-static. Current value: mem_fraction_static=0.88",
    "capture_failed": "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate",
    "warmup_failed": "Initialization failed. warmup error: Traceback (most recent call last):",
    "weight_load_oom": '  File "/x/sglang/srt/model_executor/model_runner.py", line 7, in '
    "load_model\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    "nccl_timeout": "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, "
    "OpType=ALLREDUCE) ran for 600001 milliseconds before timing out.",
    "nccl_error": "RuntimeError: NCCL error: unhandled system error",
    "illegal_memory_access": "RuntimeError: CUDA error: an illegal memory access was encountered",
    "device_side_assert": "torch.AcceleratorError: CUDA error: device-side assert triggered",
    "watchdog_timeout": "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
    "detokenizer_heartbeat": "Health check failed. Server couldn't get a response from "
    "detokenizer for last 20 seconds. tic start time: 10:00:00. last_heartbeat time: 09:59:40",
    "segfault": "Fatal Python error: Segmentation fault",
    "disk_full": "OSError: [Errno 28] No space left on device: '/root/.triton/cache/x.cubin'",
    "cuda_oom": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 300.00 GiB.",
    "scheduler_died": "Rank 0 scheduler died during initialization (exit code: -9). If exit code "
    "is -9 (SIGKILL), a common cause is the OS OOM killer.",
}


def test_every_catalog_entry_has_a_sample():
    assert set(SAMPLES) == {s.id for s in sigs.SIGNATURES}


@pytest.mark.parametrize("sid", sorted(SAMPLES))
def test_catalog_entry_hit_by_its_text(sid):
    hit = sigs.best(sigs.match(SAMPLES[sid]))
    assert hit is not None and hit.signature.id == sid
    assert sigs.BY_ID[sid].remedies and sigs.BY_ID[sid].explanation


def _evidence(name):
    return (FIXTURES / "evidence" / name).read_text()  # copies of ../shared/evidence/h200


def test_h200_torch_oom_is_cuda_oom_and_weight_oom_on_load_frames(fixtures_dir):
    text = _evidence("torch.cuda-oom.txt")
    assert sigs.best(sigs.match(text)).signature.id == "cuda_oom"
    on_load = text.replace(
        '  File "<string>", line 3, in <module>',
        '  File "/x/sglang/srt/model_loader/loader.py", line 3, in load_model',
    )
    assert sigs.best(sigs.match(on_load)).signature.id == "weight_load_oom"


def test_h200_capture_invalidated_is_capture_failed_with_its_cause(fixtures_dir):
    hit = sigs.best(sigs.match(_evidence("torch.capture-invalidated.txt")))
    assert hit.signature.id == "capture_failed"
    assert hit.cause["id"] == "stream_capture_invalidated"


def test_h200_cupy_illegal_address(fixtures_dir):
    hit = sigs.best(sigs.match(_evidence("cupy.illegal-address.txt")))
    assert hit.signature.id == "illegal_memory_access"


def test_h200_device_assert(fixtures_dir):
    hit = sigs.best(sigs.match(_evidence("torch.device-assert.txt")))
    assert hit.signature.id == "device_side_assert"


def test_capture_failed_causes_oom_and_illegal_address():
    oom = sigs.best(sigs.match("Exception: Capture cuda graph failed: CUDA out of memory."))
    assert oom.cause["id"] == "oom"
    ill = sigs.best(
        sigs.match(
            "Exception: Capture CUDA graph failed: CUDA error: an illegal "
            "memory access was encountered"
        )
    )
    assert ill.signature.id == "capture_failed" and ill.cause["id"] == "illegal_address"


@pytest.mark.parametrize(
    "text",
    [
        "/tmp/triton/kernel.py:41:12: error: operation scheduled before its operands",
        "'--disable-cuda-graph' is deprecated and will be removed in a future release.",
        "Received output for rid='a1b2' but the state was deleted in TokenizerManager.",
    ],
)
def test_noise_is_never_a_cause(text):
    assert sigs.noise_kind(text) is not None
    assert sigs.match(text) == []


def test_unknown_errors_group_by_template():
    a = "KeyError: 'model.layers.12.self_attn.qkv_proj.weight' at /data/a/b.safetensors 0x7f00"
    b = "KeyError: 'model.layers.77.self_attn.qkv_proj.weight' at /mnt/c/d.safetensors 0x1234"
    assert sigs.unknown_id(a) == sigs.unknown_id(b)
    assert sigs.unknown_id(a) != sigs.unknown_id("IndexError: index 3 is out of bounds")


def test_remedy_placeholders_render():
    assert "0.90" in sigs.render("raise it ({mem_up})", mem_up="--mem-fraction-static 0.90")
    assert "{" not in sigs.render(sigs.BY_ID["kv_pool_oom"].remedies[0])


# Issue 15 (logs as they really are): the verdict step matches signatures only on the lines
# ``may_match`` keeps; a line it drops must hit nothing.
def _lines_of(paths) -> list[str]:
    out: list[str] = []
    for p in paths:
        out += p.read_text(errors="replace").split("\n")
    return out


def test_the_signature_prefilter_keeps_every_line_a_signature_hits():
    import polars as pl

    from scripts.real_fields import require_corpus

    texts = _lines_of(sorted(require_corpus().glob("*.log")) + sorted(FIXTURES.rglob("*.log")))
    texts += [line for s in SAMPLES.values() for line in s.split("\n")]
    texts += ["node01:4100:4300 [0] NCCL INFO Connected all rings", "caf\u00e9 \u2192", None]
    may = pl.DataFrame({"t": texts}).select(sigs.may_match(pl.col("t"))).to_series().to_list()
    dropped = [t for t, m in zip(texts, may, strict=True) if not m]
    assert [t for t in dropped if sigs.match(t or "")] == []
    assert "node01:4100:4300 [0] NCCL INFO Connected all rings" in dropped
    assert "caf\u00e9 \u2192" not in dropped  # not plain ASCII: always matched
    assert len(dropped) > len(texts) // 2  # it spares most lines


# Issue 15 (costs outside the parse): the verdict step runs SERVING_PROOF's patterns only on
# the lines ``may_prove`` keeps (each row's ``needs``); a line it drops must prove nothing.
def test_the_proof_sieve_keeps_every_line_a_serving_proof_pattern_matches():
    import re

    import polars as pl

    from scripts.real_fields import require_corpus
    from tests.test_classifier_oos import CASES

    texts = _lines_of(sorted(require_corpus().glob("*.log")) + sorted(FIXTURES.rglob("*.log")))
    texts += [line for case in CASES.values() for line in case.split("\n")]
    texts += ["Mean TPOT (ms):  12.5", "| gsm8k | 3 | flexible | 5 | exact_match | 0.8 |", None]
    may = pl.DataFrame({"t": texts}).select(sigs.may_prove(pl.col("t"))).to_series().to_list()
    for row in sigs.SERVING_PROOF:
        rx = re.compile(row["pattern"])
        hit = [t for t in texts if t and rx.search(t)]
        assert hit, row["id"]  # every row is exercised here
        for t in hit:  # each line the row's pattern matches holds one of its own needs ...
            assert any(lit in t for lit in row["needs"]), (row["id"], t)
    dropped = [t for t, m in zip(texts, may, strict=True) if not m]
    assert sigs.serving_proof((i, t or "") for i, t in enumerate(dropped)) == []  # ... is kept
    assert len(dropped) > 0.9 * len(texts)  # and it spares nearly every line


# Issue 15 (the verdict step): ``harness_end`` searches HARNESS_END only in the lines holding
# one of HARNESS_END_NEEDS; it must find every line the pattern alone finds.
def test_harness_end_finds_every_line_its_pattern_matches():
    from scripts.real_fields import require_corpus

    texts = _lines_of(sorted(require_corpus().glob("*.log")) + sorted(FIXTURES.rglob("*.log")))
    texts += ["Ran 12 tests in 3.402s", "  Ran 1 test in 0.001s  ", "Finished test case test_a"]
    lines = [(i, "unknown", t or "") for i, t in enumerate(texts)]
    ends = [li for li, _, t in lines if sigs.HARNESS_END.search(t.strip())]
    assert len(ends) >= 3
    for li in ends:  # the first of the lines from there on is that one
        assert sigs.harness_end(lines[li:]) == li
    assert sigs.harness_end(lines[ends[-1] + 1 :]) is None
