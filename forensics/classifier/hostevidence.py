"""Cleanup evidence that is not a log: nvidia-smi / fuser / ps output pasted or collected."""

from __future__ import annotations

import re
from typing import Any

# findings of forensics.evidence that say a GPU is held by a process (not this server's)
HOLDER_FINDINGS = (
    "orphan-gpu-process",
    "gpu-held-by-other",
    "gpu-holder-unknown-pid",
    "gpu-device-open",
)


# SGLang's own process titles and command lines (setproctitle "sglang::scheduler_TP0", ...)
SGLANG_PROCESS = re.compile(
    r"^sglang::\w+|^\S*python[\d.]*\s+(?:-\S+\s+)*-m\s+sglang\.launch_server|^\S*sglang serve\b"
)


HELD_MIB = 1024  # GPU memory in use with no process listed (another PID namespace, a zombie)


_EVIDENCE_HINT = re.compile(r"NVIDIA-SMI|^/dev/nvidia|\bPID\b|sglang::|used_gpu_memory", re.M)


def host_evidence(lines: list[tuple[int, str, str]]) -> list[dict[str, Any]]:
    """Who holds the GPUs, from nvidia-smi / fuser / ps output among ``lines`` (parsed by
    forensics.evidence, the collector's own parsers and findings): one finding per PID, with
    the line that shows it. SGLang processes re-parented to PID 1 are a previous server's."""
    text = "\n".join(t for _, _, t in lines)
    if not _EVIDENCE_HINT.search(text):
        return []
    from forensics import evidence as hostev

    fuser = "\n".join(t for _, _, t in lines if t.startswith("/dev/nvidia"))
    cmds = {
        "nvidia_smi": {"status": "ok", "stdout": text},
        "query_apps": {"status": "ok", "stdout": text if "used_gpu_memory" in text else ""},
        "fuser": {"status": "ok", "stdout": fuser},
        "ps": {"status": "ok", "stdout": text},
    }
    tables = hostev.tables_of(cmds)
    found = [f for f in hostev.findings_of("paste", cmds, tables) if f["id"] in HOLDER_FINDINGS]
    held = {f.get("pid") for f in found}
    ps = tables["ps"]
    for row in ps.to_dicts() if ps.height else []:
        args = row["args"] or ""
        if row["pid"] in held or not SGLANG_PROCESS.search(args):
            continue
        orphan = row["ppid"] == 1
        found.append(
            {
                "id": "orphan-sglang-process" if orphan else "sglang-process-left",
                "message": f"pid {row['pid']} is an SGLang process "
                + ("re-parented to PID 1 (its server is gone)" if orphan else "still running")
                + f": {args[:200]}",
                "pid": row["pid"],
            }
        )
        held.add(row["pid"])
    gpus = tables["gpus"]
    if not found and gpus.height and not tables["gpu_processes"].height:
        for row in gpus.to_dicts():
            if (row["memory_used_mib"] or 0) >= HELD_MIB:
                found.append(
                    {
                        "id": "gpu-memory-held",
                        "message": f"GPU {row['gpu']} has {row['memory_used_mib']} MiB in use "
                        "and no process is listed (a process of another PID namespace, or one "
                        "stuck in teardown)",
                        "pid": f"{row['memory_used_mib']}MiB",
                    }
                )
    out = []
    for f in found:
        rx = re.compile(rf"(?<![\w.]){f.get('pid')}(?![\w.])")
        li = next((li for li, _, t in lines if rx.search(t)), None)
        if li is not None:
            out.append({**f, "line": li, "text": next(t for x, _, t in lines if x == li)})
    return out
