"""The content hash (issue 15, "The content hash and the wire, eleventh stop"): xxh3_128 is
written, and a store written before it (bare sha1 digests, fixtures/stores/v4-sha1) keeps
working: its unchanged logs stay unchanged (nothing added, nothing lost), a changed one is
still seen, and a log it holds that grew, or was renamed and grew, resumes where it was."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import xxhash

import forensics.ingest.hashing as hashing
from forensics.ingest import ingest
from forensics.store import Store
from tests.conftest import FIXTURES, ROOT
from tests.test_store_shared import _place, _rows

SHA1_LOGS = "/tmp/forensics-fixture-sha1"  # where fixtures/stores/v4-sha1 read its logs


def _xxh3(data: bytes) -> str:
    return "xxh3_128:" + xxhash.xxh3_128(data).hexdigest()


@pytest.fixture
def sha1_logs():
    """SHA1_LOGS is one folder for every test run on the machine (parallel workers, other
    checkouts): a test that places its logs there holds it alone while it runs."""
    import fcntl

    os.makedirs(SHA1_LOGS, exist_ok=True)
    with open(f"{SHA1_LOGS}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _old_store(tmp_path) -> tuple[Path, dict[str, tuple[str, dict]]]:
    """A copy of fixtures/stores/v4-sha1 -> (its folder, log name -> (source id, record))."""
    home = tmp_path / "old"
    shutil.copytree(ROOT / "fixtures" / "stores" / "v4-sha1", home)
    home.chmod(0o700)
    old = json.loads((home / "manifest.json").read_text())["sources"]
    return home, {os.path.basename(r["path"]): (sid, r) for sid, r in old.items()}


def _placed(name: str, data: bytes, mtime: float) -> str:
    path = f"{SHA1_LOGS}/{name}"
    _place(path, data)
    os.utime(path, (mtime, mtime))
    return path


# jobs=2: the logs opened ahead of their turn (forensics/ingest/ahead.py)
@pytest.mark.parametrize("jobs", [1, 2])
def test_a_store_of_sha1_digests_keeps_its_unchanged_logs_and_sees_the_changed_ones(
    tmp_path, jobs, sha1_logs
):
    home, rec = _old_store(tmp_path)

    def _mtime(name: str) -> float:
        return rec[name + ".log"][1]["mtime"]

    assert all(len(r["content_hash"]) == 40 for _, r in rec.values())  # bare sha1 hex
    full = (FIXTURES / "sglang_eagle3_cg_5dt.log").read_bytes()
    rewritten = bytearray((FIXTURES / "sglang_baseline.log").read_bytes())
    at = rewritten.index(b"gen throughput (token/s): ") + len(b"gen throughput (token/s): ")
    rewritten[at : at + 1] = b"9" if rewritten[at : at + 1] != b"9" else b"8"
    paths = [
        _placed("same.log", (FIXTURES / "sglang_two_launches.log").read_bytes(), _mtime("same")),
        # the same size and mtime as stored, one byte other: only the content hash tells
        _placed("rewrite.log", bytes(rewritten), _mtime("rewrite")),
        _placed("grows.log", full, 1796200100),
    ]
    assert os.path.getsize(paths[1]) == rec["rewrite.log"][1]["size"]

    out = ingest(Store.open(home), paths, jobs=jobs)
    got = {os.path.basename(f.path): f for f in out.files}
    assert {n: f.status for n, f in got.items()} == {
        "same.log": "unchanged",
        "rewrite.log": "rewritten",
        "grows.log": "grown",
    }
    assert got["grows.log"].bytes_parsed == len(full) - rec["grows.log"][1]["offset"]
    new = json.loads((home / "manifest.json").read_text())["sources"]
    # verified by its sha1, unchanged: the record as it was, with the xxh3 of the same read
    same = (FIXTURES / "sglang_two_launches.log").read_bytes()
    assert new[rec["same.log"][0]] == {**rec["same.log"][1], "content_hash": _xxh3(same)}
    assert new[rec["rewrite.log"][0]]["content_hash"] == _xxh3(bytes(rewritten))
    assert new[rec["grows.log"][0]]["content_hash"] == _xxh3(full)
    # each source holds what a clean ingest of the files holds: nothing twice, nothing lost
    clean = Store.open(tmp_path / "clean")
    ingest(clean, paths)
    st = Store.open(home)
    for sid, _ in rec.values():
        assert _rows(st, sid) == _rows(clean, sid)
    assert sorted(st.sources()) == sorted(clean.sources())

    again = ingest(Store.open(home), paths, jobs=jobs)  # the new digests and the kept sha1 alike
    assert [f.status for f in again.files] == ["unchanged"] * 3


def test_a_log_stored_with_a_sha1_then_renamed_and_grown_continues(tmp_path, monkeypatch):
    full = (FIXTURES / "sglang_eagle3_cg_5dt.log").read_bytes()
    cut = full.index(b"\n", len(full) // 2) + 1
    a, c = tmp_path / "a.log", tmp_path / "c.log"
    a.write_bytes(full[:cut])
    store = Store.open(tmp_path / "store")
    monkeypatch.setattr(hashing, "CURRENT", hashing.HASHES["sha1"])  # the release before
    [first] = ingest(store, [str(a)]).files
    monkeypatch.undo()
    assert len(store.sources()[first.source_id]["content_hash"]) == 40
    a.rename(c)
    with open(c, "ab") as f:
        f.write(full[cut:])
    out = ingest(Store.open(tmp_path / "store"), [str(c)])
    [f] = out.files
    assert (f.status, f.source_id, f.bytes_parsed) == ("grown", first.source_id, len(full) - cut)
    assert any("renamed and grown since" in w for w in out.warnings)
    st = Store.open(tmp_path / "store")
    assert st.sources()[f.source_id]["content_hash"] == _xxh3(full)
    clean = Store.open(tmp_path / "clean")
    [whole] = ingest(clean, [str(c)]).files
    assert _rows(st, f.source_id) == _rows(clean, whole.source_id)


def test_the_algorithm_of_a_stored_digest():
    """One reading of a stored digest's algorithm, no digest included (a new source's)."""
    assert hashing.algorithm(None) is None and hashing.algorithm("") is None
    assert hashing.algorithm("ab" * 20) is hashing.HASHES["sha1"]
    assert hashing.algorithm(_xxh3(b"x")) is hashing.CURRENT
    assert hashing.algorithm("blake3:00") is None
    assert hashing._Hasher(like=None).computes(None)
    assert not hashing._Hasher(like=None).computes("ab" * 20)
    assert hashing._Hasher(like="ab" * 20).computes("ab" * 20)


def _as_stored(rec: dict[str, tuple[str, dict]]) -> list[str]:
    """The fixture store's three logs placed as it read them (none changed since)."""
    eagle = (FIXTURES / "sglang_eagle3_cg_5dt.log").read_bytes()
    data = {
        "same.log": (FIXTURES / "sglang_two_launches.log").read_bytes(),
        "rewrite.log": (FIXTURES / "sglang_baseline.log").read_bytes(),
        "grows.log": eagle[: rec["grows.log"][1]["size"]],
    }
    return [_placed(n, data[n], rec[n][1]["mtime"]) for n in sorted(data)]


