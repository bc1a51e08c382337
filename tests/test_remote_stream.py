"""Remote logs streamed over a real sshd (forensics.logsource: one stream per file, read ahead,
compressed on the wire): the bytes are the file's whatever the wire and the offset; what the
stream does not deliver comes over SFTP; several hosts in one ingest give what local ingest gives.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics import logsource
from forensics.cli import cli
from forensics.logsource import READ_CHUNK, Wire, open_log
from tests.conftest import FIXTURES


@pytest.fixture(scope="module")
def big_log(tmp_path_factory) -> Path:
    from scripts.bench_ingest import generate

    path = tmp_path_factory.mktemp("stream") / "busy.log"
    generate(path, 9)  # > two READ_CHUNKs
    return path


def _wires() -> list[str]:
    return [w.name for w in logsource.WIRE if shutil.which(w.command.split()[0])]


@pytest.mark.parametrize("wire", _wires())
def test_streamed_chunks_are_the_file_bytes_from_any_offset(ssh_host, big_log, monkeypatch, wire):
    monkeypatch.setattr(logsource, "WIRE", tuple(w for w in logsource.WIRE if w.name == wire))
    data = big_log.read_bytes()
    src = open_log(ssh_host, str(big_log))
    chunks = list(src.chunks())
    assert b"".join(chunks) == data
    assert max(map(len, chunks)) <= READ_CHUNK
    assert b"".join(src.chunks(12_345)) == data[12_345:]
    src.prefetch(0)  # started ahead, taken over by chunks(0)
    assert src._ahead is not None
    assert b"".join(src.chunks(0)) == data
    assert src._ahead is None
    src.prefetch(0)  # started ahead, never taken: closed, the connection still serves
    src.close()
    assert ssh_host.run("echo ok", timeout=10).text.strip() == "ok"


def test_what_the_stream_misses_is_read_over_sftp(ssh_host, big_log, monkeypatch):
    # a "wire" that stops after 100 kB, as a dropped stream would
    monkeypatch.setattr(logsource, "WIRE", (Wire("cat", "head -c 100000", None),))
    src = open_log(ssh_host, str(big_log))
    assert b"".join(src.chunks()) == big_log.read_bytes()
    # a wire the host does not have falls back to the next
    monkeypatch.setattr(
        logsource, "WIRE", (Wire("gzip", "no-such-zipper -c", None), Wire("cat", "cat", None))
    )
    assert b"".join(open_log(ssh_host, str(big_log)).chunks(5)) == big_log.read_bytes()[5:]


def _ingest(args: list[str]) -> dict:
    r = CliRunner().invoke(cli, ["ingest", *args, "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def _runs() -> dict[str, dict]:
    r = CliRunner().invoke(cli, ["runs", "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return {x["name"]: x for x in json.loads(r.output)}


def test_several_hosts_in_one_ingest_equal_local(sshd_server, ssh_config, tmp_path, monkeypatch):
    names = ["sglang_eagle3_cg_5dt.log", "sglang_baseline.log", "sglang_eagle3_nocg_16dt.log"]
    d = tmp_path / "logs"
    d.mkdir()
    for n in names:
        shutil.copy(FIXTURES / n, d / n)
    Path("forensics.toml").write_text("".join(sshd_server.toml(f"h{i}") for i in range(3)))
    remote = _ingest([f"h{i}:{d / n}" for i, n in enumerate(names)])
    assert remote["files_by_status"] == {"new": 3}
    got = _runs()
    monkeypatch.setenv("FORENSICS_HOME", str(tmp_path / "local-store"))
    local = _ingest([str(d / n) for n in names])
    want = _runs()
    for k in ("lines_total", "decode_lines", "prefill_lines", "bytes_parsed", "lines_by_kind"):
        assert remote[k] == local[k], k
    assert set(got) == set(want)
    where = ("host", "source_id", "path", "run_id", "experiment")  # name the host, not the data
    for name, run in want.items():
        assert {k: v for k, v in got[name].items() if k not in where} == {
            k: v for k, v in run.items() if k not in where
        }
        assert got[name]["host"] != "local"


@pytest.mark.parametrize("wire", [w for w in _wires() if w != "cat"])
def test_a_nul_padded_tail_comes_in_bounded_chunks(ssh_host, tmp_path, monkeypatch, wire):
    # P10: a log whose tail is NUL padding compresses > 1000x on the wire
    monkeypatch.setattr(logsource, "WIRE", tuple(w for w in logsource.WIRE if w.name == wire))
    f = tmp_path / "padded.log"
    f.write_bytes(b"[2026-02-25 11:00:00] The server is fired up and ready to roll!\n" * 200)
    with f.open("r+b") as fh:
        fh.truncate(24 << 20)
    sizes = [len(c) for c in open_log(ssh_host, str(f)).chunks()]
    assert sum(sizes) == 24 << 20
    assert max(sizes) <= READ_CHUNK
