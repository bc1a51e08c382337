"""The one log source (forensics/logsource.py) for what issue 12 and 14 found read twice: lz4 is
read through the FORMATS table like gzip/zstd/xz/bzip2 (real files, damaged halfway keeps what
decodes, truncated is not "Interrupted."), and a paste on stdin (`classify -`) is read through
the same table (``open_bytes``), not a gzip branch of its own.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess

import lz4.frame
import pytest
import zstandard
from click.testing import CliRunner

from forensics.cli import cli
from forensics.errors import StreamDamaged
from forensics.hosts import LocalHost
from forensics.logpaste import open_bytes
from forensics.logsource import FORMATS, open_log
from tests.conftest import FIXTURES

LOG = FIXTURES / "sglang_fail_load_kv_oom.log"  # a load-phase failure: kv_pool_oom
SERVED = FIXTURES / "sglang_fail_runtime_ima.log"


def _classify(*args: str, stdin: bytes | None = None) -> tuple[int, list[dict], str]:
    r = CliRunner().invoke(cli, ["classify", "--json", *args], input=stdin)
    out = json.loads(r.stdout) if r.exit_code == 0 else []
    return r.exit_code, [{k: v for k, v in d.items() if k != "path"} for d in out], r.stderr


def _big() -> bytes:
    return (
        SERVED.read_bytes()
        + b"".join(p.read_bytes() for p in sorted(FIXTURES.glob("sglang_*.log")))
    ) * 4


def test_lz4_is_a_format_that_is_read():
    lz4_row = next(f for f in FORMATS if f.name == "lz4")
    assert lz4_row.decompressor is not None


@pytest.mark.skipif(shutil.which("lz4") is None, reason="needs the lz4 command line tool")
def test_an_lz4_file_from_the_lz4_tool_reads_as_its_original(tmp_path):
    p = tmp_path / "x.log.lz4"
    subprocess.run(["lz4", "-q", "-z", str(LOG), str(p)], check=True)
    assert b"".join(open_log(LocalHost(), str(p)).chunks()) == LOG.read_bytes()
    assert _classify(str(p))[1] == _classify(str(LOG))[1]


def test_lz4_damaged_halfway_keeps_what_decodes_and_truncated_is_not_interrupted(tmp_path):
    data = _big()
    full = lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_checksum=True)
    damaged = bytearray(full)
    at = len(damaged) * 6 // 10
    damaged[at : at + 64] = b"\xaa" * 64
    for name, blob in {"damaged": bytes(damaged), "truncated": full[: len(full) * 3 // 4]}.items():
        p = tmp_path / f"{name}.log"
        p.write_bytes(blob)
        got = bytearray()
        with pytest.raises(StreamDamaged) as exc:
            for chunk in open_log(LocalHost(), str(p)).chunks():
                got += chunk
        assert exc.value.truncated == (name == "truncated")
        assert len(data) // 3 < exc.value.kept == len(got) and data.startswith(bytes(got))
        code, verdicts, err = _classify(str(p))
        assert code == 0 and "Interrupted" not in err and f"lz4 stream is {name}" in err
        assert verdicts and verdicts[0]["phase"]


ENCODED = {
    "gzip": gzip.compress,
    "lz4": lz4.frame.compress,
    "zstd": lambda b: zstandard.ZstdCompressor().compress(b),
    "utf-16": lambda b: b.decode().encode("utf-16"),  # with its BOM
    "utf-8-bom": lambda b: b"\xef\xbb\xbf" + b,
}


@pytest.mark.parametrize("name", ENCODED)
def test_a_paste_on_stdin_reads_through_the_formats_table(name):
    data = LOG.read_bytes()
    blob = ENCODED[name](data)
    assert b"".join(open_bytes(blob).chunks()) == data
    code, verdicts, err = _classify("-", stdin=blob)
    assert code == 0, err
    plain = _classify("-", stdin=data)[1]
    assert verdicts == plain and plain[0]["signature"] == "kv_pool_oom"


def test_a_damaged_gzip_paste_keeps_what_decodes_and_a_binary_paste_is_refused():
    data = _big()
    blob = gzip.compress(data)
    code, verdicts, err = _classify("-", stdin=blob[: len(blob) * 3 // 4])
    assert code == 0 and verdicts and "Interrupted" not in err
    assert "<stdin>: gzip stream is truncated" in err and "kept the" in err
    code, _, err = _classify("-", stdin=b"PK\x03\x04" + bytes(range(256)) * 4)
    assert code == 2 and "zip archive" in err and err.count("\n") == 1
