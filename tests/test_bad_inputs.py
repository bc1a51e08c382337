"""A demanding user's bad-input sweep: every case here was a violation of the contract.

The contract (docs/exit-codes.md, docs/bad-inputs.md): bad input gets one line that names the
thing, the cause and the fix, with a documented exit code; never a traceback, never a hang, and
nothing already stored is lost or duplicated. IDs are those of shared/bad-inputs.md (C01 flags,
C03 corrupt part, C06 names, C09 empty/damaged manifest, P21 globs, S04 host keys, H10 Ctrl-C).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forensics.cli import main
from tests.conftest import FIXTURES, ROOT


def run(capsys, *args: str) -> tuple[int, str, str]:
    """The real entry point in-process: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    code = exc.value.code
    return (0 if code is None else code), out, err


def one_line_error(err: str, *needles: str) -> None:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert lines and "Traceback" not in err, err
    last = lines[-1]
    assert last.startswith("Error: "), err
    assert "internal error" not in last, err
    for n in needles:
        assert n in last, (n, last)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def home() -> Path:
    return Path(os.environ["FORENSICS_HOME"])


def ingest_fixtures(*names: str) -> None:
    from forensics.ingest import ingest
    from forensics.store import Store

    ingest(Store.open(home()), [str(FIXTURES / n) for n in names])


def store_listing() -> tuple[list[tuple[str, int]], bytes]:
    h = home()
    files = sorted(
        (str(p.relative_to(h)), p.stat().st_size)
        for p in h.rglob("*")
        if p.is_file() and p.name != "store.lock"
    )
    return files, (h / "manifest.json").read_bytes()


# ---------------------------------------------------------------------------------- the store


@pytest.mark.parametrize(
    "text, cause",
    [
        ("[1, 2]", "not an object"),
        ('{"schema_version": 1, "tables": 5}', "damaged store manifest"),
        ('{"schema_version": 1, "generation": "x"}', "damaged store manifest"),
    ],
)
def test_C09_damaged_manifest_is_a_store_error_not_a_crash(capsys, text, cause):
    """A manifest of the wrong shape was an internal error (exit 1); now exit 7, one line."""
    ingest_fixtures("sglang_baseline.log")
    (home() / "manifest.json").write_text(text)
    for cmd in (["runs"], ["ingest", str(FIXTURES / "sglang_eagle3_cg_5dt.log")]):
        code, _, err = run(capsys, *cmd)
        assert code == 7, err
        one_line_error(err, "manifest.json", cause, "try:")
    assert (home() / "manifest.json").read_text() == text  # never overwritten


def _decode_rows(capsys) -> int:
    from forensics.store import Store

    return Store.open(home()).table("decode").height


def test_C03_corrupt_part_is_quarantined_other_parts_served_reingest_restores(capsys):
    """Every read command used to fail with exit 7 until the store was rebuilt by hand."""
    ingest_fixtures("sglang_baseline.log", "sglang_fail_capture.log")
    rows = _decode_rows(capsys)
    assert rows > 0
    part = next((home() / "tables" / "decode").glob("*.parquet"))
    part.write_bytes(b"not parquet at all")

    code, out, err = run(capsys, "runs", "--json")
    assert code == 0, err
    assert "Warning:" in err and part.name in err and "quarantined" in err
    assert "forensics ingest" in err and "sglang_baseline.log" in err
    names = {r["name"] for r in json.loads(out)}
    assert {"sglang_baseline", "sglang_fail_capture"} <= names  # the other parts still serve
    kept = list(part.parent.glob(part.name + ".corrupt-*"))
    assert len(kept) == 1 and kept[0].read_bytes() == b"not parquet at all"  # never deleted
    man = json.loads((home() / "manifest.json").read_text())
    assert part.name not in man["tables"]["decode"]
    assert man["meta"]["quarantined"][0]["part"] == part.name

    # the next ingest re-reads that source in full: nothing lost, nothing duplicated
    code, _, err = run(capsys, "ingest", str(FIXTURES / "sglang_baseline.log"))
    assert code == 0, err
    assert _decode_rows(capsys) == rows
    code, _, err = run(capsys, "runs")
    assert code == 0 and "Warning" not in err
    assert kept[0].exists()  # a later writer's clean-up keeps the quarantined file


