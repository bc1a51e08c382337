"""Causes inside a failed CUDA-graph capture (data)."""

from __future__ import annotations

from typing import Any

# Causes inside a failed CUDA-graph capture (searched in the capture error's text).
CAPTURE_CAUSES: list[dict[str, Any]] = [
    {
        "id": "oom",
        "patterns": [r"out of memory", r"OutOfMemoryError"],
        "explanation": "out of GPU memory while capturing",
        "remedies": [
            "lower --mem-fraction-static (e.g. {mem_down}) to leave room for the graphs",
            "lower --cuda-graph-max-bs (e.g. {graph_bs_down}; --cuda-graph-max-bs-decode on "
            "SGLang >= 0.5.14)",
        ],
    },
    {
        "id": "stream_capture_invalidated",
        "patterns": [
            r"cudaErrorStreamCapture\w*",
            r"operation not permitted when stream is capturing",
            r"operation failed due to a previous error during capture",
            r"stream is capturing",
        ],
        "explanation": "an operation that is not allowed inside a CUDA graph (a host sync or "
        "allocation) ran during capture and invalidated it",
        "remedies": [
            "a kernel or model path does not support CUDA graphs with these settings: try "
            "another --attention-backend (e.g. {attn_other})",
            "confirm with --disable-cuda-graph (slower)",
        ],
    },
    {
        "id": "illegal_address",
        "patterns": [r"illegal memory access", r"cudaErrorIllegalAddress", r"ILLEGAL_ADDRESS"],
        "explanation": "a kernel accessed invalid memory while capturing",
        "remedies": [
            "try another --attention-backend (e.g. {attn_other})",
            "try a smaller --cuda-graph-max-bs (e.g. {graph_bs_down}; -decode on SGLang >= 0.5.14)",
            "rerun with CUDA_LAUNCH_BLOCKING=1",
        ],
    },
    {
        "id": "device_assert",
        "patterns": [r"device-side assert", r"cudaErrorAssert"],
        "explanation": "a kernel assertion failed while capturing",
        "remedies": ["check that the draft model matches the target model"],
    },
]
