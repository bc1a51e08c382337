"""A commit is durable in order (issue 14, "nothing already stored lost"): every new part's
bytes and its name in ``tables/`` reach the disk before the manifest that lists it, so a power
cut right after a commit never leaves a listed part short (the store would quarantine it and
lose its rows until the log is read again).

What the kernel does on a power cut cannot be shown on a running machine; what can be checked
is the order of the ``fsync`` calls a real ingest makes on a real store: each call is recorded
with the path its descriptor names (``/proc/self/fd``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from forensics.ingest import ingest
from forensics.store import Store
from tests.conftest import FIXTURES


def test_parts_and_their_folders_are_fsynced_before_the_manifest(tmp_path, monkeypatch):
    store = Store.open(tmp_path / "st")
    synced: list[str] = []
    real = os.fsync

    def spy(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    ingest(store, [str(FIXTURES / "sglang_two_launches.log")])
    monkeypatch.undo()

    root = (tmp_path / "st").resolve()
    man = json.loads((root / "manifest.json").read_text())
    listed = [(t, n) for t, names in man["tables"].items() for n in names]
    assert listed, "the ingest wrote no part"
    manifest_at = [i for i, p in enumerate(synced) if p.endswith("manifest.json.tmp")]
    for table, name in listed:  # each part: its bytes, then its folder, then the manifest
        part_at = [i for i, p in enumerate(synced) if Path(p).name == name + ".tmp"]
        assert part_at, (table, name, synced)
        later = [i for i in manifest_at if i > part_at[0]]
        assert later, (table, name, synced)
        folder = str(root / "tables" / table)
        dir_at = [i for i, p in enumerate(synced) if p == folder and i > part_at[0]]
        assert dir_at and dir_at[0] < later[0], (table, folder, synced)
