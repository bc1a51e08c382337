"""Issue 14, sixth round: a sweep of every command and every option that takes a path, URL,
host, number or name (docs/bad-inputs.md, "Sixth round"). Each test cites its class.

- CLI contract: a text or path value typed empty (`launch --name ''`, `hosts check ''`,
  `bench --run ''`, `report ''`) was taken for "not given": a name derived from the flags,
  the local machine probed, every run reported. One check (cli_common.refuse_empty_values,
  wrapped around every leaf command) makes it exit 2 before anything runs;
- CLI contract: an option a command drops in silence (`baseline RUN --experiment X`) is
  refused (an OptionRule row);
- non-regular inputs: `sweep x.toml/` and `bench --dataset x.jsonl/` read the file (a
  pathlib.Path drops the trailing slash); the user's path is opened as typed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.cli import cli
from forensics.cli_common import EMPTY_MEANS_SOMETHING
from tests.conftest import FIXTURES, as_bound_by_permissions, closing_port


def forensics(
    tmp_path: Path, *argv: str, env: dict | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    """The real CLI in its own process, with a store of its own under tmp_path (``env``: more
    variables, over the test's environment)."""
    full = {**os.environ, "FORENSICS_HOME": str(tmp_path / "home"), **(env or {})}
    full.pop("FORENSICS_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "forensics", *argv],
        cwd=tmp_path,
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def one_error_line(p: subprocess.CompletedProcess, *needles: str) -> str:
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("Error:")]
    assert len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def _ingested(tmp_path: Path) -> None:
    p = forensics(tmp_path, "ingest", str(FIXTURES / "sglang_baseline.log"))
    assert p.returncode == 0, p.stderr


# ------------------------------------------------------------ CLI contract: empty values


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (
            ["launch", "--shell", "python3 -m sglang.launch_server --model-path /x", "--name", ""],
            "--name",
        ),
        (["hosts", "check", ""], "NAME"),
        (["bench", "http://127.0.0.1:1/", "--run", ""], "--run"),
        (["report", "", "--out", "r.html"], "MATCH"),
        (["report", "--baseline", "", "--out", "r.html"], "--baseline"),
        (["runs", ""], "MATCH"),
        (["ingest", ""], "INPUTS"),
        (["classify", ""], "PATHS"),
        (["sweep", "", "--dry-run"], "FILE"),
        (["--store", "", "runs"], "--store"),
    ],
)
def test_cli_contract_an_empty_value_is_a_usage_error_before_anything_runs(tmp_path, argv, shown):
    """Each of these ran with the empty value as "not given": `launch --name ''` started a
    server under a name derived from its flags, `hosts check ''` probed this machine,
    `bench --run ''` benchmarked without a run, `report ''` reported every run."""
    _ingested(tmp_path)
    p = forensics(tmp_path, *argv)
    assert p.returncode == 2, p.stdout + p.stderr
    one_error_line(p, f"{shown} ''", "empty value", "(try:")
    assert p.stdout == ""
    assert not (tmp_path / "home" / "logs").exists()  # no launch was attempted
    assert not (tmp_path / "r.html").exists()


def test_cli_contract_every_text_parameter_is_guarded():
    """The check is wrapped around every leaf command (a new command gets it too), and the
    table of parameters whose empty value means something names real parameters."""
    import click

    def leaves(cmd, path=()):
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                yield from leaves(sub, (*path, name))
        else:
            yield " ".join(path), cmd

    found = dict(leaves(cli))
    assert len(found) > 20
    for name, cmd in found.items():
        assert getattr(cmd.callback, "refuses_empty", False), name
    for command, param in EMPTY_MEANS_SOMETHING:
        assert param in {p.name for p in found[command].params}


def test_cli_contract_a_server_flag_may_still_be_empty(tmp_path):
    """`launch -- FLAGS` passes the server's own flags as typed: an empty value there is the
    server's business (click.UNPROCESSED), not refused by the check."""
    from forensics.cli_common import refuse_empty_values

    ctx = cli.make_context("forensics", ["launch", "--sim", "--name", "x", "--", "--api-key", ""])
    sub = cli.commands["launch"].make_context(
        "launch", ["--sim", "--name", "x", "--", "--api-key", ""], parent=ctx
    )
    assert "" in sub.params["server_args"]
    refuse_empty_values(sub)  # no error


