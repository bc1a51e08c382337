"""An unchanged re-ingest stays cheap as files add up (issue 15, "Unchanged re-ingest"): the
inode index of the stored sources is built once per transaction in a parallel ingest too, and
a small file is hashed without a thread of its own; the outcome is the same."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import forensics.ingest.batch as batch_mod
import forensics.ingest.hashing as hashing
from forensics.ingest import ingest
from forensics.store import Store
from tests.conftest import FIXTURES

LOGS = ("sglang_eagle3_cg_5dt.log", "sglang_two_launches.log", "sglang_fail_capture.log")


def _logs(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    for name in LOGS:
        shutil.copy(FIXTURES / name, d / name)
    return d


def test_parallel_reingest_builds_the_inode_index_once(tmp_path, monkeypatch):
    d = _logs(tmp_path)
    store = Store.open(tmp_path / "store")
    first = ingest(store, [str(d)], jobs=2)
    assert sorted(f.status for f in first.files) == ["new"] * len(LOGS)
    built = []
    real = batch_mod._inode_index

    def counted(tx):
        built.append(tx)
        return real(tx)

    monkeypatch.setattr(batch_mod, "_inode_index", counted)
    again = ingest(store, [str(d)], jobs=2)
    assert [f.status for f in again.files] == ["unchanged"] * len(LOGS)
    assert [f.runs for f in again.files] == [f.runs for f in first.files]
    assert len(built) == 1  # one transaction: one index (was two a file)


def test_small_unchanged_files_are_hashed_without_a_thread(tmp_path, monkeypatch):
    d = _logs(tmp_path)
    store = Store.open(tmp_path / "store")
    ingest(store, [str(d)], jobs=1)
    threads = []
    real = hashing._Hasher.beside

    def counted(self):
        threads.append(self)
        return real(self)

    monkeypatch.setattr(hashing._Hasher, "beside", counted)
    again = ingest(store, [str(d)], jobs=1)
    assert [f.status for f in again.files] == ["unchanged"] * len(LOGS)
    assert threads == []
    # a file of BESIDE_MIN_BYTES or more to hash: read and hashed at once
    monkeypatch.setattr(hashing, "BESIDE_MIN_BYTES", 1)
    again = ingest(store, [str(d)], jobs=1)
    assert [f.status for f in again.files] == ["unchanged"] * len(LOGS)
    assert len(threads) == len(LOGS)


def test_a_local_reingest_imports_no_ssh_nor_config_module(tmp_path):
    """The SSH side and the config file (forensics.hosts' lazy names) load with the first
    remote location or config lookup, not for local files; the names still resolve."""
    d = _logs(tmp_path)
    env = {**os.environ, "FORENSICS_HOME": str(tmp_path / "st")}
    lazy = ("forensics.hosts.ssh", "forensics.hosts.config", "forensics.hosts.trust", "tomllib")
    probe = (
        "import atexit, sys; atexit.register(lambda: print(*[m in sys.modules for m in "
        f"{lazy!r}]));from forensics.entry import main; main()"
    )
    for _ in range(2):  # new (its verdicts may load other things), then unchanged
        p = subprocess.run(
            [sys.executable, "-c", probe, "ingest", "--json", str(d)], env=env, capture_output=True
        )
        assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.decode().rsplit("}", 1)[0] + "}")["files_by_status"] == {
        "unchanged": len(LOGS)
    }
    assert p.stdout.decode().split()[-len(lazy) :] == ["False"] * len(lazy)
    from forensics import hosts

    assert hosts.SSHHost.__module__ == "forensics.hosts.ssh"
    assert hosts.load_config.__module__ == "forensics.hosts.config"


# What an unchanged re-ingest of one file needs: the CLI, the ingest and store modules, the
# hash. Not these (issue 15, "Unchanged re-ingest, ninth stop"): the parser and polars, the
# other command groups' modules, a thread pool's (concurrent.futures, with logging), a
# subprocess's, a table's (shutil); nor the secret rules compiled (the output holds nothing
# HINT picks).
NOT_IMPORTED = (
    "polars",
    "forensics_parsers.sglang",
    "forensics.cli_diagnose",
    "forensics.cli_sim",
    "forensics.cli_store",
    "concurrent.futures",
    "logging",
    "subprocess",
    "shutil",
)


@pytest.mark.parametrize("stored_by", ["xxh3_128", "sha1"])
def test_an_unchanged_reingest_loads_only_what_it_uses(tmp_path, stored_by):
    """One unchanged file, as big as to be hashed in a thread beside its reads (its
    threshold lowered in the probe); the same outcome as before. ``sha1``: stored by the
    release before xxh3_128, so this re-ingest also commits its record's new digest (twelfth
    stop): a commit of records alone, which loads nothing more."""
    log = tmp_path / "x.log"
    shutil.copy(FIXTURES / LOGS[0], log)
    env = {**os.environ, "FORENSICS_HOME": str(tmp_path / "st")}
    probe = (
        "import atexit, json, sys\n"
        "def said():\n"
        "    s = sys.modules['forensics_parsers.secrets']\n"
        "    compiled = getattr(s, '_RULES', None) is not None or (\n"
        "        getattr(s, '_rules', None) is not None and s._rules._rules is not None)\n"
        f"    print(json.dumps([m for m in {NOT_IMPORTED!r} if m in sys.modules] + \n"
        "                     ['secret rules compiled'] * compiled))\n"
        "atexit.register(said)\n"
        "import forensics.ingest.hashing as h; h.BESIDE_MIN_BYTES = 1\n"
        "if sys.argv[1] == 'sha1': h.CURRENT = h.HASHES['sha1']\n"
        "from forensics.entry import main; main(sys.argv[2:])"
    )
    outs = []
    for by in (stored_by, "xxh3_128"):  # new, then unchanged
        p = subprocess.run(
            [sys.executable, "-c", probe, by, "ingest", "--json", str(log)],
            env=env,
            capture_output=True,
        )
        assert p.returncode == 0, p.stderr
        document, loaded = p.stdout.decode().rsplit("}", 1)
        outs.append((json.loads(document + "}"), json.loads(loaded)))
    (new, _), (again, loaded) = outs
    assert again["files_by_status"] == {"unchanged": 1}
    assert [f["runs"] for f in again["file_details"]] == [f["runs"] for f in new["file_details"]]
    assert loaded == []
    [record] = json.loads((tmp_path / "st" / "manifest.json").read_text())["sources"].values()
    assert record["content_hash"].startswith("xxh3_128:")


def test_a_ctrl_c_while_the_hash_thread_starts_leaves_no_thread(monkeypatch):
    """A KeyboardInterrupt in ``_Updates``' ``Thread.start`` (it waits for the new thread to
    run): the thread had started and waited for a call no one would hand it; the interrupted
    ingest printed "Interrupted:" and its interpreter waited for that thread forever at exit
    (a flake of tests/test_ingest_parallel.py's ctrl-c case: TimeoutExpired). It ends."""
    import threading

    started: list[threading.Thread] = []
    start = threading.Thread.start

    def interrupted_start(self):
        start(self)
        started.append(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", interrupted_start)
    try:
        hashing._Updates()
    except KeyboardInterrupt:
        pass
    monkeypatch.undo()
    (thread,) = started
    thread.join(30)
    alive = thread.is_alive()
    if alive:  # the old code's thread: ended here, so this test's process can exit
        thread._target.__self__._ready.release()
    assert not alive, "the hash thread outlived its interrupted start"
