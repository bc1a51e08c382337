"""One cache key with a content hash, hard links, the store's own files (issue 14,
correctness), the declared schemas and the migrations (issue 12 item 5), batched commits
(issue 14: "each file rewrites and fsyncs the whole manifest")."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import polars as pl
import pytest

from forensics.cli import main
from forensics.ingest import ingest
from forensics.migrations import MIGRATIONS, SCHEMA_VERSION, pending
from forensics.store import Store
from forensics.tables import TABLES, StoreSchemaError
from tests.conftest import FIXTURES, ROOT


def run(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return (exc.value.code or 0), out, err


def test_content_key_rewrite_with_same_size_and_mtime_reparsed_and_every_view_agrees(
    tmp_path, capsys
):
    """Cache-key class: a log rewritten in place with the same size and mtime (and the same
    first 4 KiB) is re-parsed, and runs, show and diagnose all give the new verdict."""
    log = tmp_path / "sglang_x.log"
    ok = (FIXTURES / "sglang_two_launches.log").read_bytes()  # two launches that served
    log.write_bytes(ok)
    assert run(capsys, "ingest", str(log))[0] == 0
    code, out, _ = run(capsys, "runs", "--json")
    assert [r["phase"] for r in json.loads(out)] == ["ok", "ok"]
    st = os.stat(log)
    # the same bytes but the tail, which becomes a scheduler traceback of the same length
    ima = (FIXTURES / "sglang_fail_runtime_ima.log").read_bytes()
    crash = ima[ima.index(b"[2026-11-02 08:03:27 TP3] Scheduler hit") :].replace(b" TP3]", b"]")
    assert len(ok) > 4096 + len(crash)  # the first 4 KiB are the same
    bad = ok[: -len(crash)] + crash
    assert len(bad) == len(ok)
    log.write_bytes(bad)
    os.utime(log, ns=(st.st_atime_ns, st.st_mtime_ns))
    code, out, err = run(capsys, "ingest", "--json", str(log))
    assert code == 0 and json.loads(out)["files_by_status"] == {"rewritten": 1}, err
    runs = json.loads(run(capsys, "runs", "--json")[1])
    show = json.loads(run(capsys, "show", "sglang_x#2", "--json")[1])
    diag = json.loads(run(capsys, "diagnose", "sglang_x#2", "--json")[1])
    second = next(r for r in runs if r["name"] == "sglang_x#2")
    phases = {second["phase"], show["summary"]["phase"], diag[0]["phase"]}
    assert len(phases) == 1 and phases != {"ok"}, (second["phase"], show["summary"], diag)
    # and the next ingest sees it unchanged (the key is stable)
    assert json.loads(run(capsys, "ingest", "--json", str(log))[1])["files_by_status"] == {
        "unchanged": 1
    }


def test_content_key_hard_links_are_ingested_once_and_own_files_never(tmp_path, capsys):
    """Cache-key class: two names of one file (same device and inode) are one source, in
    one ingest or across two; the store's own files are never taken as logs."""
    a = tmp_path / "a.log"
    shutil.copy(FIXTURES / "sglang_eagle3_cg_5dt.log", a)
    os.link(a, tmp_path / "b.log")
    code, out, _ = run(capsys, "ingest", "--json", str(a), str(tmp_path / "b.log"))
    data = json.loads(out)
    assert data["files_by_status"] == {"new": 1, "skipped": 1}
    assert data["files_skipped"] == {"duplicate": 1}
    os.link(a, tmp_path / "c.log")
    code, out, _ = run(capsys, "ingest", "--json", str(tmp_path / "c.log"))
    assert json.loads(out)["files_skipped"] == {"duplicate": 1}
    assert len(json.loads(run(capsys, "runs", "--json")[1])) == 1

    home = Store.open().root
    own = home / "tables" / "lines" / "notes.log"
    own.write_text("[2026-01-01 00:00:00] server_args=ServerArgs(tp_size=1)\n")
    code, out, _ = run(capsys, "ingest", "--json", "-r", str(home), str(own))
    assert json.loads(out)["files_by_status"] == {"skipped": 1}  # deduplicated, then skipped
    assert json.loads(out)["files_skipped"] == {"store": 1}


def test_schemas_every_table_appended_is_declared_and_mismatches_are_refused(tmp_path):
    """Schema class: a frame of the wrong type, an undeclared column or an undeclared table
    is refused with one clear line (exit 7) and nothing is written."""
    store = Store.open(tmp_path / "st")
    ingest(store, [str(FIXTURES / "sglang_two_launches.log")])
    before = (store.root / "manifest.json").read_bytes()
    cases = [
        ("labels", pl.DataFrame({"run_id": [1]}), "'run_id' is Int64, its declared type is String"),
        ("labels", pl.DataFrame({"colour": ["x"]}), "'colour' is not in its declared schema"),
        ("nosuch", pl.DataFrame({"a": [1]}), "'nosuch': not declared"),
    ]
    for table, df, msg in cases:
        with pytest.raises(StoreSchemaError) as exc:
            with store.transaction() as tx:
                tx.append(table, df)
        assert msg in str(exc.value) and exc.value.exit_code == 7
    assert (store.root / "manifest.json").read_bytes() == before
    # every table a real store holds is declared, with the types its parts carry
    for t, parts in json.loads(before)["tables"].items():
        for p in parts:
            got = pl.read_parquet_schema(store.root / "tables" / t / p)
            assert all(TABLES[t].schema[c] == d for c, d in got.items()), (t, got)


