"""GPU-host evidence: outputs of nvidia-smi, fuser, dmesg, ps, ss and py-spy -> polars frames.

Pure: text in, frames out. Every parser accepts any text (empty, truncated, another locale's
header, an annotation line) and returns a frame with a fixed schema; lines it does not
understand are skipped. Real samples from an H200 host are in fixtures/evidence/.

| function | command | frame columns |
| --- | --- | --- |
| parse_nvidia_smi | ``nvidia-smi`` | (gpus, procs) — see GPU_SCHEMA, GPU_PROC_SCHEMA |
| parse_query_gpu | ``--query-gpu=... --format=csv[,noheader][,nounits]`` | the fields asked for |
| parse_query_compute_apps | ``--query-compute-apps=pid,process_name,used_memory`` | GPU_PROC_SCHEMA |
| parse_fuser | ``fuser -v /dev/nvidia*`` and ``fuser -k ...`` | FUSER_SCHEMA |
| parse_dmesg_xid | ``dmesg`` (Xid lines) | XID_SCHEMA (+ meaning from XID_CODES) |
| parse_ps | ``ps -eo pid,ppid,pgid,stat,etimes,args``, ``ps -ef``, ``ps aux`` | PS_SCHEMA |
| parse_ss_listen | ``ss -ltnp`` | SS_SCHEMA (one row per listening socket and owner) |
| parse_py_spy | ``py-spy dump --pid N`` | PYSPY_SCHEMA (one row per frame; depth 0 = top) |
"""

from __future__ import annotations

import csv
import re

import polars as pl

GPU_SCHEMA = {
    "gpu": pl.Int64,
    "name": pl.String,
    "bus_id": pl.String,
    "temp_c": pl.Int64,
    "perf": pl.String,
    "power_w": pl.Float64,
    "power_cap_w": pl.Float64,
    "memory_used_mib": pl.Int64,
    "memory_total_mib": pl.Int64,
    "util_pct": pl.Int64,
    "compute_mode": pl.String,
}
GPU_PROC_SCHEMA = {
    "gpu": pl.Int64,
    "pid": pl.Int64,
    "type": pl.String,
    "process_name": pl.String,
    "used_memory_mib": pl.Int64,
}
FUSER_SCHEMA = {
    "path": pl.String,
    "user": pl.String,
    "pid": pl.Int64,
    "access": pl.String,
    "command": pl.String,
}
XID_SCHEMA = {
    "line": pl.Int64,
    "ts": pl.String,
    "uptime_s": pl.Float64,
    "device": pl.String,
    "xid": pl.Int64,
    "pid": pl.Int64,
    "name": pl.String,
    "message": pl.String,
    "meaning": pl.String,
}
PS_SCHEMA = {
    "pid": pl.Int64,
    "ppid": pl.Int64,
    "pgid": pl.Int64,
    "stat": pl.String,
    "etimes": pl.Int64,
    "args": pl.String,
}
SS_SCHEMA = {
    "state": pl.String,
    "local_address": pl.String,
    "port": pl.Int64,
    "process": pl.String,
    "pid": pl.Int64,
    "fd": pl.Int64,
}
PYSPY_SCHEMA = {
    "pid": pl.Int64,
    "thread_id": pl.String,
    "thread_name": pl.String,
    "status": pl.String,
    "depth": pl.Int64,
    "function": pl.String,
    "file": pl.String,
    "lineno": pl.Int64,
}

# Xid codes worth naming (NVIDIA's Xid catalog, paraphrased); others get an empty meaning.
XID_CODES: dict[int, str] = {
    13: "graphics engine exception (often an out-of-range access in a kernel)",
    31: "GPU memory page fault (MMU fault: illegal address in a kernel)",
    32: "invalid or corrupted push buffer stream",
    43: "GPU stopped processing (a user-space fault such as a device-side assert)",
    45: "preemptive cleanup after earlier errors (a process was killed or faulted)",
    48: "double-bit ECC error (reset the GPU; check for retirement)",
    61: "internal micro-controller breakpoint/warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    68: "video processor exception",
    74: "NVLink error",
    79: "GPU has fallen off the bus (hardware, power or PCIe)",
    92: "high single-bit ECC error rate",
    94: "contained ECC error (the affected process must restart)",
    95: "uncontained ECC error (all GPU work must restart; reset the GPU)",
    109: "context switch timeout",
    119: "GSP RPC timeout",
    120: "GSP error",
    154: "GPU recovery action required (reset or reboot)",
}