def test_cli_contract_baseline_run_with_experiment_is_refused(tmp_path):
    """`baseline RUN --experiment X` set the run's own experiment and dropped X in silence."""
    _ingested(tmp_path)
    p = forensics(tmp_path, "baseline", "sglang_baseline", "--experiment", "other")
    assert p.returncode == 2, p.stdout + p.stderr
    one_error_line(p, "--experiment", "--tok-s")
    listed = forensics(tmp_path, "baseline", "--json")
    assert listed.returncode == 0 and listed.stdout.strip() in ("[]", ""), listed.stdout


# ------------------------------------------------------------ non-regular inputs: `file/`


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["sweep", "{p}/", "--dry-run"], "s.toml"),
        (["sweep", "run", "{p}/", "--dry-run"], "s.toml"),
        (["bench", "http://127.0.0.1:1/", "--dataset", "{p}/"], "d.jsonl"),
    ],
)
def test_non_regular_a_user_file_with_a_trailing_slash_is_not_read(tmp_path, argv, name):
    """`x.toml/` names a folder `x.toml`: the system says "not a directory"; a
    pathlib.Path dropped the slash and the file was read as the sweep or the dataset."""
    f = tmp_path / name
    if name.endswith(".toml"):
        f.write_bytes((FIXTURES / "sweeps" / "sim-mix.toml").read_bytes())
    else:
        f.write_text('{"prompt": "hello"}\n')
    p = forensics(tmp_path, *[a.replace("{p}", str(f)) for a in argv])
    assert p.returncode == 2, p.stdout + p.stderr
    one_error_line(p, f"{f}/", "not a directory")


def test_non_regular_classify_of_a_folder_or_an_unreadable_file_goes_through_the_one_reader(
    tmp_path,
):
    """click's own Path check answered `classify DIR` with "File '…' is a directory." (no
    fix) and an unreadable file with exit 2 ("is not readable"), where ingest and diagnose
    --log say exit 3 "permission denied" (docs/exit-codes.md): the paths now go to the one
    reader, as every other log path does."""
    folder = tmp_path / "logs"
    folder.mkdir()
    p = forensics(tmp_path, "classify", str(folder))
    assert p.returncode == 2, p.stderr
    one_error_line(p, str(folder), "is a directory", "(try:")
    if os.geteuid() == 0:
        return  # root reads a file of mode 000: the case needs another user
    locked = tmp_path / "locked.log"
    locked.write_bytes((FIXTURES / "sglang_baseline.log").read_bytes())
    locked.chmod(0)
    p = forensics(tmp_path, "classify", str(locked))
    assert p.returncode == 3, p.stderr
    one_error_line(p, str(locked), "permission denied")


# ------------------------------------------------------------ data loss / outputs: `out.html/`


@pytest.mark.parametrize(
    "argv", [["report", "--out"], ["plot", "decode", "sglang_baseline", "--out"]]
)
def test_data_loss_an_output_named_with_a_trailing_slash_is_refused(tmp_path, argv):
    """`report -o out.html/` wrote (and would replace) the file `out.html`: the slash says a
    folder was meant. forensics.output.out_path keeps the path as typed."""
    _ingested(tmp_path)
    kept = tmp_path / "out.png"
    kept.write_bytes(b"the user's own file")
    p = forensics(tmp_path, *argv, f"{kept}/")
    assert p.returncode == 2, p.stdout + p.stderr
    one_error_line(p, f"{kept}/", "ends with '/'", "(try:")
    assert kept.read_bytes() == b"the user's own file"
    p = forensics(tmp_path, *argv, f"{tmp_path}/new.png/")
    assert p.returncode == 2, p.stderr
    assert not (tmp_path / "new.png").exists()


# ------------------------------------------------------------ non-regular: the launch log


def _socket_file(path: Path):
    import socket

    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    return s


