"""Damaged stores (issue 14, data loss: "a store whose manifest.json is missing reads as
empty, and the next ingest deletes every part, labels included"), symlinked parts and
manifest paths outside the store; `forensics store check` / `store repair`."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from forensics.cli import main
from forensics.store import Store
from tests.conftest import FIXTURES

LOGS = ("sglang_two_launches.log", "sglang_fail_capture.log")


def run(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return (exc.value.code or 0), out, err


def home():
    return Store.open().root


def files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.fixture
def labeled(tmp_path, capsys):
    """A store with two logs (three runs) and one label no log can rebuild."""
    for name in LOGS:
        shutil.copy(FIXTURES / name, tmp_path / name)
    assert run(capsys, "ingest", *(str(tmp_path / n) for n in LOGS))[0] == 0
    assert run(capsys, "label", "sglang_fail_capture", "load")[0] == 0
    code, out, _ = run(capsys, "runs", "--json")
    return tmp_path, json.loads(out)


def _decode_rows() -> int:
    return Store.open(home()).table("decode").height


DAMAGE = {
    "missing": None,
    "schema_version_only": '{"schema_version": 1}',
    "truncated": '{"schema_version": 3, "generation": 4, "tables": {"runs": ["a',
    # third round (issue 14): a manifest of the wrong shape, or one that is not a file
    "labels_a_string": lambda m: {**m, "tables": {**m["tables"], "labels": "x.parquet"}},
    "generation_negative": lambda m: {**m, "generation": -5},
    "sources_not_objects": lambda m: {**m, "sources": {"a": 5}},
    "symlink_to_dev_zero": "/dev/zero",
    "a_fifo": "fifo",
}


def _damage(man, how) -> None:
    if how is None:
        man.unlink()
    elif callable(how):
        man.write_text(json.dumps(how(json.loads(man.read_text()))))
    elif how == "/dev/zero":  # an endless read, if it were read
        man.unlink()
        man.symlink_to(how)
    elif how == "fifo":  # a read that would block forever
        man.unlink()
        os.mkfifo(man)
    else:
        man.write_text(how)


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_store_refuses_reads_and_writes_then_repair_keeps_labels(labeled, capsys, damage):
    """Damaged-store class: reads and writes exit 7 and say how to recover, nothing on disk
    changes (ingest deleted every part); repair rebuilds the manifest from the parts with
    the labels; a re-ingest then gives exactly the rows of before, no duplicates."""
    tmp_path, before = labeled
    rows_before = _decode_rows()
    man = home() / "manifest.json"
    _damage(man, DAMAGE[damage])
    listing = files(home())
    for cmd in (["runs"], ["show", "two_launches#1"], ["ingest", str(tmp_path / LOGS[0])]):
        code, _, err = run(capsys, *cmd)
        assert code == 7, (cmd, err)
        line = err.strip().splitlines()[-1]
        assert line.startswith("Error: ") and "store repair" in line, err
    assert files(home()) == listing  # nothing deleted, nothing written

    code, out, _ = run(capsys, "store", "check", "--json")
    report = json.loads(out)
    assert code == 7 and not report["ok"]
    assert report["parts_on_disk"] > 0 and any(
        k.startswith("manifest_") for k in report["findings"]
    )

    code, out, err = run(capsys, "store", "repair")
    assert code == 0, err
    assert "rebuilt manifest.json" in out
    assert run(capsys, "store", "check")[0] == 0
    code, out, _ = run(capsys, "runs", "--json")
    after = {r["name"]: r["phase"] for r in json.loads(out)}
    assert after["sglang_fail_capture"] == "load"  # the label survived
    assert set(after) == {r["name"] for r in before}
    assert run(capsys, "ingest", *(str(tmp_path / n) for n in LOGS))[0] == 0
    assert _decode_rows() == rows_before
    code, out, _ = run(capsys, "runs", "--json")
    assert sorted(r["run_id"] for r in json.loads(out)) == sorted(r["run_id"] for r in before)
    if damage != "missing":
        assert list(home().glob("manifest.json.damaged-*"))  # the old one is kept


def test_symlinked_part_is_refused_reported_and_set_aside(labeled, capsys, tmp_path):
    """Symlink class: a listed part that is a symlink is never read (its target could be any
    file); check reports it; repair renames the link and leaves the target alone."""
    part = next((home() / "tables" / "decode").glob("*.parquet"))
    target = tmp_path / "elsewhere.parquet"
    shutil.move(part, target)
    part.symlink_to(target)
    code, out, _ = run(capsys, "store", "check", "--json")
    assert code == 7 and "symlink" in json.loads(out)["findings"]
    assert run(capsys, "store", "repair")[0] == 0
    assert target.exists() and not part.exists() and not part.is_symlink()
    assert list(part.parent.glob(part.name + ".symlink-*"))
    assert run(capsys, "store", "check")[0] == 0

    # a read that meets one never follows it: a warning, the link set aside, target kept
    part2 = next((home() / "tables" / "lines").glob("*.parquet"))
    target2 = tmp_path / "elsewhere2.parquet"
    shutil.move(part2, target2)
    part2.symlink_to(target2)
    st = Store.open(home())
    st.table("lines")
    assert any("symlink" in w for w in st.warnings), st.warnings
    assert target2.exists() and not part2.is_symlink()


@pytest.mark.parametrize("entry", ["../../../outside.parquet", "/etc/outside.parquet"])
def test_manifest_paths_outside_the_store_are_refused(labeled, capsys, entry):
    """Outside-path class: a manifest entry with '..' or an absolute path is damage (exit 7
    for reads and writes), reported by check, unlisted by repair."""
    man_path = home() / "manifest.json"
    man = json.loads(man_path.read_text())
    man["tables"]["decode"].append(entry)
    man_path.write_text(json.dumps(man))
    code, _, err = run(capsys, "runs")
    assert code == 7 and "outside its table folder" in err
    code, out, _ = run(capsys, "store", "check", "--json")
    assert code == 7 and json.loads(out)["findings"]["outside_store"]["items"] == [
        f"decode/{entry}"
    ]
    assert run(capsys, "store", "repair")[0] == 0
    assert entry not in json.loads(man_path.read_text())["tables"]["decode"]
    assert run(capsys, "runs")[0] == 0


def test_orphan_part_survives_writes_and_repair_sets_it_aside(labeled, capsys, tmp_path):
    """Damaged-store class: a part no manifest entry accounts for is never deleted by a
    writer (it used to be collected by every commit); check reports it, repair renames it."""
    tdir = home() / "tables" / "decode"
    orphan = tdir / "abcdef012345-0123456789ab.parquet"
    shutil.copy(next(tdir.glob("*.parquet")), orphan)
    assert run(capsys, "ingest", str(FIXTURES / "sglang_eagle3_cg_5dt.log"))[0] == 0
    assert orphan.exists()
    code, out, _ = run(capsys, "store", "check", "--json")
    assert code == 0 and json.loads(out)["findings"]["orphan"]["count"] == 1  # kept, not damage
    assert run(capsys, "store", "repair")[0] == 0
    assert not orphan.exists() and len(list(tdir.glob(orphan.name + ".orphan-*"))) == 1


def test_a_crashed_commit_leaves_nothing_that_the_next_writer_cannot_clean(labeled, capsys):
    """Damaged-store class: parts renamed into place by a commit that never replaced the
    manifest carry a generation the manifest never reached: the next writer removes them."""
    man = json.loads((home() / "manifest.json").read_text())
    tdir = home() / "tables" / "decode"
    crashed = tdir / f"abcdef012345-g{man['generation'] + 1}-0123456789ab.parquet"
    shutil.copy(next(tdir.glob("*.parquet")), crashed)
    (tdir / "zzz.parquet.tmp").write_bytes(b"half a part")
    assert run(capsys, "ingest", str(FIXTURES / "sglang_eagle3_cg_5dt.log"))[0] == 0
    assert not crashed.exists() and not (tdir / "zzz.parquet.tmp").exists()
    assert os.path.exists(home() / "manifest.json")


def test_symlinked_table_folder_is_refused_and_set_aside(labeled, capsys, tmp_path):
    """Symlink class: a table folder replaced by a symlink (to anywhere) is not read: exit 7
    naming it; repair renames the link (its target untouched) and the rest serves."""
    tdir = home() / "tables" / "lines"
    elsewhere = tmp_path / "lines-elsewhere"
    shutil.move(tdir, elsewhere)
    tdir.symlink_to(elsewhere, target_is_directory=True)
    code, _, err = run(capsys, "show", "two_launches#1")
    assert code == 7 and "table folder is a symlink" in err
    code, out, _ = run(capsys, "store", "check", "--json")
    assert code == 7 and json.loads(out)["findings"]["symlink"]["items"] == [str(tdir)]
    assert run(capsys, "store", "repair")[0] == 0
    assert elsewhere.is_dir() and not tdir.exists()
    assert run(capsys, "show", "two_launches#1")[0] == 0


def test_a_part_of_another_tables_schema_is_quarantined_not_an_internal_error(labeled, capsys):
    """Damaged-store class (third round): the runs part and the states part swapped (or any
    part copied over another table's) was read as that table: every command was an internal
    error. Each part is checked against its table's declared schema on read (C03 quarantine);
    a re-ingest restores the rows; the label is kept."""
    tmp_path, before = labeled
    a = next((home() / "tables" / "runs").glob("*.parquet"))
    b = next((home() / "tables" / "states").glob("*.parquet"))
    da, db = a.read_bytes(), b.read_bytes()
    a.write_bytes(db)
    b.write_bytes(da)
    code, _, err = run(capsys, "runs")
    assert code == 0 and "internal error" not in err
    assert "quarantined" in err
    assert run(capsys, "ingest", *(str(tmp_path / n) for n in LOGS))[0] == 0
    code, out, err = run(capsys, "runs", "--json")
    after = {r["name"]: r["phase"] for r in json.loads(out)}
    assert set(after) == {r["name"] for r in before}
    assert after["sglang_fail_capture"] == "load"  # the label survived


def test_tables_folder_replaced_by_a_file_is_a_damaged_store(labeled, capsys, tmp_path):
    """Damaged-store class (third round): `tables/` replaced by a file was exit 2 "a component
    of the path is a file" for reads (a usage error about the user's path); it is the store's
    damage: exit 7 for reads and writes, nothing written."""
    tdir = home() / "tables"
    shutil.move(tdir, tmp_path / "tables-aside")
    tdir.write_text("x")
    listing = files(home())
    for cmd in (["runs"], ["ingest", str(tmp_path / LOGS[0])], ["label", "two_launches#1", "ok"]):
        code, _, err = run(capsys, *cmd)
        assert code == 7 and "tables folder" in err, (cmd, err)
    assert files(home()) == listing
