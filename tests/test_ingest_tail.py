"""The tail of one ingest (issue 15): the verdicts of the runs an ingest changed are stored in
the commit of their rows (one manifest write), read through a view of the open transaction;
an error or an interrupt in that step leaves the rows committed with the pending-verdicts
marker, as an ingest stopped between its commit and a verdict step of its own did."""

from __future__ import annotations

import json

import polars as pl
import pytest

import forensics.verdicts as verdicts
from forensics.ingest import ingest
from forensics.ingest.outcome import VERDICTS_PENDING
from forensics.store import Store
from tests.conftest import FIXTURES

LOG = FIXTURES / "sglang_eagle3_cg_5dt.log"


def _manifest(store: Store) -> dict:
    return json.loads((store.root / "manifest.json").read_text())


def _verdict_files(store: Store) -> list[str]:
    folder = store.root / "tables" / verdicts.TABLE
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def _into_fails(monkeypatch, exc: BaseException) -> list[bool]:
    """refresh raises ``exc`` after adding its verdicts to an ingest's transaction; -> one
    entry per call, True where it was given one."""
    calls: list[bool] = []
    real = verdicts.refresh

    def refresh(store, source_ids=None, **kw):
        calls.append(kw.get("into") is not None)
        n = real(store, source_ids, **kw)
        if kw.get("into") is not None:
            raise exc
        return n

    monkeypatch.setattr(verdicts, "refresh", refresh)
    return calls


def test_a_new_logs_rows_and_verdicts_are_one_commit(tmp_path):
    store = Store.open(tmp_path / "st")
    assert ingest(store, [str(LOG)]).files[0].status == "new"
    man = _manifest(store)
    assert man["generation"] == 1  # was 2: the rows' commit, then the verdicts'
    assert man["meta"].get(VERDICTS_PENDING) is None
    assert verdicts.unverdicted(Store.open(tmp_path / "st")) == set()
    assert len(_verdict_files(store)) == 1


def test_an_error_in_the_verdicts_of_the_commit_keeps_the_rows_and_stores_them_after(
    tmp_path, monkeypatch
):
    calls = _into_fails(monkeypatch, RuntimeError("boom"))
    store = Store.open(tmp_path / "st")
    summary = ingest(store, [str(LOG)])
    assert summary.files[0].committed and not summary.interrupted
    assert calls == [True, False]  # in the commit (undone), then on its own after it
    man = _manifest(store)
    assert man["generation"] == 2 and man["meta"].get(VERDICTS_PENDING) is None
    assert verdicts.unverdicted(Store.open(tmp_path / "st")) == set()
    assert len(_verdict_files(store)) == 1  # the undone verdicts' part left nothing behind


def test_an_interrupt_in_the_verdicts_of_the_commit_keeps_the_rows_and_the_marker(
    tmp_path, monkeypatch
):
    """A Ctrl-C or SIGTERM there: the rows are committed without the verdicts it was adding
    (no part of them left in the store's folder), the marker set; the next ingest of the
    same, unchanged, log stores them."""
    _into_fails(monkeypatch, KeyboardInterrupt())
    store = Store.open(tmp_path / "st")
    summary = ingest(store, [str(LOG)])
    assert summary.interrupted and summary.files[0].committed
    fresh = Store.open(tmp_path / "st")
    assert not fresh.table("runs").is_empty()
    assert fresh.table(verdicts.TABLE).is_empty()
    assert _manifest(store)["meta"].get(VERDICTS_PENDING) is True
    assert _verdict_files(store) == []
    monkeypatch.undo()
    assert ingest(Store.open(tmp_path / "st"), [str(LOG)]).files[0].status == "unchanged"
    assert verdicts.unverdicted(Store.open(tmp_path / "st")) == set()
    assert _manifest(store)["meta"].get(VERDICTS_PENDING) is None


def test_the_rows_an_ingest_redacts_at_its_commit_are_redacted_in_the_committing_thread(
    tmp_path, monkeypatch
):
    """polars compiles a regex once per thread that uses it: the runs rows of the last commit
    are redacted in the thread that commits, not in a flush thread, so its verdicts, written
    after in that thread, find the redaction's patterns compiled."""
    import threading

    import forensics.tables as tables

    seen: list[tuple[str, str]] = []
    real = tables._redacted

    def redacted(df: pl.DataFrame) -> pl.DataFrame:
        seen.append((threading.current_thread().name, ",".join(df.columns)))
        return real(df)

    monkeypatch.setattr(tables, "_redacted", redacted)
    ingest(Store.open(tmp_path / "st"), [str(LOG)])
    assert len(seen) == 2  # the runs rows, the verdicts
    assert {name for name, _ in seen} == {threading.main_thread().name}


def test_a_transactions_view_reads_what_it_would_commit(tmp_path):
    """Its new parts (at their temporary names), not the parts it drops, the sources it set;
    writing through it is refused."""
    store = Store.open(tmp_path / "st")
    with store.transaction() as tx:
        tx.append("labels", _labels("a:0"), source_id="")
    with store.transaction() as tx:
        tx.drop_rows("labels", pl.lit(False))  # keep none
        tx.append("labels", _labels("b:0"), source_id="")
        tx.set_source("b", {"path": "/x/b.log"})
        tx.settle()
        view = tx.view()
        assert view.table("labels")["run_id"].to_list() == ["b:0"]
        assert view.reduced("labels", None)["run_id"].to_list() == ["b:0"]
        assert "b" in view.sources()
        assert Store.open(tmp_path / "st").table("labels")["run_id"].to_list() == ["a:0"]
        with pytest.raises(RuntimeError):
            view.transaction()
    assert Store.open(tmp_path / "st").table("labels")["run_id"].to_list() == ["b:0"]


