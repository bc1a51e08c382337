"""Issue 14 hostile cases, second round: other spellings and other commands of its classes.

* "Non-regular inputs": a sweep FILE or a bench --dataset that is a FIFO, a device or a folder
  is refused with its kind (exit 2) before any read, never a hang or an endless read
  (forensics.userfile: one reader with a cap per kind of file).
* "Bad input gives a one-line error": a path no command caught (a name over NAME_MAX for
  report -o, plot -o, --store) is the errno table's line and exit code, not an internal error
  (forensics.cli: hosts.base.PATH_ERRORS); an unparsable bench URL is exit 2.
* "Secrets": command-line flags (`--api-key X`, `--admin-api-key=X`, `--hf-token X`) and an
  `Authorization: Basic ...` header never reach a table verbatim (parsers/secrets.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl
import pytest

from forensics.cli import main
from forensics.userfile import read_user_file
from forensics_parsers.secrets import redact

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "fixtures" / "sglang_fail_load_kv_oom.log"
LONG = "y" * 300  # over NAME_MAX (255)


def run(capsys, *args: str, store: str | Path = "st") -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(["--store", str(store), *args])
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    assert "internal error" not in err and "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("kind", ["fifo", "dev", "dir"])
def test_sweep_file_and_dataset_not_regular_exit_2(tmp_path, monkeypatch, capsys, kind):
    monkeypatch.chdir(tmp_path)
    path = {"fifo": tmp_path / "p", "dev": Path("/dev/zero"), "dir": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    rc, _, err = run(capsys, "sweep", str(path))
    assert rc == 2, err
    assert str(path) in one_line_error(err)
    rc, _, err = run(capsys, "bench", "http://127.0.0.1:9/", "--dataset", str(path))
    assert rc == 2, err
    assert str(path) in one_line_error(err)


def test_user_file_cap_refuses_before_reading(tmp_path, monkeypatch):
    from forensics import userfile
    from forensics.errors import UsageError

    f = tmp_path / "big.toml"
    f.write_bytes(b"#" * 5000)
    monkeypatch.setitem(userfile.USER_FILE_CAPS, "sweep file", 4096)
    with pytest.raises(UsageError, match="over the 4,096-byte cap"):
        read_user_file(f, "sweep file")
    monkeypatch.setitem(userfile.USER_FILE_CAPS, "sweep file", 5000)
    assert read_user_file(f, "sweep file") == b"#" * 5000


@pytest.mark.parametrize(
    "args",
    [
        ("report", "-o", "{d}/" + LONG + ".html"),
        ("plot", "trend", "-o", "{d}/" + LONG + ".png"),
        ("--store", "{d}/" + LONG, "runs"),
    ],
    ids=["report-o", "plot-o", "store"],
)
def test_name_over_name_max_is_a_usage_error(tmp_path, monkeypatch, capsys, args):
    monkeypatch.chdir(tmp_path)
    argv = [a.format(d=tmp_path) for a in args]
    if argv[0] == "plot":  # an empty store is exit 3 before the --out is looked at
        assert run(capsys, "ingest", str(LOG), store=tmp_path / "st")[0] == 0
    rc, _, err = run(capsys, *argv, store=tmp_path / "st")
    assert rc == 2, err
    assert "name too long" in one_line_error(err)


@pytest.mark.parametrize("url", ["http://[::1", "http://127.0.0.1:99999/"])
def test_bench_unparsable_url_exit_2(tmp_path, capsys, url):
    rc, _, err = run(capsys, "bench", url, "--no-store", store=tmp_path / "st")
    assert rc == 2, err
    one_line_error(err)


CMDLINE = (
    "python -m sglang.launch_server --model-path m --api-key CLIKEY111aaa "
    "--admin-api-key=CLIADMIN222 --ssl-keyfile-password 'PW 333' --hf-token hfTOK444 --port 30000"
)


def test_secret_flags_and_basic_auth_redacted():
    out = redact(CMDLINE)
    for secret in ("CLIKEY111aaa", "CLIADMIN222", "PW 333", "hfTOK444"):
        assert secret not in out
    assert "--model-path m" in out and "--port 30000" in out  # other flags kept
    assert "QUxBRERJTg" not in redact("Authorization: Basic QUxBRERJTjpPUEVO")
    assert redact("--skip-tokenizer-init --max-total-tokens 4096") == (
        "--skip-tokenizer-init --max-total-tokens 4096"
    )


def test_secret_flags_never_reach_the_store(tmp_path, capsys):
    log = tmp_path / "sec.log"
    log.write_text(
        LOG.read_text() + f"{CMDLINE}\nAuthorization: Basic QUxBRERJTjpPUEVO\n", encoding="utf-8"
    )
    st = tmp_path / "st"
    rc, _, err = run(capsys, "ingest", str(log), store=st)
    assert rc == 0, err
    rc, out, _ = run(capsys, "show", "sec", "--json", store=st)
    texts = [out]
    for part in st.rglob("*.parquet"):
        df = pl.read_parquet(part)
        texts += [str(v) for c in df.columns if df[c].dtype == pl.String for v in df[c]]
    blob = "\n".join(texts)
    for secret in ("CLIKEY111aaa", "CLIADMIN222", "PW 333", "hfTOK444", "QUxBRERJTjpPUEVO"):
        assert secret not in blob
