"""forensics/launcher/: journaled relaunch, diagnosis from the journal, launch and stop.

Real processes only: the simulated server (python -m forensics.sim) in place of SGLang, and
every replay uses safe patterns (a per-replay token), so no test kills anything it did not
start (bad-inputs S14-S16).
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from forensics import launcher
from forensics.cli import cli
from forensics.hosts import LocalHost
from forensics.recipe import Recipe
from forensics.store import Store
from forensics_parsers.journal import parse_journal
from tests.plugins.sshd import connection_processes
from tests.test_shell import SEED

SPEED = 400.0
# the health wait of a launch that should get ready: a hang guard, not a timing assertion (the
# launch returns once the server is ready; 20 s failed on a busy machine: S07 recheck)
READY_DEADLINE = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def store(tmp_path):
    st = Store.open(tmp_path / "store", create=True)
    yield st
    # stop whatever our launches left running: their own process groups only
    df = launcher.launches_frame(st)
    # (a failed test may leave its launch running, unknown or interrupted: stopped too)
    live = df.filter(df["status"].is_in(["ready", *launcher.UNSETTLED]))
    for row in live.iter_rows(named=True):
        launcher.stop(st, row["name"], grace_s=3)


def _sim_recipe(tmp_path, name: str, **kw) -> Recipe:
    """A recipe for SGLang (the simulator stands in with ``sim=``), logging to tmp_path/logs."""
    return Recipe(
        name=name,
        server=["python3", "-m", "sglang.launch_server", "--model-path", "m"],
        log_path=str(tmp_path / "logs" / f"{name}.log"),
        health_url=None,
        **kw,
    )


def _seed(tmp_path) -> str:
    logs = tmp_path / "eagle3"
    logs.mkdir(exist_ok=True)
    return SEED.replace("/data/eagle3", str(logs))


@pytest.fixture(params=["local", "ssh"])
def where(request):
    """The host a replay runs on: this machine, or the test sshd on 127.0.0.1 (issue 5: the
    failure cases are replayed through SSH too)."""
    if request.param == "ssh":
        request.getfixturevalue("ssh_config")
        return "sshtest"
    return None


def _replay(store, chain, *, port=None, host=None, **kw):
    recipe = Recipe.from_shell(chain, host=host)
    sim = {"speed": SPEED, "port": port or _free_port(), "python": sys.executable}
    sim.update(kw.pop("sim", {}))
    return launcher.relaunch(
        store,
        recipe.name,
        recipe=recipe,
        safe_patterns=True,
        sim=sim,
        deadline=READY_DEADLINE,
        **kw,
    )


def test_seed_chain_replay_is_a_cleanup_self_kill_s14(store, tmp_path):
    res = _replay(store, _seed(tmp_path))
    assert res["cause"] == "cleanup-self-kill"
    assert res["step"] == 1
    assert res["explanation"] == (
        'step 1 `pkill -f "sglang.launch_server"` killed the launching shell (exit 143, '
        "SIGTERM): its command line contains `sglang.launch_server`; nohup never ran, so no "
        "log was written."
    )
    assert res["log_exists"] is False
    assert res["status"] == "failed"
    events = [(e["event"], e["step"]) for e in res["evidence"]]
    assert ("start", 1) in events and ("end", 1) not in events and ("exit", None) in events
    # the launch was registered and the journal stored
    launches = launcher.launches_frame(store)
    assert launches.row(-1, named=True)["cause"] == "cleanup-self-kill"
    assert store.table("journal").filter(store.table("journal")["event"] == "exit").height == 1


# pkill [-9] -f PATTERN, its matches signalled in the order /proc lists them once the pids
# wrapped after the launching shell's: the oldest match (that shell) last; each is waited
# for until it is gone (a bounded wait: a hang guard)
PKILL_AFTER_A_WRAP = r"""#!/bin/sh
sig=TERM
for a in "$@"; do case "$a" in -9) sig=KILL;; -[A-Z]*) sig=${a#-};; esac; pat=$a; done
started() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20; }
pids=$(for p in $(pgrep -f -- "$pat"); do echo "$(started "$p") $p"; done | sort -n | cut -d' ' -f2)
oldest=${pids%%[!0-9]*}
rc=1
for p in ${pids#"$oldest"} $oldest; do
  [ "$p" = "$$" ] && continue
  kill -s "$sig" "$p" 2>/dev/null || continue
  rc=0; n=0
  while kill -0 "$p" 2>/dev/null && [ "$n" -lt 500 ]; do sleep 0.01; n=$((n + 1)); done
done
exit $rc
"""


def test_a_self_kill_is_one_whatever_order_pkill_signals_in(store, tmp_path, monkeypatch):
    """pkill signals its matches in /proc's order, by pid, and once the pids wrap the launching
    shell may come after the step's own processes. ``timeout``, which ran the step with its
    text (the pattern) in its argv, was one: signalled, it relays the signal to its process
    group, the step's pkill in it, which died before it reached the launching shell; the
    chain went on to its server step (a CI flake of test_seed_replay_over_ssh_is_a_self_kill:
    cause None at step 7). Here pkill signals the launching shell last."""
    import os

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pkill").write_text(PKILL_AFTER_A_WRAP)
    (bin_dir / "pkill").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    res = _replay(store, _seed(tmp_path))
    assert (res["cause"], res["step"]) == ("cleanup-self-kill", 1), res["explanation"]
    assert res["log_exists"] is False


def test_self_kill_by_sigkill_at_step_3_when_step_1_is_harmless(store, tmp_path):
    chain = _seed(tmp_path).replace('pkill -f "sglang.launch_server" && sleep 2 && ', "")
    res = _replay(store, chain)
    assert (res["cause"], res["step"]) == ("cleanup-self-kill", 1)
    assert "pkill -9 -f python3" in res["explanation"]
    assert "exit 137, SIGKILL" in res["explanation"]


def test_cleanup_hang_is_recorded_with_what_it_waited_on(store, tmp_path, where):
    log = tmp_path / "hang.log"
    chain = f'sleep 1000 && nohup bash -c "python3 -m sglang.launch_server" > {log} 2>&1 &'
    res = _replay(store, chain, step_deadline=1, host=where)
    assert res["cause"] == "cleanup-hang" and res["host"] == (where or "local")
    assert res["phase"] == "cleanup" and res["step"] == 1
    assert "1 s deadline" in res["explanation"] and "exit 124" in res["explanation"]
    assert "sleep 1000" in res["explanation"]  # from ps, what the step waited on
    assert not log.exists()


def test_missing_log_directory_is_pre_exec(store, tmp_path, where):
    chain = (
        f'sleep 0.1; nohup bash -c "python3 -m sglang.launch_server" > {tmp_path}/nodir/x.log'
        " 2>&1 &"
    )
    res = _replay(store, chain, host=where)
    assert (res["cause"], res["phase"], res["step"]) == ("log-dir-missing", "pre-exec", 2)
    assert "could not open the log" in res["explanation"]
    assert "log-dir-missing" in [f["id"] for f in res["findings"]]
    # the journal lives in a fallback place since the log's directory is missing
    assert not res["journal_path"].startswith(f"{tmp_path}/nodir")


def test_and_after_pkill_skips_the_server(store, tmp_path):
    log = tmp_path / "x.log"
    chain = (
        f'pkill -x nothing_here_x && nohup bash -c "python3 -m sglang.launch_server" > {log} 2>&1 &'
    )
    res = _replay(store, chain)
    assert (res["cause"], res["step"]) == ("and-after-pkill", 1)
    assert "skipped step(s) 2" in res["explanation"] and "no log was written" in res["explanation"]


def test_simulator_failing_in_capture_reports_the_log_failure(store, tmp_path, where):
    log = tmp_path / "sglang_eagle3_cg_2step.log"
    chain = f'nohup bash -c "python3 -m sglang.launch_server --model-path m" > {log} 2>&1 &'
    res = _replay(store, chain, sim={"fail": "capture-oom"}, host=where)
    assert res["status"] == "failed" and res["host"] == (where or "local")
    assert res["cause"] == "capture_failed"
    assert res["phase"] == "capture"
    assert "capture_begin" in res["stages"] and "ready" not in res["stages"]
    assert log.exists()


def test_port_already_in_use(store, tmp_path, where):
    log = tmp_path / "p.log"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        chain = f'nohup bash -c "python3 -m sglang.launch_server --model-path m" > {log} 2>&1 &'
        res = _replay(store, chain, port=port, host=where)
    assert res["cause"] == "port-in-use"
    assert res["status"] != "ready"


def test_healthy_replay_follows_stages_then_stop_ends_the_group(store, tmp_path):
    log = tmp_path / "sglang_eagle3_cg_5dt.log"
    chain = (
        f'sleep 0.1; nohup bash -c "python3 -m sglang.launch_server --model-path m" > {log} 2>&1 &'
    )
    events = []
    res = _replay(store, chain, progress=events.append)
    assert res["status"] == "ready" and res["cause"] is None
    assert res["stages"][-1] == "ready" and "load_begin" in res["stages"]
    assert any(e["event"] == "stage" for e in events)
    pgid = res["pgid"]
    out = launcher.stop(store, "sglang_eagle3_cg_5dt", grace_s=5)
    assert out["outcome"] in ("terminated", "killed") and out["pgid"] == pgid
    assert launcher.wait_stopped(LocalHost(), pgid, timeout=60)
    assert launcher.find_launch(store, "5dt")["status"] == "stopped"


def test_launch_safe_registers_first_and_uses_pid_file(store, tmp_path):
    recipe = _sim_recipe(tmp_path, "sglang_eagle3_cg_2step")
    port = _free_port()
    res = launcher.launch(
        store,
        recipe,
        sim={"speed": SPEED, "port": port, "python": sys.executable},
        deadline=READY_DEADLINE,
    )
    assert res["status"] == "ready" and res["mode"] == "launch"
    assert (tmp_path / "logs").is_dir()  # launch creates the log directory
    pid_file = tmp_path / "logs" / "sglang_eagle3_cg_2step.log.pid"
    assert int(pid_file.read_text()) == res["pgid"]
    statuses = store.table("launches")["status"].to_list()
    assert statuses[0] == "registered" and statuses[-1] == "ready"
    # a second launch of the same name stops the first one by its group
    res2 = launcher.launch(
        store,
        recipe,
        sim={"speed": SPEED, "port": port, "python": sys.executable},
        deadline=READY_DEADLINE,
    )
    assert res2["status"] == "ready" and res2["pgid"] != res["pgid"]
    assert launcher.wait_stopped(LocalHost(), res["pgid"], timeout=60)


def test_stop_refuses_a_reused_pid_s16(store):
    # a record whose start time does not match the live process: nothing is signalled
    host = LocalHost()
    outcome = launcher.kill_group(host, 1 << 22, 12345, 1)
    assert outcome in ("not-running", "pid-reused")


def test_journal_parser_accounts_for_every_line():
    text = (
        '{"v":1,"launch_id":"a","event":"start","step":1,"t":10.0,"deadline_s":1}\n'
        '{"v":1,"launch_id":"a","event":"end","step":1,"t":11.5,"rc":124,"tail":"x"}\n'
        '{"v":1,"launch_id":"a","event":"exit","t":12,"rc":137}\n'
        '{"v":1,"launch_id":"a","event":"end","st'
    )
    df = parse_journal(text)
    assert df["event"].to_list() == ["start", "end", "exit", "unparsed"]
    end = df.row(1, named=True)
    assert end["timed_out"] is True and end["elapsed_s"] == 1.5
    assert df.row(2, named=True)["signal"] == 9


def test_diagnose_journal_from_a_file(store, tmp_path):
    res = _replay(store, _seed(tmp_path))
    d = launcher.diagnose_journal(res["journal_path"])
    assert d["cause"] == "cleanup-self-kill" and d["step"] == 1


def test_cli_launch_sim_and_stop(tmp_path):
    runner = CliRunner()
    port = _free_port()
    res = runner.invoke(
        cli,
        ["launch", "--sim", "--port", str(port),
         "--sim-speed", str(SPEED), "--deadline", "20", "--json", "--",
         "--model-path", "sim://kimi-k2.5", "--speculative-algorithm", "EAGLE3",
         "--speculative-num-steps", "4", "--speculative-eagle-topk", "1",
         "--speculative-num-draft-tokens", "5"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    # no --name: the seed's naming convention, from the flags
    assert data["name"] == "sglang_eagle3_cg_4step_topk1_5dt"
    assert data["status"] == "ready" and data["log_path"].endswith(data["name"] + ".log")
    res = runner.invoke(cli, ["stop", "5dt", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["outcome"] in ("terminated", "killed")


def test_cli_replay_safe_patterns_reports_self_kill(tmp_path):
    res = CliRunner().invoke(
        cli, ["launch", "--shell", _seed(tmp_path), "--sim", "--safe-patterns", "--json"]
    )
    assert res.exit_code == 1, res.output
    assert json.loads(res.output)["cause"] == "cleanup-self-kill"


@pytest.mark.ssh
def test_seed_replay_over_ssh_is_a_self_kill(ssh_config, store, tmp_path):
    recipe = Recipe.from_shell(_seed(tmp_path), host="sshtest")
    res = launcher.relaunch(
        store,
        recipe.name,
        recipe=recipe,
        safe_patterns=True,
        sim={"speed": SPEED, "port": _free_port(), "python": sys.executable},
        deadline=READY_DEADLINE,
    )
    assert res["host"] == "sshtest"
    assert (res["cause"], res["step"]) == ("cleanup-self-kill", 1)
    assert res["log_exists"] is False


# --------------------------------------------------------------------------- H06 / H11

FLAPPER = r"""
import http.server, json, os, sys, time
port, flaps, log = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
seen = {"health": 0, "generate": 0}

def save():
    with open(log + ".tmp", "w") as f:
        f.write(json.dumps(seen))
    os.replace(log + ".tmp", log)

class H(http.server.BaseHTTPRequestHandler):
    def _answer(self, code):
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        seen["health"] += 1
        # alternate 200/503 for the first `flaps` probes (flaps < 0: forever), then 200
        n = seen["health"]
        flapping = flaps < 0 or n <= flaps
        save()  # before answering: the client reads it once answered
        self._answer(200 if not flapping or n % 2 else 503)

    def do_POST(self):
        seen["generate"] += 1
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        save()
        self._answer(200)

    def log_message(self, *a):
        pass

http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def _flapper(tmp_path, name, flaps):
    script = tmp_path / "flapper.py"
    script.write_text(FLAPPER)
    port, seen = _free_port(), tmp_path / f"{name}.seen.json"
    recipe = Recipe(
        name=name,
        server=[sys.executable, str(script), str(port), str(flaps), str(seen)],
        log_path=str(tmp_path / "logs" / f"{name}.log"),
        health_url=f"http://127.0.0.1:{port}/health",
    )
    return recipe, seen


def test_H06_flapping_health_is_ready_only_after_three_200s_in_a_row(store, tmp_path):
    recipe, seen = _flapper(tmp_path, "flap_then_steady", flaps=7)
    res = launcher.launch(store, recipe, deadline=READY_DEADLINE)
    try:
        assert res["status"] == "ready", res
        counts = json.loads(seen.read_text())
        # probes 1-7 alternate 200/503 (200 at odd n): never three in a row; 7, 8, 9 are
        # the first streak, and no probe follows the ready one
        assert counts["health"] == 9
        assert counts["generate"] == 1  # H11: one 1-token /generate confirmed it
    finally:
        launcher.stop(store, recipe.name, grace_s=3)


def test_H06_health_flapping_forever_is_never_ready(store, tmp_path):
    recipe, seen = _flapper(tmp_path, "flap_forever", flaps=-1)
    res = launcher.launch(store, recipe, deadline=6)
    try:
        assert res["status"] == "timeout" and res["cause"] == "health-timeout", res
        counts = json.loads(seen.read_text())
        assert counts["health"] >= 4 and counts["generate"] == 0
    finally:
        launcher.stop(store, recipe.name, grace_s=3)


def test_H11_health_200_while_the_scheduler_hangs_is_not_ready(store, tmp_path, monkeypatch):
    """SGLang 0.4.6's /health answers 200 without asking the scheduler; a hung scheduler then
    looks healthy. The 1-token /generate that confirms readiness does not answer."""
    monkeypatch.setattr(launcher.readiness, "GENERATE_PROBE_TIMEOUT_S", 1.5)
    recipe = Recipe(
        name="hung_scheduler",
        server=["python3", "-m", "sglang.launch_server", "--model-path", "m",
                "--sim-style", "0.4.6", "--sim-hang", "runtime", "--watchdog-timeout", "100000"],
        log_path=str(tmp_path / "logs" / "hung_scheduler.log"),
        health_url=None,
    )  # fmt: skip
    sim = {"speed": SPEED, "port": _free_port(), "python": sys.executable}
    res = launcher.launch(store, recipe, sim=sim, deadline=12)  # room for a loaded machine
    try:
        assert res["status"] == "timeout", res
        assert res["cause"] == "health-unverified"
        assert "1-token" in res["explanation"] and "did not answer" in res["explanation"]
        assert res["health"] == 200  # /health itself said yes all along
        assert "ready_to_roll" in res["stages"] or res["stages"]  # the server had started
    finally:
        launcher.stop(store, recipe.name, grace_s=3)


def test_H11_health_from_another_process_is_not_our_server(tmp_path):
    """The launched group is gone but /health answers 200: someone else serves the port."""
    recipe, seen = _flapper(tmp_path, "impostor", flaps=0)
    port = int(recipe.server[2])
    other = subprocess.Popen(recipe.server, start_new_session=True)
    gone = subprocess.Popen(["sleep", "0"], start_new_session=True)
    gone.wait()  # a process group that existed and is gone now
    try:
        _wait_port(port)
        problem, _ = launcher.verify_ready(LocalHost(), recipe.health_url, gone.pid, set())
        assert problem is not None and f"process group {gone.pid} is gone" in problem
        assert not seen.exists() or json.loads(seen.read_text())["generate"] == 0
        # the same server with the group alive: confirmed by one 1-token /generate
        problem, note = launcher.verify_ready(LocalHost(), recipe.health_url, other.pid, set())
        assert problem is None and note is None
        assert json.loads(seen.read_text())["generate"] == 1
    finally:
        other.kill()
        other.wait()


def _wait_port(port: int, timeout: float = 20.0) -> None:
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"port {port} never opened")


