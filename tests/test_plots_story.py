"""The seed session as SGLang logs (helpers shared by the plot, report and advisor tests).

``write_log`` writes one launch in the 0.5.5+ log style (server_args, startup stages, Decode
batch lines); ``story_store`` ingests the seed story: the 90 tok/s baseline, EAGLE-3 runs at
53.2, 50.5 (another drafter), 74.9 and 82.3 tok/s, and the 2step launch that died.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import polars as pl

from forensics.ingest import ingest
from forensics.store import Store

T0 = dt.datetime(2026, 2, 25, 9, 0, 0)
DRAFTER = "/data/eagle3/output_10k_sglang/4"
OTHER_DRAFTER = "/models/published/EAGLE3-Kimi-K2"


def log_text(
    start: dt.datetime,
    *,
    spec: bool = True,
    cg: bool = True,
    steps: int = 3,
    topk: int = 4,
    dt_tokens: int = 5,
    accept: float = 2.4,
    tok: float = 80.0,
    n: int = 12,
    fail: str | None = None,
    bs: int = 1,
    drafter: str = DRAFTER,
    jitter: float = 0.5,
    model: str = "/models/Kimi-K2.5",
    tp: int = 8,
    gpu: str | None = None,
) -> str:
    def ts(sec: float) -> str:
        return (start + dt.timedelta(seconds=sec)).strftime("%Y-%m-%d %H:%M:%S")

    algo = "'EAGLE3'" if spec else "None"
    draft = f"'{drafter}'" if spec else "None"
    sp = (steps, topk, dt_tokens) if spec else (None, None, None)
    lines = [
        f"[{ts(0)}] server_args=ServerArgs(model_path='{model}', "
        f"speculative_algorithm={algo}, speculative_draft_model_path={draft}, "
        f"speculative_num_steps={sp[0]}, speculative_eagle_topk={sp[1]}, "
        f"speculative_num_draft_tokens={sp[2]}, disable_cuda_graph={not cg}, tp_size={tp}, "
        "port=30000)",
        f"[{ts(2)} TP0] Init torch distributed begin.",
        f"[{ts(5)} TP0] Init torch distributed ends. mem usage=0.50 GB",
        f"[{ts(5)} TP0] Load weight begin. avail mem=139.00 GB",
    ]
    if fail == "load":
        lines += [
            f"[{ts(60)} TP0] Scheduler hit an exception: Traceback (most recent call last):",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        ]
        return "\n".join(lines) + "\n"
    lines += [
        f"[{ts(120)} TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, "
        "avail mem=60.00 GB, mem usage=79.00 GB.",
        f"[{ts(121)} TP0] KV Cache is allocated. #tokens: 400000, KV size: 30.00 GB",
        f"[{ts(122)} TP0] Memory pool end. avail mem=28.00 GB",
    ]
    if cg:
        lines.append(
            f"[{ts(123)} TP0] Capture cuda graph begin. This can take up to several minutes. "
            "avail mem=28.00 GB"
        )
    if gpu:  # the first MoE forward looks up its kernel config, named after the GPU
        lines.append(
            f"[{ts(124)} TP0] Using default MoE kernel config. Performance might be "
            "sub-optimal! Config file not found at /usr/local/lib/python3.12/dist-packages/"
            "sglang/srt/layers/moe/fused_moe_triton/configs/triton_3_4_0/E=384,N=256,"
            f"device_name={gpu},dtype=fp8_w8a8,block_shape=[128, 128].json, you can create "
            "them with https://github.com/sgl-project/sglang/tree/main/benchmark/kernels/"
            "fused_moe_triton"
        )
    if cg:
        if fail == "capture":
            lines += [
                f"[{ts(140)} TP0] Scheduler hit an exception: Traceback (most recent call last):",
                "RuntimeError: Capture cuda graph failed: CUDA error: out of memory",
            ]
            return "\n".join(lines) + "\n"
        lines.append(
            f"[{ts(160)} TP0] Capture cuda graph end. Time elapsed: 37.00 s. mem usage=1.29 GB. "
            "avail mem=26.00 GB."
        )
    off = 160
    if spec:
        lines += [
            f"[{ts(off + 1)} TP0] Load weight begin. avail mem=26.00 GB",
            f"[{ts(off + 5)} TP0] Load weight end. type=LlamaForCausalLMEagle3, "
            "dtype=torch.bfloat16, avail mem=25.00 GB, mem usage=1.00 GB.",
            f"[{ts(off + 6)} TP0] KV Cache is allocated. #tokens: 400000, KV size: 1.00 GB",
            f"[{ts(off + 6)} TP0] Memory pool end. avail mem=24.00 GB",
        ]
        if cg:
            lines += [
                f"[{ts(off + 7)} TP0] Capture draft cuda graph begin. This can take up to "
                "several minutes. avail mem=24.00 GB",
                f"[{ts(off + 20)} TP0] Capture draft cuda graph end. Time elapsed: 13.00 s. "
                "mem usage=0.50 GB. avail mem=23.50 GB.",
                f"[{ts(off + 21)} TP0] Capture draft extend cuda graph begin. This can take up "
                "to several minutes. avail mem=23.50 GB",
                f"[{ts(off + 30)} TP0] Capture draft extend cuda graph end. Time elapsed: 9.00 s."
                " mem usage=0.50 GB. avail mem=23.00 GB.",
            ]
        off += 30
    lines += [
        f"[{ts(off + 1)} TP0] max_total_num_tokens=400000, chunked_prefill_size=8192, "
        "max_prefill_tokens=16384, max_running_requests=48, context_len=131072, "
        "available_gpu_mem=23.00 GB",
        f"[{ts(off + 2)}] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to "
        "quit)",
        f"[{ts(off + 5)}] The server is fired up and ready to roll!",
    ]
    if fail == "runtime":
        lines += [
            f"[{ts(off + 9)} TP0] Scheduler hit an exception: Traceback (most recent call last):",
            "RuntimeError: CUDA error: an illegal memory access was encountered",
        ]
        return "\n".join(lines) + "\n"
    for i in range(n):
        a = (
            f"accept len: {accept:.2f}, accept rate: {(accept - 1) / max(1, dt_tokens - 1):.2f}, "
            if spec
            else ""
        )
        g = tok + ((i % 3) - 1) * jitter
        lines.append(
            f"[{ts(off + 10 + 4 * i)} TP0] Decode batch, #running-req: {bs}, #token: "
            f"{500 + 40 * i}, token usage: 0.01, {a}cuda graph: {cg}, gen throughput "
            f"(token/s): {g:.2f}, #queue-req: 0, "
        )
    return "\n".join(lines) + "\n"


def write_log(folder: Path, name: str, minutes: float, **kw) -> Path:
    path = folder / f"{name}.log"
    path.write_text(log_text(T0 + dt.timedelta(minutes=minutes), **kw))
    return path


# The seed session, in launch order: (file name, log options).
STORY = [
    ("sglang_baseline", {"spec": False, "tok": 90.0}),
    ("sglang_eagle3_nocg_16dt", {"cg": False, "steps": 5, "topk": 8, "dt_tokens": 16,
                                 "accept": 3.10, "tok": 53.2}),
    ("sglang_eagle3_nocg_published", {"cg": False, "steps": 5, "topk": 8, "dt_tokens": 16,
                                      "accept": 2.90, "tok": 50.5, "drafter": OTHER_DRAFTER}),
    ("sglang_eagle3_cg_16dt", {"steps": 5, "topk": 8, "dt_tokens": 16, "accept": 3.10,
                               "tok": 74.9}),
    ("sglang_eagle3_cg_5dt", {"steps": 3, "topk": 4, "dt_tokens": 5, "accept": 2.38,
                              "tok": 82.3}),
    ("sglang_eagle3_cg_2step", {"steps": 2, "topk": 4, "dt_tokens": 5, "fail": "capture"}),
]  # fmt: skip


def story_store(tmp_path: Path, runs=STORY, store_dir: str = "store") -> Store:
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    paths = [str(write_log(logs, name, 20 * i, **kw)) for i, (name, kw) in enumerate(runs)]
    store = Store.open(tmp_path / store_dir)
    ingest(store, paths)
    return store


def many_runs(n: int = 30) -> list[tuple[str, dict]]:
    """n synthetic runs: a long tuning session with failures sprinkled in."""
    out: list[tuple[str, dict]] = [("sglang_baseline", {"spec": False, "tok": 90.0})]
    for i in range(1, n):
        steps, topk, dtk = 2 + i % 4, (1, 2, 4, 8)[i % 4], (4, 5, 8, 16)[i % 4]
        kw: dict = {
            "steps": steps,
            "topk": topk,
            "dt_tokens": dtk,
            "cg": i % 5 != 1,
            "accept": 2.0 + (i % 7) * 0.2,
            "tok": 55.0 + i * 1.1,
            "n": 4,
        }
        if i % 9 == 4:
            kw["fail"] = "capture"
        if i % 11 == 7:
            kw["fail"] = "load"
        out.append((f"sglang_eagle3_run{i:02d}_{steps}step_{dtk}dt", kw))
    return out  # fmt: skip


def test_story_store_holds_the_seed_session(tmp_path):
    """The helper's story reads back as the seed session: six runs, one failed in capture."""
    from forensics.advise import run_points

    pts = run_points(story_store(tmp_path))
    assert pts["name"].to_list() == [name for name, _ in STORY]
    assert pts.filter(pl.col("failed"))["name"].to_list() == ["sglang_eagle3_cg_2step"]
    tok = dict(zip(pts["name"].to_list(), pts["tok_s"].to_list()))
    assert round(tok["sglang_eagle3_cg_5dt"], 1) == 82.3
    assert round(tok["sglang_baseline"], 1) == 90.0
    labels = dict(zip(pts["name"].to_list(), pts["label"].to_list()))
    # two drafters in the session: each speculative label says which one (D1, D2)
    assert labels["sglang_eagle3_cg_5dt"] == "cg 5dt topk4 3step D1"
    assert labels["sglang_eagle3_nocg_published"] == "nocg 16dt topk8 5step D2"
    assert labels["sglang_baseline"] == "baseline cg"
