"""The critical path of one `forensics ingest`: the main thread's steps and each thread's CPU.

    FORENSICS_HOME=$(mktemp -d) T_SPAWN=$(date +%s.%N) python scripts/ingest_timeline.py FILE

runs ``forensics ingest FILE`` in this process with the steps of an ingest wrapped
(``STEPS``): each one's start and end (seconds since ``T_SPAWN``, the shell's clock before the
interpreter started, so the interpreter's own start is counted) and the main thread's CPU in
it, then every thread's span and CPU (``time.thread_time``), the time it was runnable but
waiting for a core, the time it slept (the GIL, a queue, I/O) and its minor page faults, and
the process's CPU (the polars pool's threads are the difference). Printed on stderr at exit
(docs/performance.md, "The critical path of one ingest, tenth stop", "The parse window,
eleventh stop"). On a shared machine, ``chrt -f 10`` before
``python`` gives the figures of an idle one (the other sessions wait for it)."""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time

SPAWN = float(os.environ.get("T_SPAWN") or time.time())
EVENTS: list[tuple[float, str, str]] = []
THREADS: list[tuple[str, float, float, float]] = []
# (module, attribute, owner class or None): the main thread's steps of one ingest
STEPS = (
    ("forensics.ingest.file", "_prepare", None),
    ("forensics.ingest.file", "_parse_file", None),
    ("forensics.ingest.file", "_parse", None),
    ("forensics.ingest.batch", "_Batch", "commit"),
    ("forensics.ingest.batch", "_Batch", "join_warming"),
    ("forensics.ingest.batch", "_Batch", "_add_verdicts"),
    ("forensics.store.transaction", "Transaction", "settle"),
    ("forensics.ingest.batch", "verdict_step", None),
    ("forensics.store.transaction", "Transaction", "commit"),
    # a parallel ingest's (several big logs): the inputs, each file's opening, its worker
    ("forensics.ingest.batch", "_files", None),
    ("forensics.ingest.file", "_log_source", None),  # a log's opening (a thread per host)
    ("forensics.ingest.batch", "_prepare", None),
    ("forensics.ingest.batch", "early_pool", None),  # two remote inputs or more: the pool
    ("forensics.ingest.zygote", "Zygote", "__init__"),  # its zygote spawned
    ("forensics.ingest.pool", "_Worker", "__init__"),
    ("forensics.ingest.pool", "Pool", "submit"),
    ("forensics.ingest.batch", "_Batch", "_adopt"),
)


def _now() -> float:
    return time.time() - SPAWN


def _mark(what: str) -> None:
    EVENTS.append((_now(), threading.current_thread().name, what))


# label -> what its start line adds, from the call's arguments: the host of a log fed
DETAILS = {"submit": lambda args: args[1].out.host}


def _timed(fn, label: str):
    detail = DETAILS.get(label)

    def wrapper(*args, **kwargs):
        _mark(f"{label} > {detail(args)}" if detail else f"{label} >")
        cpu = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            _mark(f"{label} < (cpu {time.thread_time() - cpu:.3f} s)")

    return wrapper


def _waits() -> tuple[float, int]:
    """This thread's time runnable but waiting for a core (Linux schedstat) and its minor page
    faults so far; (0, 0) where the system does not say."""
    import resource

    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
            queued = int(f.read().split()[1]) / 1e9
        return queued, resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    except (OSError, AttributeError, IndexError, ValueError):
        return 0.0, 0


def _thread_cpu() -> None:
    run = threading.Thread.run

    def timed_run(self) -> None:
        start, cpu, (queued, faults) = _now(), time.thread_time(), _waits()
        try:
            run(self)
        finally:
            q, f = _waits()
            THREADS.append(
                (self.name, start, _now(), time.thread_time() - cpu, q - queued, f - faults)
            )

    threading.Thread.run = timed_run


def _wrap_steps() -> None:
    import importlib

    for module, name, method in STEPS:
        owner = importlib.import_module(module)
        if method is not None:
            owner, name = getattr(owner, name), method
        setattr(owner, name, _timed(getattr(owner, name), name))


def _report() -> None:
    _mark("exit")
    for at, thread, what in EVENTS:
        print(f"{at:7.3f} {thread[:24]:24s} {what}", file=sys.stderr)
    for name, start, end, cpu, queued, faults in THREADS:
        # the rest of its span it slept: the GIL, a queue, a lock, I/O
        print(
            f"thread {name[:28]:28s} {start:6.3f}-{end:6.3f} s, cpu {cpu:.3f} s, waiting for "
            f"a core {queued:.3f} s, asleep {end - start - cpu - queued:.3f} s, "
            f"{faults} page faults",
            file=sys.stderr,
        )
    print(
        f"main thread cpu {time.thread_time():.3f} s, process cpu {time.process_time():.3f} s",
        file=sys.stderr,
    )


def main() -> None:
    _mark("script")
    _thread_cpu()
    from forensics.entry import main as forensics_main

    _wrap_steps()
    _mark("imports done")
    atexit.register(_report)
    sys.argv = ["forensics", "ingest", *sys.argv[1:]]
    forensics_main()


if __name__ == "__main__":
    main()
