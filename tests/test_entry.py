"""Ctrl-C at any moment of a run is one line and exit 130, never a traceback: also while the CLI
is still being imported, before forensics.cli.main's own handling runs (forensics/entry.py).

Real processes, real SIGINT: the entry point (``python -m forensics`` and the installed
``forensics`` script) runs ``classify -`` on a stdin that never ends (it waits for the paste),
and is interrupted at delays from right after the interpreter's own start-up (inside the import
of the CLI) to well into the command.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from forensics.errors import EXIT_INTERRUPTED
from tests.conftest import assert_prints

SCRIPT = Path(sys.executable).with_name("forensics")
# When to interrupt: once the child's import of this module has finished (PYTHONPROFILEIMPORTTIME
# reports each import on stderr as it ends), or that many seconds after it.
MOMENTS = (
    "forensics.entry",  # the entry point begins (before it: the interpreter's own start-up)
    "forensics.errors",  # the import of forensics.cli begins
    "forensics.terminal",  # inside it
    "forensics.cli",  # imported: main is about to run (and import the command's group module)
    "polars",  # in the command: classify imports the parser
    ("polars", 0.5),  # in the command, waiting for the paste (if it got there by then)
)


def _interrupt(argv: list[str], moment: str | tuple[str, float]) -> tuple[int, str, list[str]]:
    module, later = moment if isinstance(moment, tuple) else (moment, 0.0)
    p = subprocess.Popen(
        [*argv, "classify", "-"],
        stdin=subprocess.PIPE,  # held open: the paste never ends
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"},
    )
    lines: queue.Queue[bytes] = queue.Queue()
    seen: list[bytes] = []

    def read() -> None:
        for line in p.stderr:  # type: ignore[union-attr]
            lines.put(line)
        lines.put(b"")

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        while not seen or seen[-1].split(b"|")[-1].strip() != module.encode():
            seen.append(lines.get(timeout=60))  # queue.Empty: the moment never came
            assert seen[-1], f"{module} was never imported: {b''.join(seen)[-2000:]!r}"
        time.sleep(later)
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)
        reader.join(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    while not lines.empty():
        seen.append(lines.get())
    text = b"".join(seen).decode(errors="replace").splitlines()
    # click ends the terminal's "^C" line with a newline of its own before "Interrupted."
    said = [x for x in text if x.strip() and not x.startswith("import time:")]
    return p.returncode, p.stdout.read().decode(errors="replace"), said  # type: ignore[union-attr]


def test_the_entry_module_is_light_and_names_the_same_exit_code():
    # in a process of its own: importing it takes over SIGINT (it is the entry point)
    code = (
        "import sys, forensics.entry as e; "
        "print(sorted(m for m in sys.modules if 'click' in m or m.startswith('forensics')), "
        "e.EXIT_INTERRUPTED)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == (
        f"['forensics', 'forensics.collector', 'forensics.entry', 'forensics.unread'] "
        f"{EXIT_INTERRUPTED}"
    )


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param([sys.executable, "-m", "forensics"], id="python -m forensics"),
        pytest.param([str(SCRIPT)], id="forensics script"),
    ],
)
@pytest.mark.parametrize("moment", MOMENTS)
def test_ctrl_c_at_any_moment_is_one_line_and_exit_130(argv, moment):
    if not SCRIPT.exists() and argv[0] == str(SCRIPT):
        pytest.fail(f"{SCRIPT}: the console script is not installed (pip install -e .)")
    rc, out, said = _interrupt(argv, moment)
    assert (rc, said) == (EXIT_INTERRUPTED, ["Interrupted."])
    assert out == ""


def test_the_cli_returns_the_memory_polars_frees_promptly():
    """Issue 14, bounded memory: polars' allocator held the pages an ingest freed for 0.5-1 s
    (a 150 MB log of one stage line: 312 MB peak, 245 MB with prompt decay). The entry point
    sets the decay before polars loads; polars appends it after its own, so it is the one in
    force; a user's own setting is kept."""
    code = "import os, forensics.entry, polars; print(os.environ['_RJEM_MALLOC_CONF'])"
    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    last = {}
    for opt in out.stdout.strip().split(","):
        k, _, v = opt.partition(":")
        last[k] = v  # jemalloc reads the options in order: the last one of a name wins
    assert last["dirty_decay_ms"] == "100" and last["muzzy_decay_ms"] == "0", out
    env["_RJEM_MALLOC_CONF"] = "narenas:2"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.strip().endswith(",narenas:2") and "dirty_decay_ms:100" not in out.stdout


