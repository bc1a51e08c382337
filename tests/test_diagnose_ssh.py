"""`diagnose --log` and `classify` on remote paths (``NAME:/path``, ``ssh://...``), real sshd.

The server runs on this machine (tests/plugins/sshd.py), so every remote verdict is compared
with the local verdict on the same file.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics.cli import cli, main

CORPUS = Path(__file__).resolve().parent.parent / "forensics" / "data" / "corpus"
CAPTURE_OOM = CORPUS / "gen" / "capture_oom-059-0.log"
SERVED = CORPUS / "gen" / "ok_serve-059-0.log"


def _json(*args: str):
    r = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def _run(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return (exc.value.code or 0), out, err


def _one_line(err: str, *needles: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    assert "Traceback" not in err and "internal error" not in err, err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def _verdict(rep: dict) -> tuple:
    return (
        rep["phase"],
        rep["hung"],
        rep["signature"],
        rep["confidence"],
        [(e["line"], e["text"]) for e in rep["evidence"]],
        rep["explanation"],
    )


@pytest.fixture
def eagle3(tmp_path) -> Path:
    d = tmp_path / "remote eagle3"  # a space in the remote path
    d.mkdir()
    (d / "sglang_eagle3_cg_3step.log").write_bytes(CAPTURE_OOM.read_bytes())
    (d / "sglang_eagle3_cg_4step.log").write_bytes(SERVED.read_bytes())
    return d


def test_diagnose_remote_log_same_verdict_as_local(ssh_config, eagle3):
    """--log sshtest:/path and --log ssh://user@host:port/path classify like the local file."""
    log = eagle3 / "sglang_eagle3_cg_3step.log"
    (local,) = _json("diagnose", "3step", "--log", str(log))
    (named,) = _json("diagnose", "3step", "--log", f"sshtest:{log}")
    (url,) = _json("diagnose", "3step", "--log", f"ssh://{ssh_config.address}{log}")
    assert (local["phase"], local["signature"]) == ("capture", "capture_failed")
    assert _verdict(named) == _verdict(local) == _verdict(url)
    assert named["path"] == f"sshtest:{log}" and named["host"] == "sshtest"
    assert named["evidence"][0]["where"] == f"sshtest:{log}:{local['evidence'][0]['line']}"
    # --host naming the same host as the prefix is fine; a plain path with --host still works
    (same,) = _json("diagnose", "3step", "--log", f"sshtest:{log}", "--host", "sshtest")
    (plain,) = _json("diagnose", "3step", "--log", str(log), "--host", "sshtest")
    assert _verdict(same) == _verdict(plain) == _verdict(local)


def test_remote_missing_log_is_evidence_naming_the_host(ssh_config, eagle3):
    """The seed's `No such file or directory`, asked on the remote host that answered."""
    log = eagle3 / "sglang_eagle3_cg_2step.log"
    (rep,) = _json("diagnose", "2step", "--log", f"sshtest:{log}")
    assert rep["signature"] == "log_never_written"
    assert rep["phase"] in ("pre-exec", "cleanup")
    assert (rep["host"], rep["checked_on"], rep["path"]) == ("sshtest", "sshtest", str(log))
    assert rep["evidence"][0]["where"] == f"sshtest:{log}: no such file"
    assert "asked sshtest" in rep["evidence"][0]["text"]
    assert "asked sshtest" in rep["explanation"]
    # the log's folder was checked on that host too: it exists, so that cause comes last
    assert rep["causes"][-1]["cause"] == "log-dir-missing"
    assert rep["causes"][-1]["evidence"] == f"sshtest:{eagle3}: exists (checked)"
    assert any("--relaunch --host sshtest" in s for s in rep["next_steps"])

    (nodir,) = _json("diagnose", "2step", "--log", f"sshtest:{eagle3}/gone/x.log")
    assert nodir["causes"][0]["cause"] == "log-dir-missing"
    assert nodir["causes"][0]["evidence"] == f"sshtest:{eagle3}/gone: does not exist"
    assert nodir["phase"] == "pre-exec"


def test_unknown_host_prefix_is_exit_2_naming_configured_hosts(ssh_config, capsys):
    code, out, err = _run(capsys, "diagnose", "x", "--log", "gpu8:/data/eagle3/x.log")
    assert code == 2 and out == ""
    _one_line(err, "unknown host 'gpu8'", "configured: sshtest")
    code, out, err = _run(capsys, "classify", "gpu8:/data/eagle3/x.log")
    assert code == 2
    _one_line(err, "unknown host 'gpu8'", "configured: sshtest")


