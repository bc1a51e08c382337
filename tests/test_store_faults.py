"""Full disk and read-only stores (issue 14, data loss: "a full disk mid-ingest is internal
error … No space left, leaves a *.parquet.tmp, and afterwards runs fails too; read-only
store: even runs fails on store.lock").

Real file systems: a 1 MiB tmpfs (ENOSPC for real) and the same tmpfs remounted read-only
(EROFS), mounted inside tmp_path and unmounted after. Mounting needs root; without it the
read-only case runs on a chmod'ed folder instead.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from dataclasses import dataclass

import pytest

from forensics.cli import main
from tests.conftest import FIXTURES, as_bound_by_permissions

IS_ROOT = os.geteuid() == 0


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def fx(capsys):
    """The real entry point, in-process: fx(home, *args) -> returncode, stdout, stderr."""

    def call(home, *args):
        with pytest.raises(SystemExit) as exc:
            main(["--store", str(home), *args])
        out, err = capsys.readouterr()
        assert "Traceback" not in err, err
        return Done(exc.value.code or 0, out, err)

    return call


def _without_root_bypass(home, *args):
    """fx's call in a process of its own under ``as_bound_by_permissions`` (root without
    CAP_DAC_OVERRIDE: file modes bind it as they bind a user)."""
    import sys

    p = subprocess.run(
        [
            *as_bound_by_permissions(),
            sys.executable,
            "-m",
            "forensics",
            "--store",
            str(home),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in p.stderr, p.stderr
    return Done(p.returncode, p.stdout, p.stderr)


@pytest.fixture
def small_fs(tmp_path):
    if not IS_ROOT:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "mnt"
    mnt.mkdir(mode=0o700)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mnt)], check=True
    )
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def snapshot(home):
    return {
        str(p.relative_to(home)): p.read_bytes()
        for p in sorted(home.rglob("*"))
        if p.is_file() and p.name != "store.lock"
    }


def _seed(fx, home):
    assert fx(home, "ingest", str(FIXTURES / "sglang_two_launches.log")).returncode == 0
    assert fx(home, "label", "sglang_two_launches#1", "ok").returncode == 0
    return fx(home, "runs", "--json")


def test_full_disk_mid_ingest_is_exit_7_and_the_store_reads_as_before(small_fs, tmp_path, fx):
    """Full-disk class: ENOSPC during an ingest of many logs is one line, exit 7; no
    *.parquet.tmp is left; `runs` and `store check` work afterwards and every run and label
    of before is still there."""
    (tmp_path / "logs").mkdir()
    logs = []
    rng = random.Random(7)
    for i in range(60):  # ~60 x 30 KiB of rows that do not compress: more than 1 MiB holds
        name = ("sglang_eagle3_cg_5dt.log", "sglang_eagle3_cg_16dt.log")[i % 2]
        noise = "".join(
            f"[2025-10-24 16:25:00 TP0] note {rng.getrandbits(512):0128x}\n" for _ in range(200)
        )
        log = tmp_path / "logs" / f"{i:02d}_{name}"
        log.write_text((FIXTURES / name).read_text() + noise)
        logs.append(str(log))
    home = small_fs / "h"
    before = json.loads(_seed(fx, home).stdout)
    p = fx(home, "ingest", *logs)
    assert p.returncode == 7, p.stderr
    err = [ln for ln in p.stderr.strip().splitlines() if ln.startswith("Error: ")]
    assert len(err) == 1 and "no space left" in err[0] and "try:" in err[0], p.stderr
    assert not list(home.rglob("*.parquet.tmp")) and not list(home.rglob("*.tmp"))
    p = fx(home, "runs", "--json")
    assert p.returncode == 0, p.stderr
    after = {r["run_id"]: r for r in json.loads(p.stdout)}
    for r in before:
        assert after[r["run_id"]]["phase"] == r["phase"]
    assert fx(home, "store", "check").returncode == 0


@pytest.mark.parametrize("how", ["mount -o ro", "chmod"])
def test_read_only_store_serves_reads_and_refuses_writes_with_exit_7(tmp_path, small_fs, how, fx):
    """Read-only class: runs, show, diagnose, advise and signatures work on a read-only store
    (no lock file is needed to read; a read never writes); ingest and label exit 7 with one
    line and leave the store byte for byte as it was."""
    home = (small_fs if how == "mount -o ro" else tmp_path) / "h"
    _seed(fx, home)
    if how == "chmod" and IS_ROOT:
        fx = _without_root_bypass  # root writes through file modes: run as one bound by them
    (home / "store.lock").unlink()  # a store copied read-only may well have none
    shutil.rmtree(home / "models", ignore_errors=True)  # nor a cached model
    before = snapshot(home)
    if how == "mount -o ro":
        subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    else:
        for d in [home, *[p for p in home.rglob("*") if p.is_dir()]]:
            d.chmod(0o500)
    try:
        for cmd in (
            ["runs"],
            ["runs", "--json"],
            ["show", "two_launches#1"],
            ["diagnose", "two_launches#2"],
            ["advise"],
            ["signatures"],
            ["store", "check"],
        ):
            p = fx(home, *cmd)
            assert p.returncode == 0, (cmd, p.stderr)
        for cmd in (
            ["ingest", str(FIXTURES / "sglang_eagle3_cg_5dt.log")],
            ["label", "two_launches#2", "ok"],
        ):
            p = fx(home, *cmd)
            assert p.returncode == 7, (cmd, p.stdout, p.stderr)
            line = p.stderr.strip().splitlines()[-1]
            assert line.startswith("Error: ") and ("read-only" in line or "permission" in line)
        assert snapshot(home) == before
    finally:
        if how == "chmod":
            for d in [home, *[p for p in home.rglob("*") if p.is_dir()]]:
                d.chmod(0o700)