@pytest.mark.parametrize("kind", ["socket", "folder", "fifo", "device", "slash"])
def test_non_regular_a_launch_log_that_is_not_a_regular_file_is_refused_before_the_chain(
    tmp_path, kind
):
    """`launch --log` a socket or a folder was an internal error (ENXIO, IsADirectoryError)
    after the server had been started; a FIFO or /dev/null started a server whose log
    nothing could read. start._check_log_target refuses them (exit 2) before anything runs."""
    target = tmp_path / "x.log"
    held = None
    if kind == "socket":
        held = _socket_file(target)
    elif kind == "folder":
        target.mkdir()
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "device":
        target = Path("/dev/null")
    marker = tmp_path / "ran"
    log = f"{target}/" if kind == "slash" else str(target)
    try:
        p = forensics(
            tmp_path,
            "launch",
            "--shell",
            f"touch {marker}; python3 -m sglang.launch_server --model-path /x",
            "--name",
            "r6",
            "--log",
            log,
            "--deadline",
            "3",
        )
    finally:
        if held is not None:
            held.close()
    assert p.returncode == 2, p.stdout + p.stderr
    one_error_line(p, log, "(try:")
    assert not marker.exists()  # nothing of the chain ran
    assert "server started" not in p.stderr


# ------------------------------------------------------------ damaged store: show


def _damage_first_part(home: Path, how: str) -> Path:
    part = sorted((home / "tables").glob("*/*.parquet"))[0]
    if how == "truncated":
        part.write_bytes(part.read_bytes()[:300])
    elif how == "folder":
        part.unlink()
        part.mkdir()
    else:  # a symlink to a copy elsewhere
        elsewhere = home.parent / "elsewhere.parquet"
        elsewhere.write_bytes(part.read_bytes())
        part.unlink()
        part.symlink_to(elsewhere)
    return part


@pytest.mark.parametrize("how", ["truncated", "folder", "symlink"])
def test_data_loss_show_sets_a_damaged_part_aside_instead_of_an_internal_error(tmp_path, how):
    """`show RUN` on a store whose first decode part was cut short, replaced by a folder or
    by a symlink: "internal error: ColumnNotFoundError: source_id" (exit 1). The part is set
    aside mid-command, the cache of that generation is dropped, and the per-source read
    filtered its rows a second time over the union of reduced parts (Store._reduced now
    filters once, before the reduce). Now: exit 0, the warning that names the part and the
    ingest that restores it; the part is renamed, never deleted."""
    _ingested(tmp_path)
    for extra in ("sglang_fail_capture.log", "sglang_eagle3_cg_5dt.log"):
        assert forensics(tmp_path, "ingest", str(FIXTURES / extra)).returncode == 0
    part = _damage_first_part(tmp_path / "home", how)
    p = forensics(tmp_path, "show", "sglang_baseline")
    assert p.returncode == 0, p.stderr
    assert "internal error" not in p.stderr and "Traceback" not in p.stderr
    assert "quarantined as" in p.stderr and part.name in p.stderr
    assert "sglang_baseline" in p.stdout
    assert list(part.parent.glob(part.name + ".corrupt-*"))  # kept aside, not deleted


# ------------------------------------------------------------ time / remote: hosts trust


@pytest.mark.parametrize("banner", [True, False], ids=["banner-then-reset", "reset"])
def test_remote_hosts_trust_of_a_port_that_resets_is_unreachable(tmp_path, banner):
    """`hosts trust H` of a port that resets the connection: "internal error: EOFError"
    (exit 1) when the reset came during the negotiation; trust.py had its own except for
    SSHException only. It now goes through the one table of connect failures
    (hosts.ssh.CONNECT_ERRORS), as `hosts check` does: exit 5, one line."""
    srv = closing_port(banner=banner, reset=True)
    port = srv.getsockname()[1]
    (tmp_path / "forensics.toml").write_text(
        f'[hosts.h]\naddress = "root@127.0.0.1:{port}"\nconnect_timeout = 3\n'
    )
    try:
        for _ in range(3):  # the reset lands at different moments of the negotiation
            p = forensics(tmp_path, "hosts", "trust", "h", timeout=60)
            assert p.returncode == 5, p.stdout + p.stderr
            one_error_line(p, f"127.0.0.1:{port}", "(try:")
    finally:
        srv.close()


