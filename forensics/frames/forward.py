"""Frames of the forward phase: the model's own forward pass (model files, layers, kernels), caller unknown (rows of forensics.frames.FRAMES)."""

from __future__ import annotations

from typing import Any

FORWARD: list[dict[str, Any]] = [
    {
        "file": "/srt/models/",
        "phase": "forward",
        "where": "a model's forward (its load_weights is load, above)",
        "seen": "0.1.14 0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "file": "/srt/layers/",
        "phase": "forward",
        "where": "layers and kernels of the forward pass",
        "seen": "0.1.14 0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "file": "triton/compiler/",
        "phase": "forward",
        "where": "Triton JIT-compiling a kernel at its first call (not SGLang)",
        "seen": "",
    },
    {
        "file": "triton/runtime/",
        "phase": "forward",
        "where": "Triton launching a kernel (not SGLang)",
        "seen": "",
    },
]