def test_C03_part_missing_from_disk_is_unlisted_not_fatal(capsys):
    ingest_fixtures("sglang_baseline.log")
    part = next((home() / "tables" / "decode").glob("*.parquet"))
    part.unlink()
    code, _, err = run(capsys, "show", "sglang_baseline", "--json")
    assert code == 0, err
    assert "the file is missing" in err and "unlisted" in err


# ---------------------------------------------------------------------------- names and flags


@pytest.mark.parametrize("cmd", [["show", ""], ["diagnose", "  "], ["plot", "decode", ""]])
def test_C06_empty_run_name_is_a_usage_error(capsys, cmd):
    """`show ""` used to print a report of whatever run came first (an empty name matches all)."""
    ingest_fixtures("sglang_baseline.log", "sglang_fail_capture.log")
    code, out, err = run(capsys, *cmd)
    assert code == 2, out + err
    one_line_error(err)


@pytest.mark.parametrize("name", ["run\n", "gpu8\n"])
def test_C06_trailing_newline_is_not_a_valid_name(name):
    """`$` matches before a final newline: "run\\n" passed the allowlist regexes."""
    from forensics.errors import ConfigError, UsageError
    from forensics.hosts import _host_config
    from forensics.recipe import valid_name

    with pytest.raises(UsageError):
        valid_name(name)
    with pytest.raises(ConfigError, match="bad host name"):
        _host_config(Path("forensics.toml"), name, {"address": "root@h"})


@pytest.mark.parametrize(
    "cmd, needle",
    [
        (["lint", "somerecipe", "--shell", "echo hi"], "not both"),
        (["baseline", "--clear", "--tok-s", "5"], "--clear"),
        (["diagnose", "x", "--host", "gpu8"], "--host goes with"),
        (["diagnose", "x", "--deadline", "5"], "--relaunch"),
        (["diagnose", "x", "--relaunch", "--log", "x.log"], "--log"),
        (["launch", "--shell", "echo hi", "--", "--port", "1"], "would be ignored"),
        (["launch", "--name", "x", "--sim-fail", "kv-oom", "--", "--model-path", "m"], "--sim"),
    ],
)
def test_C01_conflicting_flags_exit_2_instead_of_being_ignored(capsys, cmd, needle):
    code, out, err = run(capsys, *cmd)
    assert code == 2, out + err
    assert needle in err and "Traceback" not in err


