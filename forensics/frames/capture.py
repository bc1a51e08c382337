"""Frames of the capture phase: CUDA/NPU/CPU-graph capture, torch.compile, the warm-up request (rows of forensics.frames.FRAMES)."""

from __future__ import annotations

from typing import Any

CAPTURE: list[dict[str, Any]] = [
    {
        "func": "init_cuda_graphs",
        "phase": "capture",
        "where": "model runner starts graph capture",
        "seen": "0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "init_device_graphs",
        "phase": "capture",
        "where": "model runner starts device-graph capture",
        "seen": "0.5.2 0.5.9",
    },
    {
        "func": "init_piecewise_cuda_graphs",
        "phase": "capture",
        "where": "piecewise CUDA-graph capture",
        "seen": "0.5.9",
    },
    {
        "func": "capture",
        "phase": "capture",
        "where": "graph runner captures every batch size",
        "seen": "0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "capture_one_batch_size",
        "phase": "capture",
        "where": "graph runner captures one batch size",
        "seen": "0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "_capture_graph",
        "phase": "capture",
        "where": "one graph's capture",
        "seen": "0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "_wait_and_warmup",
        "phase": "capture",
        "where": "the launcher's warm-up request (and PD warm-up) before ready",
        "seen": "0.1.14 0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "_execute_server_warmup",
        "phase": "capture",
        "where": "the warm-up request before ready",
        "seen": "0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "compile_fx",
        "phase": "capture",
        "where": "torch.compile (inductor) at capture (not SGLang)",
        "seen": "",
    },
    {
        "file": "cuda_graph_runner.py",
        "phase": "capture",
        "where": "CUDA-graph runner (capture; its replay is runtime)",
        "seen": "0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "file": "graph_runner.py",
        "phase": "capture",
        "where": "NPU/CPU/piecewise graph runners",
        "seen": "0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "file": "torch/_dynamo/",
        "phase": "capture",
        "where": "torch.compile (not SGLang)",
        "seen": "",
    },
    {
        "file": "torch/_inductor/",
        "phase": "capture",
        "where": "torch.compile (not SGLang)",
        "seen": "",
    },
]