# ------------------------------------------------------------ CLI contract: names


@pytest.mark.parametrize("label", ["a\nb", "x\x1b[2Jy", "rtl\u202eexe", "x" * 500])
def test_cli_contract_an_experiment_name_is_printable_text_of_bounded_length(tmp_path, label):
    """`experiments --label $'a\\nb' RUN` was stored and printed with a raw line break (the
    listing split in two); 5,000 characters were taken. experiment._check_label: what
    terminal.visible would escape, or over LABEL_MAX characters, is exit 2; nothing stored."""
    _ingested(tmp_path)
    p = forensics(tmp_path, "experiments", "--label", label, "sglang_baseline")
    assert p.returncode == 2, p.stdout + p.stderr
    line = one_error_line(p, "--label", "(try:")
    assert "\x1b" not in line and "\u202e" not in line
    listed = forensics(tmp_path, "experiments", "--json")
    assert listed.returncode == 0
    assert label not in listed.stdout


def test_cli_contract_a_sweep_name_error_names_the_option_and_says_one_fix(tmp_path):
    """`sweep FILE --name ..` blamed the file and nested the rule's whole error in the hint:
    `x.toml: name '..' is not a valid name (try: '..' is not a valid launch name (try: …))`."""
    f = tmp_path / "s.toml"
    f.write_bytes((FIXTURES / "sweeps" / "sim-mix.toml").read_bytes())
    p = forensics(tmp_path, "sweep", str(f), "--dry-run", "--name", "..")
    assert p.returncode == 2, p.stderr
    line = one_error_line(p, "--name '..'")
    assert line.count("(try:") == 1 and str(f) not in line


# ------------------------------------------------------------ data loss: a read-only home


def test_data_loss_a_launch_under_a_read_only_home_is_a_store_error_before_anything_runs(
    tmp_path,
):
    """`launch` with a read-only FORENSICS_HOME said "…/logs: permission denied" (exit 3, as
    for a missing input) when it made its log folder; the record it cannot write is the
    store's error: Store.require_writable, exit 7, nothing run, the store as it was."""
    _ingested(tmp_path)
    home = tmp_path / "home"
    before = sorted(p.name for p in home.rglob("*"))
    for p in [home, *home.rglob("*")]:
        p.chmod(p.stat().st_mode & ~0o222)
    env = {**os.environ, "FORENSICS_HOME": str(home)}
    try:
        p = subprocess.run(
            [
                *as_bound_by_permissions(),
                sys.executable,
                "-m",
                "forensics",
                "launch",
                "--sim",
                "--name",
                "ro",
                "--deadline",
                "3",
                "--",
                "--model-path",
                "sim://k2",
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        for q in [home, *home.rglob("*")]:
            q.chmod(q.stat().st_mode | 0o200)
    assert p.returncode == 7, p.stdout + p.stderr
    one_error_line(p, str(home), "cannot record the launch", "(try:")
    assert "server started" not in p.stderr
    assert sorted(q.name for q in home.rglob("*")) == before


# ------------------------------------------------------------ non-regular: classify eval --real


@pytest.mark.parametrize("kind", ["fifo", "file", "slash", "device", "missing"])
def test_non_regular_classify_eval_real_names_what_the_path_is(tmp_path, kind):
    """`classify eval --real X` said "no such folder" (exit 3) for a FIFO, a device or a
    symlink loop, click's "Directory '…' is a file." (no fix) for a file, and read `x.log/`
    as `x.log`. real_eval._require_folder: one stat of the path as typed, the one table of
    file kinds: exit 2 naming what it is; missing stays exit 3."""
    target = tmp_path / "x.log"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind in ("file", "slash"):
        target.write_text("x\n")
    elif kind == "device":
        target = Path("/dev/null")
    arg = f"{target}/" if kind == "slash" else str(target)
    p = forensics(tmp_path, "classify", "eval", "--real", arg)
    want = {
        "fifo": "FIFO",
        "file": "regular file",
        "slash": "not a directory",
        "device": "device",
        "missing": "no such folder",
    }[kind]
    assert p.returncode == (3 if kind == "missing" else 2), p.stderr
    one_error_line(p, arg, want, "(try:")