BAD_NUMBERS = [
    (["ingest", "--lock-timeout", "-1", "x.log"], "--lock-timeout"),
    (["ingest", "--lock-timeout", "nan", "x.log"], "--lock-timeout"),
    (["classify", "eval", "--folds", "1"], "--folds"),
    (["diagnose", "x", "--relaunch", "--step-deadline", "0"], "--step-deadline"),
    (["launch", "--port", "-1", "--sim", "--name", "x", "--", "--model-path", "m"], "--port"),
    (["launch", "--port", "70000", "--sim", "--name", "x", "--", "--model-path", "m"], "--port"),
    (
        ["launch", "--deadline", "0", "--sim", "--name", "x", "--", "--model-path", "m"],
        "--deadline",
    ),
    (
        ["launch", "--sim-speed", "-1", "--sim", "--name", "x", "--", "--model-path", "m"],
        "--sim-speed",
    ),  # noqa: E501
    (["stop", "x", "--grace", "-1"], "--grace"),
    (["bench", "127.0.0.1:99999", "--no-store"], "99999"),
    (["bench", "127.0.0.1", "--port", "-1", "--no-store"], "port"),
    (["bench", "http://127.0.0.1:1", "--deadline", "0", "--no-store"], "--deadline"),
    (["bench", "http://127.0.0.1:1", "--deadline", "-1", "--no-store"], "--deadline"),
    (
        ["bench", "http://127.0.0.1:1", "--rate", "1", "--duration", "-1", "--no-store"],
        "--duration",
    ),  # noqa: E501
    (["bench", "http://127.0.0.1:1", "--rate", "nan", "--duration", "1", "--no-store"], "--rate"),
    (["bench", "http://127.0.0.1:1", "--connect-timeout", "0", "--no-store"], "--connect-timeout"),
    (
        ["bench", "http://127.0.0.1:1", "--max-failure-rate", "2", "--no-store"],
        "--max-failure-rate",
    ),  # noqa: E501
    (["bench", "http://127.0.0.1:1", "--temperature", "-1", "--no-store"], "--temperature"),
    (
        ["bench", "http://127.0.0.1:1", "--random-input-len", "-1", "--no-store"],
        "--random-input-len",
    ),  # noqa: E501
    (["baseline", "--tok-s", "nan"], "--tok-s"),
    (["baseline", "--tok-s", "inf"], "--tok-s"),
    (["sim", "model", "--base-tok-s", "0"], "--base-tok-s"),
    (["sim", "model", "--steps", "-1"], "--steps"),
    (["sim", "model", "--steps", "2", "--quality", "2"], "--quality"),
    (["sim", "model", "--batch", "0"], "--batch"),
]


@pytest.mark.parametrize("cmd, flag", BAD_NUMBERS, ids=[" ".join(c[:4]) for c, _ in BAD_NUMBERS])
def test_negative_zero_nan_numbers_are_usage_errors(capsys, cmd, flag):
    """Each was accepted (a launch on port -1, a bench "passing" with 0 requests, --deadline -1
    reported as a deadline miss) or crashed (ZeroDivisionError, sklearn ValueError)."""
    code, out, err = run(capsys, *cmd)
    assert code == 2, out + err
    assert flag in err and "Traceback" not in err and "internal error" not in err


