"""The store and incremental ingest: idempotent, incremental, crash-safe, locked (C02-C09)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from forensics.errors import StoreLocked
from forensics.ingest import ingest
from forensics.store import Store

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures"
TABLES = ("runs", "events", "decode", "prefill", "errors", "lines")


def snapshot(store: Store) -> dict:
    out = {}
    for t in TABLES:
        df = store.table(t)
        if not df.is_empty():
            df = df.sort([c for c in df.columns if df[c].dtype != pl.Null], nulls_last=True)
        out[t] = df.to_dicts()
    return out


def copy(name: str, dst: Path) -> Path:
    p = dst / name
    shutil.copy(FIX / name, p)
    return p


def test_same_file_twice_no_duplicates(tmp_path):
    log = copy("sglang_eagle3_cg_16dt.log", tmp_path)
    store = Store.open(tmp_path / "st")
    s1 = ingest(store, [str(log)])
    before = snapshot(store)
    s2 = ingest(store, [str(log)])
    assert s1.as_dict()["decode_lines"] == 15
    assert [f.status for f in s2.files] == ["unchanged"]
    assert s2.as_dict()["bytes_parsed"] == 0
    assert snapshot(store) == before
    assert len(store.table("decode")) == 15 and len(store.table("runs")) == 1


def test_grown_file_parses_only_new_bytes(tmp_path):
    src = (FIX / "sglang_eagle3_cg_5dt.log").read_bytes()
    cut = src.index(b"Decode batch [280]")
    cut = src.rindex(b"\n", 0, cut) + 1
    log = tmp_path / "grow.log"
    # the first ingest sees half a line at the end (P03: a file still being written)
    log.write_bytes(src[: cut + 30])
    store = Store.open(tmp_path / "st")
    s1 = ingest(store, [str(log)])
    assert s1.files[0].bytes_parsed == cut + 30
    log.write_bytes(src)
    s2 = ingest(store, [str(log)])
    assert s2.files[0].status == "grown"
    assert s2.files[0].bytes_parsed == len(src) - cut  # from the last complete line only
    fresh = Store.open(tmp_path / "st2")
    ingest(fresh, [str(log)])
    assert snapshot(store) == snapshot(fresh)
    dec = store.table("decode")
    assert len(dec) == 15 and dec["line"].n_unique() == 15


def test_rewritten_and_truncated_files_are_reparsed_P23(tmp_path):
    log = copy("sglang_two_launches.log", tmp_path)
    store = Store.open(tmp_path / "st")
    ingest(store, [str(log)])
    assert len(store.table("runs")) == 2
    # truncated to its first launch (same head, smaller): re-parsed, the second run is gone
    data = log.read_bytes()
    first = data[: data.index(b"server_args", 100)]
    first = first[: first.rindex(b"\n") + 1]
    log.write_bytes(first)
    s = ingest(store, [str(log)])
    assert s.files[0].status == "rewritten"
    assert store.table("runs")["run_index"].to_list() == [0]
    assert store.table("decode")["run_index"].unique().to_list() == [0]
    # rewritten with other content
    shutil.copy(FIX / "sglang_baseline.log", log)
    s = ingest(store, [str(log)])
    assert s.files[0].status == "rewritten"
    assert store.table("runs")["tp_size"].to_list() == [8]
    assert len(store.table("decode")) == 21


def test_crash_inside_a_transaction_leaves_the_store_as_before_C04(tmp_path):
    store = Store.open(tmp_path / "st")
    ingest(store, [str(copy("sglang_baseline.log", tmp_path))])
    before = snapshot(store)
    man = (tmp_path / "st" / "manifest.json").read_bytes()
    with pytest.raises(RuntimeError), store.transaction() as tx:
        tx.append("decode", store.table("decode"), source_id="zzz")
        tx.drop_source(next(iter(tx.man.sources)))
        raise RuntimeError("crash")
    assert (tmp_path / "st" / "manifest.json").read_bytes() == man
    assert snapshot(Store.open(tmp_path / "st")) == before
    assert not list((tmp_path / "st").rglob("*.tmp"))


def test_kill_9_mid_ingest_then_resume_C04(tmp_path):
    """SIGKILL a real ingest of a ~20 MB log mid-way: readers see the old state, no *.tmp is
    listed, and the next ingest gives the same result as an uninterrupted one."""
    body = (FIX / "sglang_eagle3_cg_5dt.log").read_bytes()
    decode = b"".join(ln for ln in body.splitlines(keepends=True) if b"Decode batch" in ln)
    big = tmp_path / "big.log"
    with open(big, "wb") as f:  # decode-heavy, like a long benchmark: ~20 MB
        f.write(body)
        for _ in range(6000):
            f.write(decode)
    small = copy("sglang_baseline.log", tmp_path)
    st = tmp_path / "st"
    ingest(Store.open(st), [str(small)])
    before = snapshot(Store.open(st))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # parts every 5,000 rows, so it writes them while it parses (the default, 400,000 rows,
    # writes this log's 90,000 decode rows only at its commit)
    code = (
        "import sys, forensics.store.transaction as t; t.STAGE_ROWS = 5000; "
        "from forensics.cli import main; main(sys.argv[1:])"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "--store", str(st), "ingest", str(big)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # wait until it is writing parts for the big file, then kill it
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if any(p.suffix == ".tmp" for p in (st / "tables").rglob("*")):
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "ingest finished before it could be killed"
    after = Store.open(st)
    assert snapshot(after) == before
    listed = {p for parts in after.manifest().tables.values() for p in parts}
    assert not [p for p in listed if p.endswith(".tmp")]
    s = ingest(after, [str(big), str(small)])
    assert [f.status for f in s.files] == ["new", "unchanged"]
    assert not list(st.rglob("*.tmp"))
    dec = after.table("decode")
    assert len(dec.filter(pl.col("source_id") == s.files[0].source_id)) == 15 * 6001


def _ingest_proc(st: Path, log: Path, extra: list[str] = ()) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = "import sys; from forensics.cli import main; main(sys.argv[1:])"
    return subprocess.Popen(
        [sys.executable, "-c", code, "--store", str(st), "ingest", *extra, "--json", str(log)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_concurrent_ingests_are_serialized_C08(tmp_path):
    logs = [copy(n, tmp_path) for n in ("sglang_eagle3_cg_16dt.log", "sglang_two_launches.log")]
    st = tmp_path / "st"
    procs = [_ingest_proc(st, log) for log in logs] + [_ingest_proc(st, logs[0])]
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    store = Store.open(st)
    runs = store.table("runs")
    assert sorted(runs["run_index"].to_list()) == [0, 0, 1]
    dec = store.table("decode")
    assert len(dec) == 15 + 10
    assert dec.select("source_id", "line").n_unique() == len(dec)


def test_lock_timeout_exits_7_naming_the_holder_C02(tmp_path):
    st = tmp_path / "st"
    store = Store.open(st)
    log = copy("sglang_baseline.log", tmp_path)
    with store.lock():
        with pytest.raises(StoreLocked) as exc:
            ingest(Store.open(st), [str(log)], lock_timeout=0.2)
        assert f"pid {os.getpid()}" in str(exc.value)
        p = _ingest_proc(st, log, ["--lock-timeout", "0.3"])
        out, err = p.communicate(timeout=60)
    assert p.returncode == 7
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {st}: store is locked")
    assert "Traceback" not in err.decode()


def test_readable_by_duckdb_without_forensics(tmp_path):
    """The query of docs/store.md, run by DuckDB alone on the parquet parts."""
    duckdb = pytest.importorskip("duckdb")
    st = tmp_path / "st"
    ingest(Store.open(st), [str(FIX)])
    man = json.loads((st / "manifest.json").read_text())
    parts = [str(st / "tables" / "decode" / p) for p in man["tables"]["decode"]]
    runs = [str(st / "tables" / "runs" / p) for p in man["tables"]["runs"]]
    con = duckdb.connect()
    rows = con.execute(
        """
        SELECT regexp_extract(r.path, '([^/]+)\\.log$', 1) AS name,
               r.num_draft_tokens, r.cuda_graph,
               round(CAST(median(d.gen_throughput) AS DOUBLE), 1) AS tok_s,
               round(CAST(avg(d.accept_len) AS DOUBLE), 2) AS accept_len
        FROM read_parquet($runs) r
        JOIN read_parquet($decode) d USING (source_id, run_index)
        WHERE r.spec_algorithm = 'EAGLE3' AND r.tp_size = 8
        GROUP BY ALL ORDER BY tok_s DESC
        """,
        {"runs": runs, "decode": parts},
    ).fetchall()
    assert rows[:4] == [
        ("sglang_fail_runtime_ima", 4, True, 88.0, 2.4),
        ("sglang_eagle3_cg_5dt", 5, True, 82.3, 2.55),
        ("sglang_eagle3_cg_16dt", 16, True, 74.9, 3.9),
        ("sglang_eagle3_nocg_16dt", 16, False, 53.2, 2.8),
    ]
    assert rows[4] == ("sglang_eagle3_nocg_16dt_other", 16, False, 50.5, 2.6)


def test_schema_version_mismatch_is_a_store_error(tmp_path):
    from forensics.errors import StoreError

    st = tmp_path / "st"
    ingest(Store.open(st), [str(copy("empty.log", tmp_path))])
    man = json.loads((st / "manifest.json").read_text())
    man["schema_version"] = 999
    (st / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(StoreError) as exc:
        Store.open(st).table("runs")
    assert exc.value.exit_code == 7 and "schema version 999" in str(exc.value)


def test_store_folder_writable_by_others_is_refused(tmp_path):
    """bad-inputs §3.6: a group- or world-writable store root is refused (exit 7), not used."""
    from forensics.errors import EXIT_STORE, StoreError
    from forensics.store import Store

    shared = tmp_path / "shared-store"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(StoreError) as ei:
        Store.open(shared)
    assert ei.value.exit_code == EXIT_STORE
    assert "writable by others" in str(ei.value) and "chmod go-w" in str(ei.value)
    shared.chmod(0o700)
    assert Store.open(shared).root == shared


def test_a_store_another_process_creates_meanwhile_is_opened(tmp_path, monkeypatch):
    """Two first ingests into one new store at once: the one whose mkdir came second got
    'cannot create the store (File exists)', exit 7 (seen in test_concurrent_ingests_are_
    serialized_C08). The folder created between the look and the mkdir is the store."""
    import pathlib

    st = tmp_path / "st"
    st.mkdir(mode=0o700)
    real = pathlib.Path.exists
    monkeypatch.setattr(pathlib.Path, "exists", lambda p: False if p == st else real(p))
    assert Store.open(st).root == st