def test_S10_launch_refused_below_min_free_mb_nothing_runs(store, tmp_path):
    recipe = _sim_recipe(tmp_path, "no_room", min_free_mb=1e12)  # more than any machine has
    sim = {"speed": SPEED, "port": _free_port(), "python": sys.executable}
    with pytest.raises(launcher.LaunchFailed) as exc:
        launcher.launch(store, recipe, sim=sim, deadline=5)
    assert "MiB free, less than the" in str(exc.value) and "min_free_mb" in exc.value.hint
    assert launcher.launches_frame(store).is_empty()  # never registered, nothing started
    assert not (tmp_path / "logs" / "no_room.log").exists()
    # a journaled replay of the same chain is refused too
    with pytest.raises(launcher.LaunchFailed):
        launcher.relaunch(store, "no_room", recipe=recipe, sim=sim, deadline=5)
    assert launcher.launches_frame(store).is_empty()


def test_S07_recheck_finds_the_group_from_the_pid_file_then_sees_it_gone(store, tmp_path):
    """A launch left `unknown` (the connection dropped before the group was recorded) is
    re-checked from the pid file the supervisor wrote on the host; never assumed failed."""
    recipe = _sim_recipe(tmp_path, "lost_sight")
    sim = {"speed": SPEED, "port": _free_port(), "python": sys.executable}
    # the group's end is waited for generously too (a hang guard)
    res = launcher.launch(store, recipe, sim=sim, deadline=READY_DEADLINE)
    assert res["status"] == "ready"
    row = launcher.find_launch(store, "lost_sight")
    launcher.record(store, {**row, "status": "unknown", "pgid": None, "cause": "connection-lost"})
    seen = launcher.recheck(store, "lost_sight")
    assert (seen["previous"], seen["status"]) == ("unknown", "ready"), seen
    assert seen["pgid"] == res["pgid"] and seen["pgid_from"] == "pid file"
    assert launcher.find_launch(store, "lost_sight")["status"] == "ready"
    # the CLI says the same
    args = ["--store", str(tmp_path / "store"), "launch", "lost_sight", "--check", "--json"]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["status"] == "ready"
    launcher.stop(store, "lost_sight", grace_s=3)
    assert launcher.wait_stopped(LocalHost(), res["pgid"], timeout=60)
    launcher.record(store, {**row, "status": "unknown", "cause": "connection-lost"})
    gone = launcher.recheck(store, "lost_sight")
    assert gone["status"] == "exited" and "gone" in gone["cause"]


