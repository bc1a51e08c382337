"""Issue 14, fourth round (hidden-suite rehearsal), classes "Time" and "The CLI contract":
real sockets and the real CLI process.

- a host that sends an SSH banner and closes (paramiko's EOFError): exit 5, never
  "Interrupted." (click takes any EOFError for Ctrl-D): a CONNECT_ERRORS row, and
  forensics.cli.main calls an EOFError that reached click an error, not a Ctrl-C;
- bench targets: ``[::1]:PORT`` is an IPv6 address and its port; a port is ASCII digits
  (``int('８０')`` is 80).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from forensics.bench.target import resolve_target
from forensics.errors import UsageError
from tests.conftest import closing_port


@pytest.mark.parametrize(
    "argv",
    [
        ["hosts", "check", "h"],
        ["ingest", "h:/var/log/x.log"],
        ["classify", "h:/x.log"],
    ],
)
def test_a_host_that_closes_after_its_banner_is_unreachable_not_interrupted(tmp_path, argv):
    srv = closing_port(banner=True, reset=False)
    port = srv.getsockname()[1]
    (tmp_path / "forensics.toml").write_text(
        f'[hosts.h]\naddress = "root@127.0.0.1:{port}"\nconnect_timeout = 3\n'
    )
    env = {**os.environ, "FORENSICS_HOME": str(tmp_path / "st")}
    try:
        p = subprocess.run(
            [sys.executable, "-m", "forensics", *argv],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        srv.close()
    assert p.returncode == 5, p.stderr
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and "closed the connection" in errors[0], p.stderr
    assert "Interrupted" not in p.stderr and "Traceback" not in p.stderr


def test_an_eof_error_that_reaches_click_is_not_a_ctrl_c(monkeypatch, capsys):
    import click

    from forensics import cli as cli_mod

    @click.command()
    def boom():
        raise EOFError("a stream ended")

    monkeypatch.setattr(cli_mod, "cli", boom)
    with pytest.raises(SystemExit) as exc:
        cli_mod.main([])
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert "internal error: EOFError" in err and "Interrupted" not in err


@pytest.mark.parametrize(
    "target, url",
    [
        ("[::1]:8000", "http://[::1]:8000"),
        ("[::1]", "http://[::1]:30000"),
        ("::1", "http://[::1]:30000"),
        ("127.0.0.1:8000", "http://127.0.0.1:8000"),
    ],
)
def test_bench_host_forms(target, url):
    assert resolve_target(target) == url


@pytest.mark.parametrize("target", ["127.0.0.1:８０", "[::1]:８０", "[::1]:", "127.0.0.1:+80"])
def test_a_port_is_ascii_digits(target):
    with pytest.raises(UsageError):
        resolve_target(target)


# --- class "Time"/"Bounded": `sim serve` options at extremes (argparse, not click) ---


def test_every_numeric_sim_serve_flag_has_a_finite_high_bound():
    from forensics.sim.args import RANGES, STYLES, build_parser

    bounded = {dest: high for dest, _flag, _low, high, _open in RANGES}
    for style in STYLES.values():
        for action in build_parser(style)._actions:
            if action.type in (int, float):
                assert bounded.get(action.dest) is not None, action.option_strings


@pytest.mark.parametrize(
    "flags",
    [
        ["--tp", "1000000000"],
        ["--dp-size", "100000"],
        ["--sim-speed", "1e308"],
        ["--max-running-requests", str(10**15)],
        ["--context-length", str(10**18)],
        ["--mem-fraction-static", "5"],
        ["--watchdog-timeout", "inf"],
    ],
)
def test_sim_serve_refuses_absurd_values_at_once(flags):
    p = subprocess.run(
        [sys.executable, "-m", "forensics", "sim", "serve", "--model-path", "sim://k2", "--port",
         "1", *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert p.returncode == 2, p.stderr[-500:]
    assert "out of range" in p.stderr


# --- class "Time": `sweep` with absurd grids is refused before anything is expanded ---

SWEEP_BASE = """name = "x"
[base]
server = ["python3", "-m", "sglang.launch_server", "--model-path", "sim://k2"]
"""


@pytest.mark.parametrize(
    "body",
    [
        "[grid]\n" + "\n".join(f"k{i} = [{', '.join(map(str, range(40)))}]" for i in range(12)),
        "[grid]\nspeculative_num_steps = [" + ", ".join("2" for _ in range(20000)) + "]",
        "[grid]\nspeculative_num_steps = [2, 3]\n[run]\nrepeats = 1000000000\n",
        "\n".join("[[configs]]\nspeculative_num_steps = 2" for _ in range(10001)),
        "[grid]\nspeculative_num_steps = [2]\n[run]\nbudget_s = inf\n",
        "[grid]\nspeculative_num_steps = [2]\n[run]\nbudget_s = 1e308\n",
    ],
)
def test_absurd_sweep_plans_are_refused_at_once(tmp_path, body):
    from forensics.errors import ConfigError
    from forensics.sweep import plan

    f = tmp_path / "s.toml"
    f.write_text(SWEEP_BASE + body + "\n")
    with pytest.raises(ConfigError) as exc:  # before: 40^12 configs expanded (never returned)
        plan.load(f)
    assert "more than" in str(exc.value) or "at most" in str(exc.value)


# --- class "Non-regular inputs": a magic link to a pipe is refused as the FIFO it is ---


@pytest.mark.parametrize("path", ["/dev/stdin", "/dev/fd/0"])
def test_ingest_of_stdin_on_a_pipe_is_a_fifo(tmp_path, path):
    env = {**os.environ, "FORENSICS_HOME": str(tmp_path / "st")}
    p = subprocess.run(
        [sys.executable, "-m", "forensics", "ingest", path],
        input=b"a line\n",
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert p.returncode == 2, p.stderr
    assert b"FIFO" in p.stderr and b"pipe:[" not in p.stderr


# --- class "Compressed formats damaged": nothing decodes -> not read (exit 3), as classify ---


@pytest.mark.parametrize("cut", [10, 18])
def test_ingest_of_a_compressed_log_of_which_nothing_decodes_is_not_read(tmp_path, cut):
    import gzip
    from pathlib import Path

    log = Path(__file__).parent.parent / "fixtures" / "sglang_fail_capture.log"
    bad = tmp_path / "cut.log.gz"
    bad.write_bytes(gzip.compress(log.read_bytes() * 20)[:cut])
    env = {**os.environ, "FORENSICS_HOME": str(tmp_path / "st")}
    cmd = [sys.executable, "-m", "forensics"]
    for _ in range(2):  # and again: it was not recorded as read, so not "unchanged"
        p = subprocess.run([*cmd, "ingest", str(bad)], env=env, capture_output=True, text=True)
        assert p.returncode == 3, p.stderr
        assert "nothing decoded" in p.stderr
    p = subprocess.run(
        [*cmd, "ingest", str(bad), str(log)], env=env, capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr
    assert "nothing decoded" in p.stderr


# --- class "Non-regular and odd inputs": a container inside a compressed file; stdin closed ---


def _zip_of(data: bytes) -> bytes:
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:  # stored: the log's text is in the clear
        z.writestr("x.log", data)
    return buf.getvalue()


@pytest.mark.parametrize(
    "wrap, what",
    [
        (lambda b: __import__("gzip").compress(_zip_of(b)), "a zip archive inside a gzip"),
        (lambda b: __import__("lzma").compress(__import__("gzip").compress(b)), "inside a xz"),
    ],
)
def test_a_container_inside_a_compressed_file_is_not_a_log(tmp_path, wrap, what):
    from pathlib import Path

    log = Path(__file__).parent.parent / "fixtures" / "sglang_fail_capture.log"
    bad = tmp_path / "x.log"
    bad.write_bytes(wrap(log.read_bytes()))
    env = {**os.environ, "FORENSICS_HOME": str(tmp_path / "st")}
    for cmd in (["classify", str(bad)], ["ingest", str(bad)], ["diagnose", "x", "--log", str(bad)]):
        p = subprocess.run(
            [sys.executable, "-m", "forensics", *cmd], env=env, capture_output=True, text=True
        )
        assert p.returncode == 2, (cmd, p.stderr)
        assert what in p.stderr and "not a log" in p.stderr


def test_classify_paste_with_stdin_closed_is_one_line():
    p = subprocess.run(
        f"{sys.executable} -m forensics classify - <&-", shell=True, capture_output=True, text=True
    )
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("Error: <stdin>: standard input is closed")


# --- class "Correctness of the store": a renamed log is one launch, not two ---


def test_a_renamed_log_is_ingested_once(tmp_path):
    import json
    import shutil
    from pathlib import Path

    fixtures = Path(__file__).parent.parent / "fixtures"
    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(fixtures / "sglang_fail_capture.log", logs / "a.log")
    env = {**os.environ, "FORENSICS_HOME": str(tmp_path / "st")}
    cmd = [sys.executable, "-m", "forensics"]

    def ingest():
        p = subprocess.run([*cmd, "ingest", str(logs)], env=env, capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        return p.stderr

    def names():
        p = subprocess.run([*cmd, "runs", "--json"], env=env, capture_output=True, check=True)
        return sorted(r["name"] for r in json.loads(p.stdout))

    ingest()
    (logs / "a.log").rename(logs / "c.log")
    assert "renamed" in ingest()
    assert names() == ["a"]
    # another file under the old name is a new log, whatever inode it got
    shutil.copy(fixtures / "sglang_fail_load_kv_oom.log", logs / "a.log")
    ingest()
    assert len(names()) == 2


# --- class "Unknown env values": FORENSICS_HOME inside another store ---


@pytest.mark.parametrize("sub", ["tables", "tables/runs", "models", "new/folder"])
def test_a_home_inside_a_store_is_refused_and_the_store_untouched(tmp_path, sub):
    from pathlib import Path

    log = Path(__file__).parent.parent / "fixtures" / "sglang_fail_capture.log"
    st = tmp_path / "st"
    cmd = [sys.executable, "-m", "forensics"]
    env = {**os.environ, "FORENSICS_HOME": str(st)}
    subprocess.run([*cmd, "ingest", str(log)], env=env, check=True, capture_output=True)
    before = {p: p.read_bytes() for p in st.rglob("*") if p.is_file()}
    for argv in (["ingest", str(log)], ["runs"]):
        p = subprocess.run(
            [*cmd, *argv], env={**env, "FORENSICS_HOME": str(st / sub)}, capture_output=True
        )
        assert p.returncode == 7, p.stderr
        assert b"inside the forensics store" in p.stderr
    assert {p: p.read_bytes() for p in st.rglob("*") if p.is_file()} == before


# --- class "CLI contract": a terminal that cannot write UTF-8 (LC_ALL=C, PYTHONUTF8=0) ---


@pytest.mark.parametrize(
    "env",
    [
        {"LC_ALL": "C", "PYTHONUTF8": "0"},
        {"PYTHONIOENCODING": "ascii"},
        {"PYTHONIOENCODING": "latin-1"},
    ],
)
def test_a_non_utf8_terminal_gets_text_and_exact_json(tmp_path, env):
    import json
    import shutil
    from pathlib import Path

    log = tmp_path / "sglang_été_ü→·.log"
    shutil.copy(Path(__file__).parent.parent / "fixtures" / "sglang_fail_capture.log", log)
    base = {**os.environ, "FORENSICS_HOME": str(tmp_path / "st")}
    base.pop("PYTHONIOENCODING", None)
    cmd = [sys.executable, "-m", "forensics"]
    subprocess.run([*cmd, "ingest", str(log)], env=base, check=True, capture_output=True)
    for argv in (["runs"], ["runs", "--csv"], ["lint", "--rules"], ["show", "été"]):
        p = subprocess.run([*cmd, *argv], env={**base, **env}, capture_output=True)
        assert p.returncode in (0, 3), (argv, p.stderr)
        assert b"internal error" not in p.stderr and b"Traceback" not in p.stderr
    p = subprocess.run([*cmd, "runs", "--json"], env={**base, **env}, capture_output=True)
    assert p.returncode == 0, p.stderr
    assert [r["name"] for r in json.loads(p.stdout)] == ["sglang_été_ü→·"]


# --- class "CLI contract": stdout closed, a reader that goes away ---


@pytest.fixture(scope="module")
def one_run_home(tmp_path_factory):
    from pathlib import Path

    home = tmp_path_factory.mktemp("home")
    log = Path(__file__).parent.parent / "fixtures" / "sglang_eagle3_cg_5dt.log"
    env = {**os.environ, "FORENSICS_HOME": str(home)}
    subprocess.run(
        [sys.executable, "-m", "forensics", "ingest", str(log)],
        env=env,
        check=True,
        capture_output=True,
    )
    return env


@pytest.mark.parametrize("argv", ["runs --csv", "signatures --csv", "runs --json", "show sglang"])
def test_stdout_closed_is_no_internal_error(one_run_home, argv):
    p = subprocess.run(
        f"{sys.executable} -m forensics {argv} >&-",
        shell=True,
        env=one_run_home,
        capture_output=True,
    )
    assert b"internal error" not in p.stderr and b"Traceback" not in p.stderr, p.stderr


@pytest.mark.parametrize(
    "argv",
    ["show sglang", "runs", "runs --csv", "lint --rules", "report -o -", "report -o /dev/stdout"],
)
def test_a_reader_that_goes_away_ends_the_command_quietly(one_run_home, argv):
    for _ in range(3):  # the reader may leave before or after the first write
        p = subprocess.run(
            ["bash", "-c", f"{sys.executable} -m forensics {argv} | head -c 1 >/dev/null; "
             "exit ${PIPESTATUS[0]}"],
            env=one_run_home,
            capture_output=True,
        )  # fmt: skip
        assert p.returncode == 0, p.stderr
        assert p.stderr == b""


# --- class "Unknown env values": FORENSICS_DEBUG=0, a home that cannot be a folder ---


@pytest.mark.parametrize(
    "value, traceback", [("0", False), ("no", False), ("banana", False), ("1", True)]
)
def test_forensics_debug_values(tmp_path, value, traceback):
    env = {**os.environ, "FORENSICS_HOME": str(tmp_path / "st"), "FORENSICS_DEBUG": value}
    p = subprocess.run(
        [sys.executable, "-m", "forensics", "show", "nope"], env=env, capture_output=True, text=True
    )
    assert ("Traceback" in p.stderr) is traceback, p.stderr
    if not traceback:
        assert p.returncode == 3 and p.stderr.startswith("Error: nope: no run")


def test_store_check_of_a_home_that_cannot_be_a_folder(tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop.name)
    afile = tmp_path / "afile"
    afile.write_text("x")
    for home in (loop, afile / "x"):
        for argv in (["store", "check"], ["runs"], ["ingest", str(afile)]):
            env = {**os.environ, "FORENSICS_HOME": str(home)}
            p = subprocess.run(
                [sys.executable, "-m", "forensics", *argv], env=env, capture_output=True, text=True
            )
            assert p.returncode == 2, (home, argv, p.stdout, p.stderr)  # hosts.base.PATH_ERRORS
            assert p.stderr.count("Error:") == 1
