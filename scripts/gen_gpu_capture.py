"""Write a shell script that captures the raw outputs of forensics' evidence commands on a GPU
host, while processes of a known group hold GPU memory (`python scripts/gen_gpu_capture.py >
capture.sh`, then `OUT=dir sh capture.sh` on the host).

The command texts come from ``forensics.evidence.COMMANDS``, so the capture runs exactly what
``forensics diagnose --relaunch`` runs. The captured files are parsed back by
tests/test_evidence.py (fixtures/evidence/live/).
"""

from __future__ import annotations

import shlex

from forensics.evidence import COMMANDS, _wrap

HOLDER = """
import os, sys, time
n = int(sys.argv[1])
try:
    import torch
    x = torch.empty(n << 30, dtype=torch.uint8, device="cuda")
    x.fill_(1)
    torch.cuda.synchronize()
    print("holding", n, "GiB with torch", torch.__version__, flush=True)
except ImportError:
    print("no torch: nothing held", flush=True)
time.sleep(600)
"""


def main() -> None:
    out = ["set -u", 'mkdir -p "$OUT"', f"cat > /tmp/holder.py <<'PY'\n{HOLDER.strip()}\nPY"]
    # the "run": its own process group holding 8 GiB; another user of the GPU holding 4 GiB
    out += [
        'setsid python3 /tmp/holder.py 8 > "$OUT/holder_run.txt" 2>&1 &',
        "RUN=$!",
        'python3 /tmp/holder.py 4 > "$OUT/holder_other.txt" 2>&1 &',
        "OTHER=$!",
        'for i in $(seq 1 240); do [ -s "$OUT/holder_run.txt" ] && [ -s "$OUT/holder_other.txt" ] '
        "&& break; sleep 0.5; done",
        'echo "run_pgid=$RUN other_pid=$OTHER" > "$OUT/pids.txt"',
    ]
    for cmd in COMMANDS:
        out.append(
            f'sh -c {shlex.quote(_wrap(cmd))} > "$OUT/{cmd.name}.stdout" '
            f'2> "$OUT/{cmd.name}.stderr"; echo "{cmd.name} rc=$?" >> "$OUT/rc.txt"'
        )
    out += [
        'if command -v py-spy >/dev/null 2>&1; then py-spy dump --pid "$RUN" > '
        '"$OUT/py_spy.stdout" 2>&1; fi',
        'kill -KILL "$OTHER" 2>/dev/null; kill -KILL -"$RUN" 2>/dev/null; wait 2>/dev/null; true',
    ]
    print("\n".join(out))


if __name__ == "__main__":
    main()
