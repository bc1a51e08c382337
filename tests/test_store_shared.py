"""Schema 4 (issues 13 and 14): the parser's resume state lives in the ``states`` table, not
in the manifest, and a batch of logs shares its parts (one per table and kind) instead of a
part per log and table. A store written by the release before (fixtures/stores/v3) migrates:
its states move out at its first write, and a log that grew since resumes from them."""

from __future__ import annotations

import json
import os
import shutil

import polars as pl
import pytest

from forensics.cli import main
from forensics.ingest import ingest
from forensics.migrations import SCHEMA_VERSION
from forensics.store import Store
from forensics.store import transaction as transaction_mod
from tests.conftest import FIXTURES, ROOT

LOG_TABLES = ("events", "decode", "prefill", "errors", "lines")
V3_LOGS = "/tmp/forensics-fixture-v3"  # where fixtures/stores/v3 read its logs


def run(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return (exc.value.code or 0), out, err


def _rows(store: Store, sid: str) -> dict[str, list]:
    """A source's rows per table, without the part they sit in (sorted, comparable)."""
    out = {}
    for t in (*LOG_TABLES, "runs"):
        df = store.table(t)
        if df.is_empty():
            out[t] = []
            continue
        df = df.filter(pl.col("source_id") == sid).drop("source_id")
        if t == "runs":
            df = df.drop([c for c in ("path", "host_name") if c in df.columns])
        out[t] = sorted(map(repr, df.rows()))
    return out


def _place(path: str, data: bytes) -> None:
    """Write ``data`` at ``path`` atomically (parallel test runs write the same bytes)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def test_v3_store_migrates_its_states_out_and_a_grown_log_resumes_from_them(tmp_path, capsys):
    home = tmp_path / "v3"
    shutil.copytree(ROOT / "fixtures" / "stores" / "v3", home)
    home.chmod(0o700)
    raw = (home / "manifest.json").read_bytes()
    v3 = json.loads(raw)
    assert v3["schema_version"] == 3
    v3_logs = {s: r for s, r in v3["sources"].items() if r.get("kind") != "benchresults"}
    assert len(v3_logs) == 2 and all(rec["state"] for rec in v3_logs.values())
    code, out, _ = run(capsys, "--store", str(home), "store", "check", "--json")
    assert code == 0 and json.loads(out)["findings"]["pending_migration"]["count"] == 1
    code, out, err = run(capsys, "--store", str(home), "runs", "--json")
    assert code == 0, err
    runs = {r["name"]: r for r in json.loads(out)}
    assert set(runs) == {"sglang_grows", "sglang_fail_capture"}
    assert runs["sglang_fail_capture"]["phase"] == "capture"  # the label
    assert runs["sglang_grows"]["bench_tok_s"] == pytest.approx(215.7, abs=0.05)
    assert (home / "manifest.json").read_bytes() == raw  # reads never write

    # the log grew since (it was cut mid-line): the next ingest resumes from the saved state
    full = (FIXTURES / "sglang_eagle3_cg_5dt.log").read_bytes()
    grows = f"{V3_LOGS}/sglang_grows.log"
    _place(grows, full)
    code, out, err = run(capsys, "--store", str(home), "ingest", grows, "--json")
    assert code == 0, err
    [f] = json.loads(out)["file_details"]
    assert (
        f["status"] == "grown"
        and f["bytes_parsed"] == len(full) - v3["sources"][f["source_id"]]["offset"]
    )

    man = json.loads((home / "manifest.json").read_text())
    assert man["schema_version"] == SCHEMA_VERSION == 4
    assert [m["version"] for m in man["migrations"]][-1] == 4
    assert "legacy_states" not in man
    assert all("state" not in rec for rec in man["sources"].values())
    assert all(man["sources"][sid]["resume"] for sid in v3_logs)
    st = Store.open(home)
    states = st.table("states")
    assert sorted(states["source_id"].to_list()) == sorted(v3_logs)  # moved out, one each
    # what the resumed ingest holds equals a clean ingest of the whole log
    clean = Store.open(tmp_path / "clean")
    ingest(clean, [grows])
    assert _rows(st, f["source_id"]) == _rows(clean, f["source_id"])
    assert run(capsys, "--store", str(home), "store", "check")[0] == 0
    assert Store.open(home).table("labels").height == 1
    assert man["meta"]["baselines"]  # meta kept


def test_a_batch_shares_its_parts_and_a_rewritten_log_leaves_the_others_whole(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    body = (FIXTURES / "sglang_two_launches.log").read_text()
    for i in range(6):
        (logs / f"run_{i}.log").write_text(body.replace("30000", str(31000 + i)))
    st = Store.open(tmp_path / "st")
    ingest(st, [str(logs)])
    man = st.manifest()
    # one part per table and kind for the six logs, not one per log
    assert all(len(parts) == 1 for t, parts in man.tables.items() if t in LOG_TABLES)
    assert len(man.tables["runs"]) == 1 and len(man.tables["states"]) == 1
    assert not any(man.part_source.get(p) for t in LOG_TABLES for p in man.tables.get(t, []))
    sids = sorted(man.sources)
    before = {sid: _rows(st, sid) for sid in sids}
    # run_2 is rewritten (another port): its rows are replaced, the other five stay as they were
    (logs / "run_2.log").write_text(body.replace("30000", "39999"))
    summary = ingest(st, [str(logs)])
    by_status = {f.path.rsplit("/", 1)[-1]: f.status for f in summary.files}
    assert by_status["run_2.log"] == "rewritten"
    assert sum(s == "unchanged" for s in by_status.values()) == 5
    st = Store.open(tmp_path / "st")
    [sid2] = [f.source_id for f in summary.files if f.status == "rewritten"]
    for sid in sids:
        if sid != sid2:
            assert _rows(st, sid) == before[sid]
    clean = Store.open(tmp_path / "clean")
    ingest(clean, [str(logs / "run_2.log")])
    assert _rows(st, sid2) == _rows(clean, sid2)
    assert st.table("runs").height == 12
    # the part that lost run_2's rows was rewritten without them, and the old one collected
    for t, parts in st.manifest().tables.items():
        for p in parts:
            assert (st.root / "tables" / t / p).exists()
    on_disk = {p.name for p in st.parts_on_disk()}
    listed = {p for parts in st.manifest().tables.values() for p in parts}
    assert on_disk == listed


def test_a_grown_log_in_a_shared_batch_resumes_and_equals_a_clean_ingest(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    full = (FIXTURES / "sglang_eagle3_cg_5dt.log").read_bytes()
    (logs / "a.log").write_bytes(full[:21220])  # cut mid-line: a tail to replace
    shutil.copy(FIXTURES / "sglang_two_launches.log", logs / "b.log")
    st = Store.open(tmp_path / "st")
    ingest(st, [str(logs)])
    (logs / "a.log").write_bytes(full)
    summary = ingest(st, [str(logs)])
    status = {f.path.rsplit("/", 1)[-1]: f for f in summary.files}
    assert status["a.log"].status == "grown" and status["b.log"].status == "unchanged"
    st = Store.open(tmp_path / "st")
    clean = Store.open(tmp_path / "clean")
    ingest(clean, [str(logs)])
    for f in summary.files:
        assert _rows(st, f.source_id) == _rows(clean, f.source_id)


def test_a_rolled_back_file_leaves_no_rows_even_in_a_part_shared_with_earlier_files(
    tmp_path, monkeypatch
):
    """A file that fails after its rows were flushed into a part shared with the files
    before it: the rollback takes its rows out of that part, the others' stay."""
    monkeypatch.setattr(transaction_mod, "STAGE_ROWS", 5)
    st = Store.open(tmp_path / "st")
    a = pl.DataFrame({"run_index": [0, 0, 0], "line": [1, 2, 3], "source_id": ["aaa"] * 3})
    b = pl.DataFrame({"run_index": [0, 0, 0], "line": [7, 8, 9], "source_id": ["bbb"] * 3})
    a, b = (d.with_columns(pl.col("run_index").cast(pl.Int32)) for d in (a, b))
    with st.transaction() as tx:
        tx.stage("lines", a, "aaa")  # 3 rows staged
        point = tx.savepoint("bbb")
        tx.stage("lines", b, "bbb")  # 6 rows: written as one part holding both
        assert any(set(keys) == {"aaa", "bbb"} for keys in tx.man.shared.values())
        tx.rollback(point)
    lines = Store.open(tmp_path / "st").table("lines")
    assert sorted(lines["line"].to_list()) == [1, 2, 3]
    assert set(lines["source_id"].to_list()) == {"aaa"}
    man = Store.open(tmp_path / "st").manifest()
    assert [keys for keys in man.shared.values()] == [["aaa"]]
    on_disk = {p.name for p in Store.open(tmp_path / "st").parts_on_disk()}
    assert on_disk == set(man.tables["lines"])