def test_unreachable_host_is_exit_5_not_a_missing_log(ssh_config, capsys):
    """S01: nothing listens there; the log's absence is not known, so no diagnosis."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = ssh_config.toml("deadhost", address=f"{ssh_config.user}@127.0.0.1:{port}")
    with open("forensics.toml", "a") as f:
        f.write(dead)
    code, out, err = _run(capsys, "diagnose", "2step", "--log", "deadhost:/data/x_2step.log")
    assert code == 5 and "log_never_written" not in out
    _one_line(err, f"127.0.0.1:{port}")
    code, _, err = _run(capsys, "classify", "deadhost:/data/x_2step.log")
    assert code == 5
    _one_line(err, f"127.0.0.1:{port}")


def test_host_option_and_prefix_that_disagree_is_exit_2(ssh_config, capsys, eagle3):
    log = eagle3 / "sglang_eagle3_cg_3step.log"
    code, _, err = _run(capsys, "diagnose", "3step", "--log", f"sshtest:{log}", "--host", "gpu9")
    assert code == 2
    _one_line(err, "--host gpu9", f"sshtest:{log}", "different hosts")
    url = f"ssh://{ssh_config.address}{log}"
    code, _, err = _run(capsys, "diagnose", "3step", "--log", url, "--host", "local")
    assert code == 2
    _one_line(err, "different hosts")
    # an ssh:// URL to the configured address of --host is the same host
    (rep,) = _json("diagnose", "3step", "--log", url, "--host", "sshtest")
    assert rep["signature"] == "capture_failed"


def test_classify_over_ssh_matches_local(ssh_config, eagle3, capsys):
    local = _json("classify", str(eagle3 / "sglang_eagle3_cg_3step.log"))
    remote = _json("classify", f"sshtest:{eagle3}/sglang_eagle3_cg_3step.log")
    strip = [{k: v for k, v in d.items() if k != "path"} for d in local]
    assert [{k: v for k, v in d.items() if k != "path"} for d in remote] == strip
    assert remote[0]["path"] == f"sshtest:{eagle3}/sglang_eagle3_cg_3step.log"
    # a quoted glob is expanded on the host
    both = _json("classify", f"sshtest:{eagle3}/*.log")
    assert [(d["path"], d["phase"]) for d in both] == [
        (f"sshtest:{eagle3}/sglang_eagle3_cg_3step.log", "capture"),
        (f"sshtest:{eagle3}/sglang_eagle3_cg_4step.log", "ok"),
    ]
    # a remote file that is not there: exit 3, names the host, points at a working diagnose
    missing = f"sshtest:{eagle3}/sglang_eagle3_cg_2step.log"
    code, _, err = _run(capsys, "classify", missing)
    assert code == 3
    _one_line(
        err, "no such file (asked sshtest)", "forensics diagnose sglang_eagle3_cg_2step --log"
    )
    assert f"--log '{missing}'" in err  # quoted: the path has a space


def test_convention_guess_on_the_ingested_host(ssh_config, eagle3, capsys):
    """Issue 4, as issue 14 amends it: `diagnose 2step` after ingesting 3step/4step over SSH
    checks the conventional log on that host; absent, with nothing recorded, it is exit 3 with
    the `--log` to give; given, the missing log on that host is the evidence."""
    r = CliRunner().invoke(cli, ["ingest", f"sshtest:{eagle3}/*.log"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    guess = f"{eagle3}/sglang_eagle3_cg_2step.log"
    code, out, err = _run(capsys, "diagnose", "2step")
    assert code == 3 and "log_never_written" not in out
    assert f"--log 'sshtest:{guess}'" in err  # quoted: the path has a space
    (rep,) = _json("diagnose", "sglang_eagle3_cg_2step", "--log", f"sshtest:{guess}")
    assert rep["signature"] == "log_never_written"
    assert (rep["path"], rep["host"], rep["checked_on"]) == (guess, "sshtest", "sshtest")


def test_convention_guess_on_an_unreachable_host_is_exit_5(ssh_config, eagle3, capsys):
    """S01 after ingest: the host of the ingested runs is down, so whether the guessed log
    exists is not known: exit 5 naming the guess, never "log never written"."""
    r = CliRunner().invoke(cli, ["ingest", f"sshtest:{eagle3}/*.log"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    from forensics import hosts

    hosts.close_all()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    Path("forensics.toml").write_text(
        ssh_config.toml("sshtest", address=f"{ssh_config.user}@127.0.0.1:{port}")
    )
    code, out, err = _run(capsys, "diagnose", "2step")
    assert code == 5 and "log_never_written" not in out
    _one_line(err, "refused", f"checking sshtest:{eagle3}/sglang_eagle3_cg_2step.log")
