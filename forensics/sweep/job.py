"""What a Slurm job of a sweep runs: ``python -m forensics.sweep.job SPEC.json``.

SPEC names the sweep file, the unit's key, the store and where the result goes. The job runs
the unit with the local executor's ``run_unit`` (on this node: launch, bench, stop, ingest into
the shared store) and writes the result atomically (``result.json.tmp`` then a rename), so the
controller never reads half a result (``forensics.output.write_home_file``). Exit 0 when a result was written, whatever the config's
outcome; 1 when the spec is unusable.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m forensics.sweep.job SPEC.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[0]).read_text())
    os.environ["FORENSICS_HOME"] = spec["store"]
    from forensics.store import Store
    from forensics.sweep import executor_local
    from forensics.sweep.plan import load

    sweep = load(spec["sweep_file"], name=spec["sweep_name"])
    unit = sweep.unit(spec["key"])
    store = Store.open(spec["store"])

    def progress(e: dict) -> None:
        if e.get("event") in ("launch", "ready", "stage", "health"):
            print(json.dumps({k: v for k, v in e.items() if k != "unit"}, default=str), flush=True)

    result = executor_local.run_unit(store, sweep, unit, progress=progress)
    result["job_node"] = os.uname().nodename
    from forensics.output import write_home_file

    write_home_file(spec["result"], json.dumps(result, default=str), what="the job's result")
    print(f"result: {result['outcome']} {result.get('cause') or ''}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
