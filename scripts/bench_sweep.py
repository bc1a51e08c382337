"""Sweep overhead per config beyond launch + bench: run fixtures/sweeps/sim-mix.toml on the
simulator in a throwaway store and print, per config, launch / bench / stop / overhead seconds.

    .venv/bin/python scripts/bench_sweep.py        # docs/performance.md#sweep-overhead
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as home:
        os.environ["FORENSICS_HOME"] = home
        from forensics import sweep as sw
        from forensics.store import Store

        res = sw.run(Store.open(home), sw.load(ROOT / "fixtures" / "sweeps" / "sim-mix.toml"))
        print(
            f"{'config':<38} {'outcome':<8} {'launch':>7} {'bench':>6} {'stop':>5} {'overhead':>8}"
        )
        ran = [c for c in res["configs"] if c["outcome"] in ("ok", "failed")]
        for c in ran:
            print(
                f"{c['config_id']:<38} {c['outcome']:<8} {c['launch_s']:7.2f} {c['bench_s']:6.2f} "
                f"{c['stop_s']:5.2f} {c['overhead_s']:8.2f}"
            )
        rest = [c["overhead_s"] for c in ran[1:]]
        print(
            f"overhead: first config {ran[0]['overhead_s']:.2f} s (loads the phase classifier), "
            f"the others median {statistics.median(rest):.2f} s, max {max(rest):.2f} s; "
            f"without the server's own stop: median "
            f"{statistics.median(c['overhead_s'] - c['stop_s'] for c in ran[1:]):.2f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