def test_migrations_a_store_written_by_the_previous_release_opens_and_is_migrated(tmp_path, capsys):
    """Migration class: fixtures/stores/v1 was written by the release before the migrations
    (schema_version 1). It opens migrated in memory (check writes nothing), the first write records
    every migration in the manifest; its runs, label, benchmark and baseline survive."""
    home = tmp_path / "v1"
    shutil.copytree(ROOT / "fixtures" / "stores" / "v1", home)
    home.chmod(0o700)
    raw = (home / "manifest.json").read_bytes()
    assert json.loads(raw)["schema_version"] == 1
    code, out, _ = run(capsys, "--store", str(home), "store", "check", "--json")
    findings = json.loads(out)["findings"]
    assert code == 0 and findings["pending_migration"]["count"] == len(pending(1))
    assert (home / "manifest.json").read_bytes() == raw  # check never writes
    code, out, err = run(capsys, "--store", str(home), "runs", "--json")
    assert code == 0, err
    runs = {r["name"]: r for r in json.loads(out)}
    assert set(runs) == {
        "sglang_fail_capture",
        "sglang_eagle3_cg_5dt",
        "sglang_two_launches#1",
        "sglang_two_launches#2",
    }
    assert runs["sglang_fail_capture"]["phase"] == "capture"  # the label
    assert run(capsys, "--store", str(home), "label", "two_launches#1", "ok")[0] == 0  # a write
    man = json.loads((home / "manifest.json").read_text())
    assert man["schema_version"] == SCHEMA_VERSION
    assert [m["version"] for m in man["migrations"]] == [m.version for m in MIGRATIONS]
    assert Store.open(home).table("bench").height == 1
    assert sorted(Store.open(home).table("labels")["phase"].to_list()) == ["capture", "ok"]
    assert man["meta"]["bench.baseline"]["tok_s"] == 90.0  # meta kept
    # the sources of v1 carry no content hash: the next ingest of a log re-reads it once
    log = tmp_path / "sglang_two_launches.log"
    shutil.copy(FIXTURES / "sglang_two_launches.log", log)
    assert run(capsys, "--store", str(home), "ingest", str(log))[0] == 0
    assert run(capsys, "--store", str(home), "store", "check")[0] == 0


def test_schemas_a_newer_store_is_refused(tmp_path):
    from forensics.errors import StoreError

    st = tmp_path / "st"
    ingest(Store.open(st), [str(FIXTURES / "empty.log")])
    man = json.loads((st / "manifest.json").read_text())
    man["schema_version"] = SCHEMA_VERSION + 1
    (st / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(StoreError, match="written by a newer forensics"):
        Store.open(st).table("runs")


def test_batched_commits_kill_9_loses_at_most_the_batch_and_reingest_completes(tmp_path):
    """Batch class: 80 small logs in batches of 10 files; a kill -9 during the ingest leaves
    a readable store whose sources are whole batches (never a file in part, never twice);
    the same command again ingests the rest, and the store then equals a clean ingest."""
    logs = tmp_path / "logs"
    logs.mkdir()
    body = (FIXTURES / "sglang_two_launches.log").read_text()
    for i in range(80):
        (logs / f"run_{i:04d}.log").write_text(body.replace("30000", str(31000 + i)))
    home = tmp_path / "st"
    code = (
        "import sys, forensics.ingest.batch as i; i.BATCH_FILES = 10; i.BATCH_SECONDS = 1e9; "
        "from forensics.cli import main; main(sys.argv[1:])"
    )
    cmd = [sys.executable, "-c", code, "--store", str(home), "ingest", str(logs)]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    man = home / "manifest.json"
    deadline = time.monotonic() + 240
    while p.poll() is None and time.monotonic() < deadline:  # wait for the first commit
        if man.exists() and json.loads(man.read_text()).get("sources"):
            break
        time.sleep(0.02)
    p.send_signal(signal.SIGKILL)
    p.wait(30)
    st = Store.open(home)
    n = len(st.sources())
    assert n % 10 == 0  # whole batches only
    runs = st.table("runs")
    assert runs.height == 2 * n  # every committed file whole: both of its launches
    assert runs.select("source_id", "run_index").is_duplicated().sum() == 0
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    st = Store.open(home)
    assert len(st.sources()) == 80 and st.table("runs").height == 160
    assert st.table("decode").height == 80 * Store.open(_clean(tmp_path)).table("decode").height


def _clean(tmp_path):
    one = tmp_path / "one"
    ingest(Store.open(one), [str(FIXTURES / "sglang_two_launches.log")])
    return one