def test_classify_eval_more_folds_than_families_is_a_usage_error(capsys):
    code, _, err = run(capsys, "classify", "eval", "--folds", "100000")
    assert code == 2
    one_line_error(err, "--folds 100000", "families", "try: --folds 2..")


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--port", "-1"], "--port"),
        (["--port", "70000"], "--port"),
        (["--tp", "0"], "--tp-size"),
        (["--sim-speed", "0"], "--sim-speed"),
        (["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "-1"], "num-steps"),
    ],
)
def test_sim_serve_out_of_range_flags_exit_2_never_crash_or_serve(flag, argv):
    """--port -1 was an OverflowError (exit 1); --tp 0 / --sim-speed 0 started serving."""
    p = subprocess.run(
        [sys.executable, "-m", "forensics", "sim", "serve", "--model-path", "sim://k2", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert p.returncode == 2, p.stderr
    assert flag in p.stderr and "out of range" in p.stderr and "Traceback" not in p.stderr


# ------------------------------------------------------------------------------- outputs


@pytest.mark.parametrize("cmd", [["plot", "trend"], ["report"]])
def test_out_under_a_file_is_a_usage_error(capsys, tmp_path, cmd):
    """--out afile/x.png was NotADirectoryError: an internal error (exit 1)."""
    ingest_fixtures("sglang_baseline.log")
    (tmp_path / "afile").write_text("x")
    code, _, err = run(capsys, *cmd, "-o", str(tmp_path / "afile" / "x.svg"))
    assert code == 2
    one_line_error(err, "afile", "is a file, not a folder")
    assert (tmp_path / "afile").read_text() == "x"


def test_bench_binary_dataset_is_a_usage_error_with_a_fix(capsys, tmp_path):
    (tmp_path / "d.jsonl").write_bytes(b"\xa4\xff\x00binary")
    code, _, err = run(capsys, "bench", "http://127.0.0.1:1", "--dataset", "d.jsonl", "--no-store")
    assert code == 2
    one_line_error(err, "d.jsonl", "not UTF-8", "try:")


# ------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "toml, cmd, needle",
    [
        ('[hosts.gpu8]\naddress = "root@h"\nconnect_timeout = true\n', ["hosts", "list"],
         "connect_timeout"),
        ("[recipes.r1]\nserver = 5\n", ["lint", "r1"], "recipes.r1.server"),
        ("[recipes.r1]\nshell = 5\n", ["lint", "r1"], "recipes.r1.shell"),
        ("[recipes.r1]\nserver = \"python3 -m sglang.launch_server 'x\"\n", ["lint", "r1"],
         "recipes.r1.server"),
        ("[recipes.'../x']\nserver = ['python3']\n", ["lint", "r1"], "forensics.toml"),
        # a typo in a section name was silently ignored: the host "did not exist"
        ('[host.gpu8]\naddress = "root@h"\n', ["hosts", "list"], "[host]: not a section"),
        ('[host.gpu8]\naddress = "root@h"\n', ["hosts", "list"], "did you mean [hosts]?"),
        ("timeout = 5\n", ["hosts", "list"], "[timeout]: not a section"),
    ],
)  # fmt: skip
def test_bad_config_values_name_the_file_and_key(capsys, tmp_path, toml, cmd, needle):
    """A bool timeout was taken as 1 s; `server = 5` was a TypeError (exit 1); `shell = 5`
    linted the text "5" with no findings; a bad recipe name did not say where it came from."""
    (tmp_path / "forensics.toml").write_text(toml)
    code, out, err = run(capsys, *cmd)
    assert code == 2, out + err
    one_line_error(err, needle)


# ------------------------------------------------------------------------------- lint, launch


def test_lint_reports_an_unterminated_quote(capsys):
    """`lint --shell "echo 'abc"` said "no findings" for a chain bash refuses."""
    code, out, err = run(capsys, "lint", "--shell", "nohup python3 -m sglang.launch_server 'x &")
    assert code == 1, err  # an error finding
    assert "shell-syntax" in out and "unterminated single quote" in out
    assert "step None" not in out


def test_launch_of_an_unterminated_quote_says_so(capsys):
    code, _, err = run(capsys, "launch", "--shell", "echo 'a")
    assert code == 2
    one_line_error(err, "unterminated single quote", "forensics lint")


def test_diagnose_log_on_an_unknown_host_is_not_ignored(capsys):
    """--log X --host gpu9 fell back to the stored runs matching the name (exit 0)."""
    ingest_fixtures("sglang_baseline.log")
    code, out, err = run(capsys, "diagnose", "baseline", "--log", "/x.log", "--host", "gpu9")
    assert code == 2, out
    one_line_error(err, "unknown host 'gpu9'")


def test_S04_malformed_fingerprint_is_refused_before_connecting(capsys):
    """A typo in --fingerprint was reported as a connection failure or a key mismatch (5)."""
    code, _, err = run(
        capsys, "hosts", "trust", f"root@127.0.0.1:{free_port()}", "--fingerprint", "bogus"
    )
    assert code == 2
    one_line_error(err, "'bogus'", "not a SHA256", "try:")


def test_P21_classify_glob_that_matches_nothing(capsys, tmp_path):
    """A quoted glob was taken as a file name, with a hint to `diagnose *`."""
    code, _, err = run(capsys, "classify", str(tmp_path / "*.nolog"))
    assert code == 3
    one_line_error(err, "no files matched")
    (tmp_path / "a.log").write_bytes((FIXTURES / "sglang_fail_capture.log").read_bytes())
    code, out, err = run(capsys, "classify", "--json", str(tmp_path / "*.log"))
    assert code == 0, err
    assert json.loads(out)[0]["signature"] == "capture_failed"


# ------------------------------------------------------------------------------- Ctrl-C


def _cli(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "forensics", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def _wait_for(pred, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError("condition not reached")
        time.sleep(0.02)


def test_H10_ctrl_c_during_a_big_ingest_exits_130_store_exactly_as_before(tmp_path):
    from scripts.bench_ingest import generate

    big = tmp_path / "big.log"
    generate(big, 100)
    ingest_fixtures("sglang_baseline.log")
    before = store_listing()
    lock = home() / "store.lock"
    p = _cli("ingest", str(big))
    try:
        # the lock holds the writer's pid once its transaction began (reading has started);
        # frozen while we look again, so that a loaded machine cannot let it finish first
        _wait_for(lambda: lock.exists() and lock.read_text().strip() == str(p.pid))
        os.kill(p.pid, signal.SIGSTOP)
        try:
            assert lock.read_text().strip() == str(p.pid)  # still inside its transaction
            p.send_signal(signal.SIGINT)
        finally:
            os.kill(p.pid, signal.SIGCONT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert "Traceback" not in err
    assert "Interrupted:" in err and "not" in err  # says what was (not) committed
    assert store_listing() == before
    assert not list(home().rglob("*.tmp"))


# H10 at each point of an ingest's start-up, deterministically: the child raises a real SIGINT
# at itself as the import of the named module begins (an audit hook), so the signal lands at
# that point whatever the machine's load. "atexit" is imported by polars' Rust start-up
# (on_startup.rs): a Ctrl-C there was a Rust panic, a traceback and exit 1, the flake of H10
# under load (forensics/entry.py: UNINTERRUPTIBLE_IMPORTS).
_INTERRUPT_AT = """
import os, signal, sys
point = sys.argv[1]
def hook(event, args):
    if event == "import" and args[0] == point and not os.path.exists(os.environ["FIRED"]):
        open(os.environ["FIRED"], "w").close()
        signal.raise_signal(signal.SIGINT)
sys.addaudithook(hook)
from forensics.entry import main
main(sys.argv[2:])
"""


@pytest.mark.parametrize(
    "point",
    [
        "forensics.cli",  # the CLI being imported
        "forensics.ingest.file",  # the command begins
        "polars",  # the parser's first import, the transaction begun
        "atexit",  # inside polars' Rust start-up
        "forensics_parsers.sglang.parser",  # polars initialised, the parser being imported
    ],
)
def test_H10_ctrl_c_at_each_point_of_an_ingests_start_up(tmp_path, point):
    ingest_fixtures("sglang_baseline.log")
    before = store_listing()
    driver = tmp_path / "interrupt_at.py"
    driver.write_text(_INTERRUPT_AT)
    fired = tmp_path / "fired"
    p = subprocess.run(
        [sys.executable, str(driver), point, "ingest", str(FIXTURES / "sglang_fail_capture.log")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "FIRED": str(fired)},
    )
    assert fired.exists(), f"{point} was never imported: {p.stderr[-2000:]}"
    said = [x for x in p.stderr.splitlines() if x.strip()]
    assert p.returncode == 130, p.stderr[-3000:]
    assert len(said) == 1 and said[0].startswith("Interrupted"), p.stderr[-3000:]
    assert store_listing() == before
    assert not list(home().rglob("*.tmp"))


def test_ctrl_c_during_the_health_wait_leaves_a_stoppable_launch(tmp_path):
    """Ctrl-C while waiting for /health left the launch recorded with no process group:
    `forensics stop` answered "no-process-group" and the server ran on, orphaned (S16)."""
    name = "sigint_launch"
    journal = home() / "logs" / f"{name}.log.journal.jsonl"
    p = _cli(
        "launch", "--sim", "--sim-speed", "0.05", "--name", name, "--port", str(free_port()),
        "--", "--model-path", "sim://k2",
    )  # fmt: skip
    pgid = None
    try:
        _wait_for(lambda: journal.exists() and '"event":"server"' in journal.read_text())
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        assert p.returncode == 130, err
        assert f"forensics stop {name}" in err and "Traceback" not in err
        rows = json.loads(
            subprocess.run(
                [sys.executable, "-m", "forensics", "launch", "--list", "--json"],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout
        )
        row = [r for r in rows if r["name"] == name][-1]
        assert row["status"] == "interrupted"
        pgid = row["pgid"]
        assert pgid and os.getpgid(pgid) == pgid  # recorded, and still running
        s = subprocess.run(
            [sys.executable, "-m", "forensics", "stop", name, "--grace", "5", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert s.returncode == 0, s.stderr
        assert json.loads(s.stdout)["outcome"] in ("terminated", "killed")
        _wait_for(lambda: not _group_alive(pgid), timeout=15)
    finally:
        if p.poll() is None:
            p.kill()
        if pgid and _group_alive(pgid):
            os.killpg(pgid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("cmd", [["show", "sglang_baseline"], ["signatures", "--json"]])
def test_store_without_any_error_rows(capsys, cmd):
    """A store of clean runs only (no `errors` table): `show` and `signatures` crashed on a
    missing column (exit 1)."""
    ingest_fixtures("sglang_baseline.log")
    code, out, err = run(capsys, *cmd)
    assert code == 0, err
    assert "Traceback" not in err and "internal error" not in err
    if cmd[0] == "signatures":
        assert json.loads(out) == []
    else:
        assert "sglang_baseline" in out


ONE_CTRL_C = r"""
import json, os, random, signal, socket, sys, threading, time
import polars as pl
from forensics import launcher
from forensics.launcher import records
from forensics.recipe import Recipe
from forensics.store import Store

root, tries = sys.argv[1], int(sys.argv[2])
real_record, rng = records.record, random.Random(7)
frame = pl.DataFrame({"a": list(range(50)), "b": ["x" * 40] * 50})


def record(store, row):
    # the Ctrl-C lands while polars writes (the write of the `running` record, as in CI)
    if row.get("status") == "running":
        threading.Timer(rng.uniform(0.02, 0.1), os.kill, (os.getpid(), signal.SIGINT)).start()
        for _ in range(5000):
            frame.write_parquet(f"{root}/scratch.parquet")
    real_record(store, row)


records.record = record  # where the launcher looks it up
out = []
for i in range(tries):
    store = Store.open(f"{root}/store{i}", create=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    recipe = Recipe(name=f"run{i}", server=["python3", "-m", "sglang.launch_server"],
                    log_path=f"{root}/run{i}.log", health_url=None)
    sim = {"speed": 0.05, "port": port, "python": sys.executable}
    try:
        launcher.launch(store, recipe, sim=sim, deadline=30)
        seen = "not interrupted"
    except KeyboardInterrupt:
        seen = "interrupted"
    row = launcher.find_launch(store, f"run{i}")
    # what `forensics stop` does with it: the group from the record, else (interrupted before
    # the server step began) from the journal once the server's monitor wrote it
    stopped = None
    for _ in range(100):
        stopped = launcher.stop(store, f"run{i}", grace_s=2)["outcome"]
        if stopped in ("terminated", "killed"):
            break
        time.sleep(0.2)
    out.append({"seen": seen, "status": row["status"], "pid": row["pid"], "stopped": stopped})
print(json.dumps(out))
"""


def test_one_ctrl_c_during_a_polars_write_still_records_the_interrupted_launch(tmp_path):
    """SIGINT while polars writes raises twice (polars' own KeyboardInterrupt, then Python's
    handler's). In CI the second one cut the launch's handler short: the launch stayed
    `registered`, with no process group for `forensics stop`. Real signals, real polars
    writes, a real launch, in a process of its own (pytest stops on KeyboardInterrupt)."""
    res = subprocess.run(
        [sys.executable, "-c", ONE_CTRL_C, str(tmp_path), "4"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert res.returncode == 0, res.stderr[-2000:]
    tries = json.loads(res.stdout)
    assert [t["seen"] for t in tries] == ["interrupted"] * 4
    assert [t["status"] for t in tries] == ["interrupted"] * 4, tries
    assert all(t["pid"] for t in tries), tries  # recorded
    assert all(t["stopped"] in ("terminated", "killed") for t in tries), tries  # `stop` ends it