def test_a_rollback_restores_the_meta(tmp_path):
    store = Store.open(tmp_path / "st")
    with store.transaction() as tx:
        tx.set_meta(VERDICTS_PENDING, True)
        point = tx.savepoint()
        tx.set_meta(VERDICTS_PENDING, None)
        tx.rollback(point)
    assert _manifest(store)["meta"].get(VERDICTS_PENDING) is True


def _labels(run_id: str) -> pl.DataFrame:
    import datetime as dt

    from forensics.tables import LABEL_SCHEMA

    sid, ri = run_id.split(":")
    row = {
        "run_id": run_id,
        "source_id": sid,
        "run_index": int(ri),
        "name": sid,
        "phase": "serving",
        "labeled_at": dt.datetime(2026, 1, 1),
    }
    return pl.DataFrame([row], schema=LABEL_SCHEMA)


_EXIT_PROBE = """
import atexit, os, sys
say = os.write
def finalizing(event, args):  # the interpreter's teardown begins
    if event == "cpython.PyInterpreterState_Clear":
        say(2, b"teardown ran\\n")
sys.addaudithook(finalizing)
atexit.register(lambda: print("atexit ran"))
from forensics.entry import main
main()
"""


@pytest.mark.parametrize("command", ["ingest", "runs"])
def test_ingest_ends_without_the_interpreters_teardown(tmp_path, command):
    """After ingest the process ends at once (os._exit): the atexit handlers ran, stdout is
    whole, the status is the command's; the interpreter's teardown (its objects freed one by
    one) does not run. Other commands end as before."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "FORENSICS_HOME": str(tmp_path / "st")}
    args = [command, str(LOG)] if command == "ingest" else [command, "--json"]
    p = subprocess.run(
        [sys.executable, "-c", _EXIT_PROBE, *args], env=env, capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.rstrip().endswith("atexit ran")
    assert ("Ingested 1 file(s)" in p.stdout) == (command == "ingest")
    assert ("teardown ran" in p.stderr) == (command != "ingest")


_SECOND_CALL = """
import sys
from click.testing import CliRunner
from forensics.cli import cli, main
home, log = sys.argv[1:]
assert CliRunner().invoke(cli, ["--store", home, "ingest", log]).exit_code == 0
try:
    main(["--store", home, "ingest", log])
except SystemExit as exc:
    print("cli.main returned", exc.code)
from forensics.entry import main as entry_main
try:
    entry_main(["--store", home, "runs", "--json"])
except SystemExit as exc:
    print("entry returned", exc.code)
"""


def test_the_exit_at_once_of_an_ingest_is_that_calls_only(tmp_path):
    """Tests call the CLI in-process: an ingest's wish to end the process at once belongs to
    its own call; a later call of the entry point for another command in the same process
    returns its SystemExit to the caller (it used to inherit the wish: os._exit)."""
    import subprocess
    import sys

    p = subprocess.run(
        [sys.executable, "-c", _SECOND_CALL, str(tmp_path / "st"), str(LOG)],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    assert "cli.main returned 0" in p.stdout, p.stdout
    assert "entry returned 0" in p.stdout, p.stdout


def _conform_spy(monkeypatch, fail: str | None = None) -> list[tuple[str, str]]:
    """forensics.tables.conform recorded as (table, thread name) per call; ``fail``: the
    table whose rows it refuses (StoreSchemaError)."""
    import threading

    import forensics.tables as tables

    calls: list[tuple[str, str]] = []
    real = tables.conform

    def conform(table, df):
        calls.append((table, threading.current_thread().name))
        if table == fail:
            raise tables.StoreSchemaError(f"table {table!r}: refused by the test")
        return real(table, df)

    monkeypatch.setattr(tables, "conform", conform)
    return calls


def test_the_redacted_rows_of_the_commit_are_checked_in_the_committing_thread(
    tmp_path, monkeypatch
):
    """polars compiles the redaction's patterns once per thread: the runs rows and the
    verdicts of one commit are redacted by the thread that commits (each once), the other
    tables' parts by the flush threads."""
    import threading

    calls = _conform_spy(monkeypatch)
    assert ingest(Store.open(tmp_path / "st"), [str(LOG)]).files[0].status == "new"
    main = threading.current_thread().name
    assert [t for t, th in calls if th == main] == ["runs", "verdicts"], calls
    assert all(th.startswith("forensics-flush") for t, th in calls if t not in ("runs", "verdicts"))


def test_a_refused_redaction_in_the_commit_leaves_the_store_as_it_was(tmp_path, monkeypatch):
    """The runs rows refused while the flush threads write the other parts: the error is the
    ingest's, the parts written are removed, nothing is committed."""
    from forensics.errors import ForensicsError

    store = Store.open(tmp_path / "st")
    ingest(store, [str(FIXTURES / "sglang_baseline.log")])
    before = _manifest(store)
    parts = sorted((tmp_path / "st" / "tables").rglob("*"))
    _conform_spy(monkeypatch, fail="runs")
    with pytest.raises(ForensicsError, match="refused by the test"):
        ingest(store, [str(LOG)])
    assert _manifest(store) == before
    assert sorted((tmp_path / "st" / "tables").rglob("*")) == parts