def _frame(rows: list[dict], schema: dict) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    m = re.search(r"-?\d+", text)
    return int(m.group()) if m else None


def _float(text: str | None) -> float | None:
    if text is None:
        return None
    m = re.search(r"-?\d+(?:\.\d+)?", text)
    return float(m.group()) if m else None


# -- nvidia-smi table ------------------------------------------------------------------------

_GPU_ROW1 = re.compile(
    r"^\|\s+(?P<gpu>\d+)\s+(?P<name>.+?)\s+(?:On|Off)\s+\|\s+(?P<bus>\S+)\s+\S+\s+\|"
)
_GPU_ROW2 = re.compile(
    r"^\|\s+(?P<fan>\S+)\s+(?P<temp>\S+)\s+(?P<perf>P\d+|\S+)\s+(?P<pw>\S+)\s*/\s*(?P<cap>\S+)\s+\|"
    r"\s+(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB\s+\|\s+(?P<util>\S+)\s+(?P<mode>\S+)\s+\|"
)
_PROC_ROW = re.compile(
    r"^\|\s+(?P<gpu>\d+)\s+(?P<gi>\S+)\s+(?P<ci>\S+)\s+(?P<pid>\d+)\s+(?P<type>[CGM+]+)\s+"
    r"(?P<name>.+?)\s+(?P<mem>\d+|N/A)(?:MiB)?\s*\|$"
)