def test_importlib_metadata_runs_when_first_read_not_when_polars_imports_it():
    """polars' import runs ``import importlib.metadata`` (~12 ms of email, zipfile, csv...)
    that an ingest never reads: through the entry point its code runs when an attribute is
    first read, in the thread that reads it (the others wait), and reads as the module does."""
    code = (
        "import sys, threading, forensics.entry, polars\n"
        "m = sys.modules['importlib.metadata']\n"
        "print('version' in vars(m), 'email.message' in sys.modules)\n"
        "got = []\n"
        "readers = [threading.Thread(target=lambda: got.append(m.version('polars')))"
        " for _ in range(4)]\n"
        "[t.start() for t in readers]; [t.join() for t in readers]\n"
        "from importlib.metadata import PackageNotFoundError, version\n"
        "try:\n"
        "    version('no-such-distribution-here')\n"
        "except PackageNotFoundError:\n"
        "    got.append('not found')\n"
        "print(got == [polars.__version__] * 4 + ['not found'], hasattr(m, 'no_such_name'))\n"
    )
    assert_prints(code, ["False", "False", "True", "False"])


# an interrupt that lands inside a weakref callback, where Python ignores exceptions
IGNORED = """
import os, signal, sys, time, weakref
import forensics.entry as e
e._handle_interrupts(e._interrupt_once)
sys.unraisablehook = e._interrupt_ignored
class A:
    pass
def callback(_):
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(10**6):  # the handler runs here, inside the callback
        pass
a = A()
r = weakref.ref(a, callback)
try:
    del a
    time.sleep(10)
    print("lost")
except KeyboardInterrupt:
    print("interrupted")
"""


def test_an_interrupt_python_ignored_in_a_callback_is_delivered_again():
    """A SIGTERM whose KeyboardInterrupt was raised in a weakref callback was lost ("Exception
    ignored in ..." and a traceback on stderr; a parallel ingest went on and exited 0): it is
    raised again once the callback returned, and nothing is printed."""
    got = subprocess.run(
        [sys.executable, "-c", IGNORED], capture_output=True, text=True, timeout=60
    )
    assert got.stdout.strip() == "interrupted", got.stderr
    assert "Exception ignored" not in got.stderr and "Traceback" not in got.stderr


# the collector's state where an ingest imports its parser, where it parses, and where another
# command runs (forensics/collector.py)
COLLECTOR = """
import gc, sys
seen = []
class Finder:  # notes the collector's state as the parser's import begins
    def find_spec(self, name, path=None, target=None):
        if name == "forensics_parsers.sglang":
            seen.append(("import", gc.isenabled()))
sys.meta_path.insert(0, Finder())
from forensics.entry import main
import forensics.ingest.file as f
parse = f._parse
def noted(*a, **k):
    seen.append(("parse", gc.isenabled()))
    return parse(*a, **k)
f._parse = noted
import atexit
atexit.register(lambda: print(seen, ("end", gc.isenabled())))
main()
"""


@pytest.mark.parametrize("command", ["ingest", "runs"])
def test_the_collector_is_paused_through_the_start_only(tmp_path, command):
    """Through the entry point, no garbage collection runs while an ingest imports its parser
    (~8 ms of collections over objects that live as long as the process); it runs again
    from the parse on, and in every other command from its start."""
    from tests.conftest import FIXTURES

    log = str(FIXTURES / "sglang_eagle3_cg_5dt.log")
    env = {**os.environ, "FORENSICS_HOME": str(tmp_path / "st")}
    args = ["ingest", log] if command == "ingest" else ["runs", "--json"]
    out = subprocess.run(
        [sys.executable, "-c", COLLECTOR, *args], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    last = out.stdout.strip().splitlines()[-1]
    if command == "ingest":
        assert last == "[('import', False), ('parse', True)] ('end', True)", out.stdout
    else:  # runs reads the store: the parser's tables imported, the collector on
        assert last == "[('import', True)] ('end', True)", out.stdout