def _counting_sha1(monkeypatch) -> list[int]:
    """The content hash's sha1 (not the head's), counted: one entry per hash begun."""
    import dataclasses
    import hashlib

    begun: list[int] = []

    def new():
        begun.append(1)
        return hashlib.sha1()

    sha1 = dataclasses.replace(hashing.HASHES["sha1"], new=new)
    monkeypatch.setitem(hashing.HASHES, "sha1", sha1)
    return begun


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_unchanged_log_verified_by_its_sha1_is_stored_with_its_xxh3(
    tmp_path, monkeypatch, jobs, sha1_logs
):
    """Twelfth stop: the re-ingest that verifies a sha1 record unchanged stores the xxh3 of
    the same read (its record's one change, one commit); the next re-ingest computes no
    sha1 and writes nothing; the rows are those the store held; a changed log is seen."""
    home, rec = _old_store(tmp_path)
    paths = _as_stored(rec)
    before = json.loads((home / "manifest.json").read_text())
    rows = {sid: _rows(Store.open(home), sid) for sid, _ in rec.values()}
    begun = _counting_sha1(monkeypatch)

    first = ingest(Store.open(home), paths, jobs=jobs)
    assert [f.status for f in first.files] == ["unchanged"] * 3
    assert len(begun) == 3  # each verified by its sha1, once
    after = json.loads((home / "manifest.json").read_text())
    for name, path in zip(sorted(rec), paths):
        sid, old = rec[name]
        with open(path, "rb") as f:
            assert after["sources"][sid] == {**old, "content_hash": _xxh3(f.read())}
    assert after["generation"] == before["generation"] + 1
    assert {k: v for k, v in after.items() if k not in ("sources", "generation")} == {
        k: v for k, v in before.items() if k not in ("sources", "generation")
    }

    begun.clear()
    raw = (home / "manifest.json").read_bytes()
    second = ingest(Store.open(home), paths, jobs=jobs)
    assert [f.status for f in second.files] == ["unchanged"] * 3
    assert begun == []  # verified by xxh3 alone
    assert (home / "manifest.json").read_bytes() == raw  # no commit
    st = Store.open(home)
    assert {sid: _rows(st, sid) for sid, _ in rec.values()} == rows  # nothing twice, nothing lost

    # one byte other, the same size and mtime: the xxh3 record tells
    same = bytearray((FIXTURES / "sglang_two_launches.log").read_bytes())
    same[-2:-1] = b"x" if same[-2:-1] != b"x" else b"y"
    _placed("same.log", bytes(same), rec["same.log"][1]["mtime"])
    third = ingest(Store.open(home), paths, jobs=jobs)
    assert {os.path.basename(f.path): f.status for f in third.files}["same.log"] == "rewritten"


_KILLED_AT_THE_MANIFEST = """
import os, signal, sys
import forensics.store.transaction as t
from forensics.ingest import ingest
from forensics.store import Store
real = t._write_durably
def write(path, data):
    real(path, data)  # the new manifest written beside the old, then the process killed
    os.kill(os.getpid(), signal.SIGKILL)
t._write_durably = write
ingest(Store.open(sys.argv[1]), sys.argv[2:])
"""


def test_a_kill_while_the_xxh3_digest_is_stored_leaves_the_sha1_record(tmp_path, sha1_logs):
    """Killed (SIGKILL) between the new manifest's write and its rename: the sha1 record
    is there as it was, its log still unchanged, and the next re-ingest stores the xxh3."""
    import subprocess
    import sys

    home, rec = _old_store(tmp_path)
    paths = _as_stored(rec)
    before = json.loads((home / "manifest.json").read_text())
    p = subprocess.run(
        [sys.executable, "-c", _KILLED_AT_THE_MANIFEST, str(home), *paths], capture_output=True
    )
    assert p.returncode == -9, p.stderr
    assert json.loads((home / "manifest.json").read_text()) == before
    out = ingest(Store.open(home), paths)
    assert [f.status for f in out.files] == ["unchanged"] * 3
    got = json.loads((home / "manifest.json").read_text())["sources"]
    assert all(r["content_hash"].startswith("xxh3_128:") for r in got.values())
