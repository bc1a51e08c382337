"""Secrets, fifth round (issue 14): a launch whose log forensics chose (no `--log`: under
$FORENSICS_HOME/logs) and a journaled replay keep no secret in any file they leave on this
machine: the server's log, the journal, the work folder's step outputs; the wrapper and the
chain text (which run with the real values) are gone once the supervisor has read them.
Real processes: the wrapper, the supervisor and the simulated server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from forensics_parsers.secrets import mask, redact

KEY = "sEkret-r5-0a1b2c3d4e"
TOKEN = "hf_R5tokenAbCdEfGhIjKl"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FORENSICS_HOME": str(home)}
    p = subprocess.run(
        [sys.executable, "-m", "forensics", *args],
        env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert "Traceback" not in p.stderr, p.stderr
    return p


def _leaks(*roots: Path) -> list[str]:
    found = []
    for root in roots:
        for p in [Path(root)] if Path(root).is_file() else Path(root).rglob("*"):
            if p.is_file() and not p.is_symlink():
                data = p.read_bytes()
                found += [f"{p}: {s}" for s in (KEY, TOKEN) if s.encode() in data]
    return found


def _stop(home: Path, name: str) -> None:
    _cli(home, "stop", name)


def test_mask_keeps_length_and_finds_what_redact_finds():
    for line in (
        f"server_args=ServerArgs(api_key='{KEY}', hf_token=None)",
        f"launch: sglang --api-key {KEY} --port 1",
        f'{{"tail":"HF_TOKEN={TOKEN} ok"}}',
        "café: nothing secret here",
    ):
        data = line.encode()
        masked, _ = mask(data)
        assert len(masked) == len(data)
        assert (KEY.encode() in masked or TOKEN.encode() in masked) is False
        assert (masked != data) == (redact(line) != line)
    # what is redacted already stays as it is (the journal's fields, JSON-escaped or not)
    for done in (redact(f"--api-key {KEY}"), json.dumps(redact(f"--api-key {KEY}"))):
        assert mask(done.encode())[0] == done.encode()


def test_a_launch_without_log_keeps_no_secret_in_its_home(tmp_path):
    """No `--log`: the server's own output goes to $FORENSICS_HOME/logs/NAME.log. The simulated
    server refuses `--api-key` and prints it back in its usage error, as a real server prints
    its server_args: the log keeps the line, the key masked."""
    home = tmp_path / "home"
    p = _cli(
        home, "launch", "--sim", "--name", "sec5", "--port", str(_free_port()),
        "--deadline", "30", "--json", "--", "--model-path", "sim://k2", "--api-key", KEY,
    )  # fmt: skip
    try:
        assert p.returncode in (0, 1), p.stderr
        log = home / "logs" / "sec5.log"
        assert "--api-key ****" in log.read_text()
        assert _leaks(home) == []
        assert not list(home.rglob("chain.txt")) and not list(home.rglob("wrapper.sh"))
    finally:
        _stop(home, "sec5")


def test_a_replay_keeps_no_secret_in_its_journal_or_work_files(tmp_path):
    """A replayed chain whose first step prints a token (its output is the work folder's,
    its tail the journal's): the server runs, the journal beside the log and every work file
    hold the token masked."""
    home = tmp_path / "home"
    logs = tmp_path / "logs"
    logs.mkdir()
    chain = (
        f"echo HF_TOKEN={TOKEN} api_key={KEY}; "
        f"python3 -m sglang.launch_server --model-path sim://k2 --port {_free_port()} "
        f"> {logs}/r5.log 2>&1 &"
    )
    p = _cli(home, "launch", "--shell", chain, "--replay", "--sim", "--name", "r5",
             "--deadline", "60", "--json")  # fmt: skip
    try:
        assert p.returncode == 0, p.stderr
        result = json.loads(p.stdout)
        assert result["status"] == "ready", result
        outs = list(logs.glob("r5.log.journal.d/*/out*"))
        assert outs and any(b"HF_TOKEN=****" in o.read_bytes() for o in outs)
        assert _leaks(home, logs) == []
        assert not list(logs.rglob("chain.txt")) and not list(logs.rglob("wrapper.sh"))
    finally:
        _stop(home, "r5")


def _journal_dir(home: Path, name: str) -> Path:
    rows = json.loads(_cli(home, "launch", "--list", "--json").stdout)
    journal = Path(next(r["journal_path"] for r in rows if r["name"] == name))
    return journal.parent / journal.name.replace(".journal.jsonl", ".journal.d")


def test_an_interrupted_or_killed_replay_leaves_no_secret(tmp_path):
    """SIGTERM of the launcher while a step that printed a key still runs: what it left is
    masked before it exits. SIGKILL: nothing can run then; the next launch of the name masks
    the work folders of the launches before it."""
    import signal
    import time

    home = tmp_path / "home"
    name = f"k5{os.getpid()}"
    env = {**os.environ, "FORENSICS_HOME": str(home)}
    chain = f"echo api_key={KEY}; sleep 8"
    for sig in (signal.SIGTERM, signal.SIGKILL):
        p = subprocess.Popen(
            [sys.executable, "-m", "forensics", "launch", "--shell", chain, "--replay",
             "--name", name, "--step-deadline", "20"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        outs: list[Path] = []
        while p.poll() is None and not any(KEY.encode() in o.read_bytes() for o in outs):
            time.sleep(0.1)  # the step has printed the key into the work folder
            try:
                outs = list(_journal_dir(home, name).glob("*/out*"))
            except (StopIteration, ValueError):
                outs = []
        p.send_signal(sig)
        err = p.communicate()[1]
        if sig == signal.SIGTERM:
            assert p.returncode == 130 and "Traceback" not in err, err
            jd = _journal_dir(home, name)
            assert not _leaks(jd, jd.with_name(name + ".journal.jsonl"))
    time.sleep(9)  # the killed launch's step ends (its wrapper outlives the launcher)
    p = _cli(home, "launch", "--shell", "echo nothing", "--replay", "--name", name)
    jd = _journal_dir(home, name)
    assert len(list(jd.iterdir())) == 3  # the SIGTERM's, the SIGKILL's, this one's
    assert not _leaks(jd, jd.with_name(name + ".journal.jsonl"), home)
