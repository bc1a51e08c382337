"""Fifth round of the hidden-suite rehearsal (issue 14), class "correctness of the store":
real files, the real CLI in its own process, nothing faked (docs/bad-inputs.md, fifth round)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).parent.parent / "fixtures"


def _cli(home: Path, *args: str, rc: int = 0) -> subprocess.CompletedProcess:
    env = {**os.environ, "FORENSICS_HOME": str(home)}
    p = subprocess.run(
        [sys.executable, "-m", "forensics", *args], env=env, capture_output=True, text=True
    )
    assert p.returncode == rc, (args, p.returncode, p.stderr)
    assert "Traceback" not in p.stderr
    return p


def _in_process(home: Path, *args: str) -> str:
    """``forensics ARGS`` on the store ``home`` through click's runner: its output (exit 0)."""
    from click.testing import CliRunner

    from forensics.cli import cli

    r = CliRunner().invoke(cli, list(args), env={"FORENSICS_HOME": str(home)})
    assert r.exit_code == 0 and r.exception is None, (args, r.exit_code, r.output)
    return r.output


def _runs(home: Path) -> list[dict]:
    return json.loads(_cli(home, "runs", "--json").stdout)


def _first_half_ingested(tmp_path: Path) -> tuple[bytes, bytes, Path, Path]:
    """A log's first half (cut at a line's end near its middle) as ``logs/a.log``, ingested
    into the store ``st``: (first half, second half, the logs folder, the store's home)."""
    full = (FIXTURES / "sglang_eagle3_cg_5dt.log").read_bytes()
    cut = full.index(b"\n", len(full) // 2) + 1
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.log").write_bytes(full[:cut])
    home = tmp_path / "st"
    _cli(home, "ingest", str(logs))
    return full[:cut], full[cut:], logs, home


def _key(rows: list[dict]) -> list[tuple]:
    """What a run is, whatever name its file had."""
    return sorted((r["phase"], r["signature"], r.get("started_at")) for r in rows)


# --- class "Correctness of the store": a log renamed and grown is the same log continued ---


def test_a_log_renamed_then_grown_is_the_same_log_continued(tmp_path):
    """``mv a.log c.log`` then the server appends: one launch (stored as ``a``), its rows those
    of the whole file ingested at once, not a second run ``c`` beside ``a``."""
    head, rest, logs, home = _first_half_ingested(tmp_path)
    os.rename(logs / "a.log", logs / "c.log")
    with open(logs / "c.log", "ab") as f:
        f.write(rest)
    p = _cli(home, "ingest", str(logs))
    assert "renamed and grown" in p.stderr
    got = _runs(home)
    assert [r["name"] for r in got] == ["a"]
    ref_logs = tmp_path / "ref"
    ref_logs.mkdir()
    (ref_logs / "a.log").write_bytes(head + rest)
    _cli(tmp_path / "ref-st", "ingest", str(ref_logs))
    assert _key(got) == _key(_runs(tmp_path / "ref-st"))
    # unchanged since: recognised again, nothing added; then grown once more
    assert "renamed" in _cli(home, "ingest", str(logs)).stderr
    with open(logs / "c.log", "ab") as f:
        f.write(rest)
    _cli(home, "ingest", str(logs))
    assert [r["name"] for r in _runs(home)] == ["a"]
    _cli(home, "store", "check")


def test_a_copy_that_grows_is_another_log(tmp_path):
    """A copy is another file (another inode), even when the original is gone: its own
    source, the original's run kept (decided: identity is the file, not its content)."""
    _, rest, logs, home = _first_half_ingested(tmp_path)
    shutil.copy(logs / "a.log", logs / "c.log")
    (logs / "a.log").unlink()
    with open(logs / "c.log", "ab") as f:
        f.write(rest)
    _cli(home, "ingest", str(logs))
    assert sorted(r["name"] for r in _runs(home)) == ["a", "c"]


def test_a_hard_link_grown_through_its_other_name_is_one_log(tmp_path):
    _, rest, logs, home = _first_half_ingested(tmp_path)
    os.link(logs / "a.log", logs / "b.log")
    with open(logs / "b.log", "ab") as f:
        f.write(rest)
    _cli(home, "ingest", str(logs))
    assert [r["name"] for r in _runs(home)] == ["a"]


def test_a_renamed_file_rewritten_in_place_is_a_new_log(tmp_path):
    """Same inode, old name gone, but its first bytes are no longer the stored log's: not a
    continuation (the stored run stays, the new content is a source of its own)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.log").write_bytes((FIXTURES / "sglang_fail_capture.log").read_bytes())
    home = tmp_path / "st"
    _cli(home, "ingest", str(logs))
    os.rename(logs / "a.log", logs / "c.log")
    other = (FIXTURES / "sglang_eagle3_cg_5dt.log").read_bytes()
    with open(logs / "c.log", "r+b") as f:  # in place: the inode stays
        f.write(other)
    p = _cli(home, "ingest", str(logs))
    assert "renamed and grown" not in p.stderr
    assert sorted(r["name"] for r in _runs(home)) == ["a", "c"]


# --- class "kill at any moment": a killed writer's *.tmp is gone once the next command ran ---


def test_a_dead_writers_tmp_files_go_with_the_next_command_even_a_read(tmp_path):
    home = tmp_path / "st"
    _cli(home, "ingest", str(FIXTURES / "sglang_fail_capture.log"))
    left = [home / "tables" / "runs" / "x-g9-0123456789ab.parquet.tmp", home / "manifest.json.tmp"]
    for f in left:
        f.write_bytes(b"half a part")  # what a kill -9 mid-write leaves
    # while a writer holds the lock its files are its own: kept
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl,sys,time; f=open(sys.argv[1],'r+'); "
         "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
         str(home / "store.lock")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        _cli(home, "runs", "--json")
        assert all(f.exists() for f in left)
    finally:
        holder.kill()
        holder.wait()
    assert len(_runs(home)) == 1  # a read: no writer now, the leftovers are removed
    assert not any(f.exists() for f in left)
    assert "ok" in _cli(home, "store", "check").stdout


def test_kill_9_of_label_and_ingest_at_several_moments_leaves_nothing_behind(tmp_path):
    """SIGKILL wherever it lands (no timing asserted): after the next command no *.tmp is
    left, the store checks clean, and the next ingest gives the runs of an ingest never
    killed, the label kept."""
    import signal
    import time

    logs = tmp_path / "logs"
    logs.mkdir()
    for n in ("sglang_fail_capture.log", "sglang_two_launches.log", "sglang_eagle3_cg_5dt.log"):
        shutil.copy(FIXTURES / n, logs / n)
    ref = tmp_path / "ref"
    _cli(ref, "ingest", str(logs))
    want = _key(_runs(ref))
    home = tmp_path / "st"
    _cli(home, "ingest", str(logs / "sglang_fail_capture.log"))
    _cli(home, "label", "sglang_fail_capture", "capture")
    env = {**os.environ, "FORENSICS_HOME": str(home)}
    for delay in (0.2, 0.6, 1.0, 1.5, 2.5):
        for args in (["label", "sglang_fail_capture", "capture"], ["ingest", str(logs)]):
            p = subprocess.Popen([sys.executable, "-m", "forensics", *args], env=env)
            time.sleep(delay)
            p.send_signal(signal.SIGKILL)
            p.wait()
            # the next command and the check run in this process (the killed one was real):
            # the same code as a fresh `forensics runs`, without 20 interpreter starts
            _in_process(home, "runs", "--json")
            assert not list(home.rglob("*.tmp")), (args, delay)
            assert "ok" in _in_process(home, "store", "check")
    _cli(home, "ingest", str(logs))
    got = _runs(home)
    assert _key(got) == want
    assert next(r for r in got if r["name"] == "sglang_fail_capture")["phase"] == "capture"


# --- class "odd stores": the store folder replaced while a command writes it ---


def test_a_store_folder_replaced_while_ingest_runs(tmp_path):
    """`mv store old; mkdir store` while an ingest parses: its commit finds that the lock it
    holds is no longer the store's (exit 7, one line) and writes nothing into the new folder;
    both folders check clean and the old one resumes. Whenever the swap lands, no folder is
    left with a manifest that lists parts it does not have."""
    import time

    real = sorted(
        Path(os.environ.get("FORENSICS_SHARED", "/nonexistent")).glob("real-logs-dev/*.log")
    )
    blob = (
        b"".join(p.read_bytes() for p in real[:20])
        or (FIXTURES / "sglang_eagle3_cg_5dt.log").read_bytes()
    )
    log = tmp_path / "big.log"
    log.write_bytes(blob * max(1, (8 << 20) // len(blob)))
    home = tmp_path / "st"
    _cli(home, "ingest", str(FIXTURES / "sglang_fail_capture.log"))
    env = {**os.environ, "FORENSICS_HOME": str(home)}
    p = subprocess.Popen(
        [sys.executable, "-m", "forensics", "ingest", str(log)],
        env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    while p.poll() is None and not (home / "store.lock").read_bytes().strip():
        time.sleep(0.05)  # the ingest holds the lock: it is writing
    os.rename(home, tmp_path / "old")
    home.mkdir()
    err = p.communicate()[1]
    assert p.returncode in (0, 7), err
    if p.returncode == 7:
        assert err.count("Error:") == 1 and "moved or replaced" in err
    assert "Traceback" not in err
    for folder in (home, tmp_path / "old"):
        if (folder / "manifest.json").exists():
            assert "ok" in _cli(folder, "store", "check").stdout
    assert not list(home.rglob("*.parquet"))
    _cli(tmp_path / "old", "ingest", str(log))
    assert "ok" in _cli(tmp_path / "old", "store", "check").stdout


# --- class "odd stores": a disk so full that not even the lock's pid note fits ---


def test_writers_on_a_full_disk_say_so_in_one_line(tmp_path):
    """The store on a tmpfs filled to the last byte: label, ingest, train are exit 7 with one
    `Error:` line (label was an internal error: the lock file's pid note hit ENOSPC), reads
    work, nothing is left half-written."""
    if os.geteuid() != 0:
        import pytest

        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], check=True)
    try:
        home = mnt / "home"
        _cli(home, "ingest", str(FIXTURES / "sglang_fail_capture.log"))
        before = _runs(home)
        with open(mnt / "filler", "wb", buffering=0) as f:  # to the last byte
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass
        for args in (
            ["label", "sglang_fail_capture", "runtime"],
            ["ingest", str(FIXTURES / "sglang_fail_load_kv_oom.log")],
            ["classify", "train"],
        ):
            p = _cli(home, *args, rc=7)
            assert p.stderr.count("Error:") == 1 and "internal error" not in p.stderr
            assert not list(home.rglob("*.tmp"))
        assert _runs(home) == before
        assert "ok" in _cli(home, "store", "check").stdout
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