def test_S07_connection_lost_during_the_health_wait_is_unknown_then_rechecked(
    store, tmp_path, monkeypatch
):
    """The host's sshd dies while forensics waits for /health: the launch is recorded as
    `unknown` (never `failed`) with a one-line error; once sshd is back, `recheck` finds the
    server that ran on by itself (own session, nohup) ready."""
    import os
    import signal as sig

    from forensics import hosts
    from forensics.errors import HostUnreachable, RemoteError
    from forensics.localsshd import find_sshd, local_sshd

    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    srv = local_sshd(tmp_path / "sshd")
    (tmp_path / "forensics.toml").write_text(srv.toml("flaky"))
    hosts.close_all()
    restarted = None
    recipe = _sim_recipe(tmp_path, "lost_link", host="flaky")
    sim = {"speed": 20.0, "port": _free_port(), "python": sys.executable}

    def cut(event):
        if event.get("event") == "server":  # the server runs; the health wait begins
            master = srv.proc.pid
            for pid in connection_processes(master):
                os.kill(pid, sig.SIGKILL)
            srv.stop()  # and no reconnect is possible

    try:
        with pytest.raises((HostUnreachable, RemoteError)) as exc:
            launcher.launch(store, recipe, sim=sim, deadline=60, progress=cut)
        msg = str(exc.value)
        assert "lost flaky during the launch, so its outcome is unknown" in msg
        assert "launch --check lost_link" in msg and "\n" not in msg
        row = launcher.find_launch(store, "lost_link")
        assert (row["status"], row["cause"]) == ("unknown", "connection-lost")
        # sshd comes back on the same port; the server never depended on the connection
        restarted = subprocess.Popen(
            [find_sshd(), "-D", "-e", "-f", str(tmp_path / "sshd" / "sshd_config")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_port(srv.port)
        hosts.close_all()
        seen = launcher.recheck(store, "lost_link")
        assert seen["previous"] == "unknown" and seen["status"] in ("running", "ready"), seen
        assert seen["pgid_from"] in ("record", "pid file")
        for _ in range(120):  # still starting (running) until it is ready: check again
            if seen["status"] == "ready":
                break
            assert seen["status"] == "running" and seen["cause"], seen
            time.sleep(0.5)
            seen = launcher.recheck(store, "lost_link")
        assert seen["status"] == "ready" and seen["health"] == 200, seen
        assert launcher.find_launch(store, "lost_link")["status"] == "ready"
    finally:
        if restarted is not None:
            with contextlib.suppress(Exception):
                launcher.stop(store, "lost_link", grace_s=3)
            hosts.close_all()
            restarted.terminate()
            restarted.wait(timeout=10)
        srv.stop()
        # whatever failed above: the simulator this test started (its group, from the pid
        # file the supervisor wrote; "remote" is this machine) must not outlive the test
        pid_file = tmp_path / "logs" / "lost_link.log.pid"
        if pid_file.exists() and pid_file.read_text().strip().isdigit():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(pid_file.read_text()), sig.SIGKILL)


def test_a_relaunch_reads_only_its_own_lines_of_an_appended_log(store, tmp_path):
    """`forensics launch` appends to the log (`>>LOG`): the stages and the failure of an
    earlier launch of the same name in that file are not this launch's."""
    recipe = _sim_recipe(tmp_path, "twice")
    sim = {"speed": SPEED, "port": _free_port(), "python": sys.executable}
    first = launcher.launch(store, recipe, sim=sim, deadline=READY_DEADLINE)
    assert first["status"] == "ready" and "ready" in first["stages"]
    launcher.stop(store, "twice", grace_s=3)
    second = launcher.launch(
        store, recipe, sim={**sim, "fail": "load-oom"}, deadline=READY_DEADLINE
    )
    assert second["status"] == "failed", second
    assert "ready" not in second["stages"] and "load_begin" in second["stages"]
    assert second["phase"] == "load"
    assert "fired up and ready" not in second["log_tail"]  # the first launch's lines
    log = tmp_path / "logs" / "twice.log"
    assert log.read_text().count("fired up and ready") == 1  # both are in the file


def test_a_replay_that_truncates_the_log_is_followed_from_its_start(store, tmp_path):
    log = tmp_path / "sglang_eagle3_cg_5dt.log"
    log.write_text("x" * 200_000 + "\n")  # an old, longer log: the chain's `>` truncates it
    chain = f'nohup bash -c "python3 -m sglang.launch_server --model-path m" > {log} 2>&1 &'
    res = _replay(store, chain)
    assert res["status"] == "ready", res
    assert res["stages"][-1] == "ready" and "load_begin" in res["stages"]


def test_cli_launch_log_on_a_named_host(ssh_config, tmp_path):
    """`launch --log sshtest:/path` puts the log on that host (it was taken as a local path
    named `sshtest:/...`); an unknown host name is exit 2."""
    log = tmp_path / "remote" / "sglang_eagle3_cg_5dt.log"
    base = ["launch", "--sim", "--port", str(_free_port()), "--sim-speed", str(SPEED),
            "--deadline", "20", "--json"]  # fmt: skip
    flags = ["--", "--model-path", "sim://m"]
    runner = CliRunner()
    res = runner.invoke(cli, [*base, "--name", "on_host", "--log", f"sshtest:{log}", *flags])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["host"] == "sshtest" and data["log_path"] == str(log)
    assert data["status"] == "ready" and log.exists()
    res = runner.invoke(cli, ["stop", "on_host", "--json"])
    assert json.loads(res.output)["outcome"] in ("terminated", "killed")
    res = runner.invoke(cli, [*base, "--name", "nohost", "--log", "gpu9:/x/y.log", *flags])
    assert res.exit_code == 2 and "gpu9" in res.output


def test_launch_causes_are_a_table_first_row_that_applies_wins():
    """Issue 12: the old launcher._run's five-branch cause ladder is the LAUNCH_CAUSES table."""
    import polars as pl

    from forensics.launcher import LAUNCH_CAUSES, CauseContext, launch_cause

    assert [r.id for r in LAUNCH_CAUSES] == [
        "port-in-use",
        "signature",
        "health-unverified",
        "health-timeout",
        "server-exited",
    ]
    frame = pl.DataFrame(schema={"event": pl.String, "kind": pl.String, "rc": pl.Int64})

    def ctx(**kw):
        base = dict(status="timeout", sig=None, port_finding=None, unverified=None,
                    stages=["load_begin"], health_deadline=5.0, frame=frame)  # fmt: skip
        return CauseContext(**{**base, **kw})

    assert launch_cause(ctx())["cause"] == "health-timeout"
    assert launch_cause(ctx(unverified="scheduler gone"))["cause"] == "health-unverified"
    sig = {"id": "cuda_oom", "phase": "load", "explanation": "x", "line": "OOM", "fix": "less"}
    got = launch_cause(ctx(sig=sig, unverified="scheduler gone"))
    assert (got["cause"], got["phase"], got["next_steps"]) == ("cuda_oom", "load", ["less"])
    assert launch_cause(ctx(status="failed"))["cause"] == "server-exited"
    assert launch_cause(ctx(status="ready")) == {}


def _journal(chain: str, *events: dict):
    from forensics_parsers.journal import parse_journal

    begin = {"event": "begin", "t": 1.0, "pid": 10, "chain": chain, "shell": "bash",
             "mode": "replay", "server_step": 2}  # fmt: skip
    lines = [{"v": 1, "launch_id": "L1", **e} for e in (begin, *events)]
    return parse_journal("\n".join(json.dumps(x) for x in lines))


def test_journal_causes_are_rows_with_their_remedies():
    """Issue 12: each JOURNAL_CAUSES row finds, explains and says what to try; the two rows no
    real launch above reaches (killed from outside, a failed step before the server)."""
    from forensics.launcher import JOURNAL_CAUSES

    ids = [r.id for r in JOURNAL_CAUSES]
    assert ids[0] == "cleanup-self-kill" and ids[-1] == "step-failed" and len(set(ids)) == 6
    assert all(r.remedies for r in JOURNAL_CAUSES)
    srv = "nohup python3 -m sglang.launch_server --port 1 > /tmp/x.log 2>&1 &"
    killed = _journal(
        f"sleep 100; {srv}",
        {"event": "start", "step": 1, "t": 1.1, "kind": "wait", "orig": "sleep 100"},
        {"event": "exit", "t": 5.0, "rc": 137},
    )
    d = launcher.diagnose_journal(killed)
    assert (d["cause"], d["phase"], d["step"]) == ("launcher-killed", "cleanup", 1)
    assert "SIGKILL" in d["explanation"] and "`sleep 100`" in d["explanation"]
    assert d["next_steps"] == list(JOURNAL_CAUSES[4].remedies)
    failed = _journal(
        f"false && {srv}",
        {"event": "start", "step": 1, "t": 1.1, "kind": "other", "orig": "false"},
        {"event": "end", "step": 1, "t": 1.2, "rc": 1, "tail": "boom"},
        {"event": "exit", "t": 1.3, "rc": 1},
    )
    d = launcher.diagnose_journal(failed)
    assert (d["cause"], d["step"]) == ("step-failed", 1)
    assert d["explanation"].endswith("never reached the server step 2: boom")