def parse_nvidia_smi(text: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The default ``nvidia-smi`` table -> (gpus, processes)."""
    gpus: list[dict] = []
    procs: list[dict] = []
    pending: dict | None = None
    in_procs = False
    for raw in text.splitlines():
        line = raw.rstrip()
        if "Processes:" in line:
            in_procs = True
            continue
        if in_procs:
            m = _PROC_ROW.match(line)
            if m:
                procs.append(
                    {
                        "gpu": int(m["gpu"]),
                        "pid": int(m["pid"]),
                        "type": m["type"],
                        "process_name": m["name"].strip(),
                        "used_memory_mib": _int(m["mem"]),
                    }
                )
            continue
        m = _GPU_ROW1.match(line)
        if m:
            pending = {"gpu": int(m["gpu"]), "name": m["name"].strip(), "bus_id": m["bus"]}
            continue
        m = _GPU_ROW2.match(line)
        if m and pending is not None:
            pending.update(
                temp_c=_int(m["temp"]),
                perf=m["perf"],
                power_w=_float(m["pw"]),
                power_cap_w=_float(m["cap"]),
                memory_used_mib=int(m["used"]),
                memory_total_mib=int(m["total"]),
                util_pct=_int(m["util"]),
                compute_mode=m["mode"],
            )
            gpus.append({k: pending.get(k) for k in GPU_SCHEMA})
            pending = None
    return _frame(gpus, GPU_SCHEMA), _frame(procs, GPU_PROC_SCHEMA)


# -- nvidia-smi --query-* CSV ----------------------------------------------------------------

_UNIT = re.compile(r"\s*\[[^\]]*\]\s*$")


def _csv_rows(text: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        try:
            row = next(csv.reader([line], skipinitialspace=True), [])
        except csv.Error:
            row = line.split(",")
        cells = [c.strip() for c in row]
        if cells and any(cells) and not cells[0].startswith("#"):
            rows.append(cells)
    return rows


def _looks_like_header(cells: list[str]) -> bool:
    return not any(re.fullmatch(r"-?\d+(\.\d+)?( \S+)?|\[N/A\]|N/A", c) for c in cells[:1])


def _field_name(header: str) -> str:
    return _UNIT.sub("", header).strip().replace(".", "_").replace(" ", "_")


def _value(cell: str) -> int | float | str | None:
    if cell in ("", "N/A", "[N/A]", "[Not Supported]", "Not Supported"):
        return None
    m = re.fullmatch(r"(-?\d+)(?:\.(\d+))?\s*(?:MiB|%|W|C|MHz)?", cell)
    if m:
        if m.group(2):
            return float(cell.split()[0].rstrip("%WCMHziB"))
        n = int(m.group(1))
        return n if -(1 << 63) <= n < (1 << 63) else float(n)  # beyond Int64: keep as float
    return cell


def parse_query(text: str, fields: list[str] | None = None) -> pl.DataFrame:
    """Any ``nvidia-smi --query-*=... --format=csv[,noheader][,nounits]`` output.

    Column names come from the header (units dropped, ``.`` -> ``_``) or from ``fields`` when
    the output has no header. Numbers lose their units (MiB, %, W).
    """
    rows = _csv_rows(text)
    if rows and _looks_like_header(rows[0]):
        names = [_field_name(h) for h in rows[0]]
        rows = rows[1:]
    elif fields:
        names = [_field_name(f) for f in fields]
    else:
        width = max((len(r) for r in rows), default=0)
        names = [f"field{i}" for i in range(width)]
    data = [{n: _value(r[i]) if i < len(r) else None for i, n in enumerate(names)} for r in rows]
    if not data:
        return pl.DataFrame(schema={n: pl.String for n in names})
    return pl.DataFrame(data, infer_schema_length=None, strict=False)


def parse_query_gpu(text: str, fields: list[str] | None = None) -> pl.DataFrame:
    return parse_query(text, fields)


def parse_query_compute_apps(text: str, fields: list[str] | None = None) -> pl.DataFrame:
    """``--query-compute-apps`` -> GPU_PROC_SCHEMA (``gpu`` and ``type`` empty: not in the CSV)."""
    df = parse_query(text, fields or ["pid", "process_name", "used_memory"])
    rows = []
    for r in df.to_dicts():
        mem = r.get("used_gpu_memory", r.get("used_memory"))
        rows.append(
            {
                "gpu": None,
                "pid": r.get("pid") if isinstance(r.get("pid"), int) else _int(str(r.get("pid"))),
                "type": "C",
                "process_name": r.get("process_name") or r.get("name"),
                "used_memory_mib": mem if isinstance(mem, int) else _int(str(mem) if mem else None),
            }
        )
    return _frame(rows, GPU_PROC_SCHEMA)


# -- fuser -----------------------------------------------------------------------------------

_FUSER_V = re.compile(
    r"^(?P<path>\S+:)?\s+(?P<user>\S+)\s+(?P<pid>kernel|\d+)\s+(?P<acc>\S+)\s+(?P<cmd>.+)$"
)
_FUSER_K = re.compile(r"^(?P<path>/\S+):\s*(?P<pids>(?:\s*\d+[a-zA-Z]*)*)\s*$")


def parse_fuser(text: str) -> pl.DataFrame:
    """``fuser -v FILES`` (verbose table) or plain/``-k`` output (``/dev/x:  417m 420``)."""
    rows: list[dict] = []
    path = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip() or line.strip().startswith("USER"):
            continue
        m = _FUSER_K.match(line)
        if m:
            path = m["path"]
            for tok in m["pids"].split():
                acc = re.sub(r"^\d+", "", tok)
                rows.append(
                    {"path": path, "user": None, "pid": _int(tok), "access": acc, "command": None}
                )
            continue
        m = _FUSER_V.match(line)
        if m and (m["path"] or path):
            if m["path"]:
                path = m["path"].rstrip(":")
            if m["pid"] == "kernel":
                continue
            rows.append(
                {
                    "path": path,
                    "user": m["user"],
                    "pid": int(m["pid"]),
                    "access": m["acc"],
                    "command": m["cmd"].strip(),
                }
            )
    return _frame(rows, FUSER_SCHEMA)


# -- dmesg Xid -------------------------------------------------------------------------------

_XID = re.compile(
    r"^(?:\[\s*(?P<ts>[^\]]+)\]\s*)?.*?NVRM: Xid \((?P<dev>[^)]*)\):\s*(?P<xid>\d+),?\s*(?P<rest>.*)$"
)
_PID = re.compile(r"pid=(?:'?)(?P<pid><unknown>|\d+)'?,?\s*")
_NAME = re.compile(r"name=(?P<name>[^,]*),?\s*")


def parse_dmesg_xid(text: str) -> pl.DataFrame:
    """Kernel ``NVRM: Xid`` lines -> one row each (``dmesg`` or ``dmesg -T`` timestamps)."""
    rows = []
    for i, raw in enumerate(text.splitlines(), 1):
        m = _XID.match(raw.strip())
        if not m:
            continue
        rest = m["rest"]
        pid = name = None
        pm = _PID.search(rest)
        if pm:
            pid = _int(pm["pid"])
            rest = rest[: pm.start()] + rest[pm.end() :]
        nm = _NAME.search(rest)
        if nm:
            name = nm["name"].strip() or None
            if name == "<unknown>":
                name = None
            rest = rest[: nm.start()] + rest[nm.end() :]
        ts = (m["ts"] or "").strip() or None
        xid = int(m["xid"])
        rows.append(
            {
                "line": i,
                "ts": ts,
                "uptime_s": float(ts) if ts and re.fullmatch(r"\d+\.\d+", ts) else None,
                "device": m["dev"],
                "xid": xid,
                "pid": pid,
                "name": name,
                "message": rest.strip().strip(",").strip(),
                "meaning": XID_CODES.get(xid, ""),
            }
        )
    return _frame(rows, XID_SCHEMA)


# -- ps --------------------------------------------------------------------------------------


# `ps` header words -> PS_SCHEMA columns (ps -eo pid,ppid,pgid,stat,etimes,args; ps -ef; ps aux;
# ps -eo with other fields). The command is always the last column and may hold spaces.
_PS_HEADER = {
    "PID": "pid",
    "PPID": "ppid",
    "PGID": "pgid",
    "PGRP": "pgid",
    "STAT": "stat",
    "S": "stat",
    "ELAPSED": "etimes",
    "ETIMES": "etimes",
}
_PS_COMMAND = ("COMMAND", "CMD", "ARGS")


def _ps_header(line: str) -> list[str] | None:
    words = line.split()
    if "PID" in words and words and words[-1] in _PS_COMMAND:
        return words
    return None


def parse_ps(text: str) -> pl.DataFrame:
    """``ps -eo pid,ppid,pgid,stat,etimes,args`` (header optional), and any ``ps`` listing
    with a header line (``ps -ef``, ``ps aux``, ``ps -eo ...``): the columns it has."""
    rows = []
    header: list[str] | None = None
    for raw in text.splitlines():
        h = _ps_header(raw)
        if h is not None:
            header = h
            continue
        if header is not None and header[:6] != [
            "PID",
            "PPID",
            "PGID",
            "STAT",
            "ELAPSED",
            "COMMAND",
        ]:
            parts = raw.split(None, len(header) - 1)
            if len(parts) < len(header) or not parts[header.index("PID")].isdigit():
                continue
            row: dict = {k: None for k in PS_SCHEMA}
            for word, cell in zip(header[:-1], parts[:-1], strict=True):
                col = _PS_HEADER.get(word)
                if col in ("pid", "ppid", "pgid", "etimes"):
                    row[col] = _int(cell)
                elif col == "stat":
                    row[col] = cell
            row["args"] = parts[-1]
            rows.append(row)
            continue
        parts = raw.split(None, 5)
        if len(parts) < 5 or not parts[0].isdigit():
            continue
        if not (parts[1].isdigit() and parts[2].lstrip("-").isdigit() and parts[4].isdigit()):
            continue
        rows.append(
            {
                "pid": int(parts[0]),
                "ppid": int(parts[1]),
                "pgid": int(parts[2]),
                "stat": parts[3],
                "etimes": int(parts[4]),
                "args": parts[5] if len(parts) > 5 else "",
            }
        )
    return _frame(rows, PS_SCHEMA)


def process_tree(ps: pl.DataFrame, root_pids: list[int]) -> pl.DataFrame:
    """The rows of ``root_pids`` and all their descendants (by ppid), in pid order."""
    children: dict[int, list[int]] = {}
    for pid, ppid in zip(ps["pid"].to_list(), ps["ppid"].to_list(), strict=True):
        children.setdefault(ppid, []).append(pid)
    seen: set[int] = set()
    stack = [p for p in root_pids if p in set(ps["pid"].to_list())]
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        stack.extend(children.get(pid, []))
    return ps.filter(pl.col("pid").is_in(sorted(seen))).sort("pid")


# -- ss --------------------------------------------------------------------------------------

_USER = re.compile(r'\("(?P<proc>(?:[^"\\]|\\.)*)",pid=(?P<pid>\d+),fd=(?P<fd>\d+)\)')


def parse_ss_listen(text: str) -> pl.DataFrame:
    """``ss -ltnp``: one row per listening socket and owning process (owner empty without
    permission to see it)."""
    rows = []
    for raw in text.splitlines():
        parts = raw.split()
        if len(parts) < 5 or parts[0] in ("State", "Netid"):
            continue
        if parts[0] in ("tcp", "udp") and len(parts) >= 6:
            parts = parts[1:]
        state, local = parts[0], parts[3]
        if ":" not in local:
            continue
        addr, _, port = local.rpartition(":")
        if not port.isdigit():
            continue
        owners = list(_USER.finditer(raw))
        base = {"state": state, "local_address": addr, "port": int(port)}
        if not owners:
            rows.append({**base, "process": None, "pid": None, "fd": None})
        for m in owners:
            rows.append({**base, "process": m["proc"], "pid": int(m["pid"]), "fd": int(m["fd"])})
    return _frame(rows, SS_SCHEMA)


# -- py-spy dump -----------------------------------------------------------------------------

_PS_PROCESS = re.compile(r"^Process (?P<pid>\d+):")
_PS_THREAD = re.compile(
    r'^Thread (?P<tid>0x[0-9A-Fa-f]+|\d+) \((?P<status>[^)]*)\)(?::\s*"(?P<name>.*)")?\s*$'
)
_PS_FRAME = re.compile(r"^\s+(?P<func>\S.*?) \((?P<file>.+?):(?P<line>\d+)\)\s*$")


def parse_py_spy(text: str) -> pl.DataFrame:
    """``py-spy dump`` -> one row per stack frame; ``depth`` 0 is the innermost (top) frame.

    ``--locals`` lines (deeper indented ``name = value``) are skipped.
    """
    rows = []
    pid = None
    thread: dict | None = None
    depth = 0
    for raw in text.splitlines():
        m = _PS_PROCESS.match(raw)
        if m:
            pid = int(m["pid"])
            continue
        m = _PS_THREAD.match(raw)
        if m:
            thread = {
                "tid": m["tid"],
                "name": m["name"],
                "status": m["status"],
            }
            depth = 0
            continue
        m = _PS_FRAME.match(raw)
        if m and thread is not None and not raw.startswith(" " * 8):
            rows.append(
                {
                    "pid": pid,
                    "thread_id": thread["tid"],
                    "thread_name": thread["name"],
                    "status": thread["status"],
                    "depth": depth,
                    "function": m["func"],
                    "file": m["file"],
                    "lineno": int(m["line"]),
                }
            )
            depth += 1
    return _frame(rows, PYSPY_SCHEMA)


def py_spy_top_frames(frames: pl.DataFrame) -> pl.DataFrame:
    """One row per thread: its innermost frame (where it is waiting or running)."""
    return frames.filter(pl.col("depth") == 0)
