"""`make demo`: the seed session replayed end to end on the simulated SGLang server.

1. launches the baseline and the four EAGLE-3 configurations of the seed table with
   `forensics launch`, benchmarks each with `forensics bench`, stops it;
2. launches the num_steps=2 configuration with the seed's own shell chain (its kill patterns
   replaced by a marker unique to this demo), which kills itself before writing its log;
3. ingests every log (over SSH to 127.0.0.1 when an sshd is available), prints the runs table,
   diagnoses the 2step crash by relaunching it under a journal, asks the advisor, and writes
   the trend plot and the HTML report;
4. runs the same loop as one command: `forensics sweep fixtures/sweeps/sim-mix.toml` (one config
   of each ending: ok, capture OOM, load hang, impossible, self-kill, death mid-benchmark; the
   fast mode of the tests prints its plan only: tests/test_sweep_sim.py runs it);
5. stops everything it started.

Every step runs the real CLI (`python -m forensics ...`) and prints the command first.
Everything lives under ./demo-out (FORENSICS_HOME=demo-out/store).
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from forensics.output import replace_file
from forensics.terminal import console as make_console

OUT = Path(os.environ.get("FORENSICS_DEMO_OUT", "demo-out"))
# FORENSICS_DEMO_FAST=1: shorter benchmarks (the test suite runs the demo this way)
FAST = os.environ.get("FORENSICS_DEMO_FAST", "") not in ("", "0")
SEED_CHAIN = (
    'pkill -f "sglang.launch_server" && sleep 2 && pkill -9 -f python3; sleep 3 && '
    "fuser -k /dev/nvidia* 2>/dev/null; sleep 3 && "
    'nohup bash -c "python3 -m sglang.launch_server --model-path sim://kimi-k2.5 '
    "--speculative-algorithm EAGLE3 --speculative-draft-model-path /data/eagle3/output_10k_sglang/4 "
    "--speculative-num-steps 2 --speculative-eagle-topk 4 --speculative-num-draft-tokens 5 "
    '--port {port}" > {log} 2>&1 &'
)
BENCH_ARGS = (
    ["--num-prompts", "2", "--max-new-tokens", "48", "--warmup", "1"]
    if FAST
    else ["--num-prompts", "4", "--max-new-tokens", "256", "--warmup", "1"]
)

console = make_console(highlight=False, width=max(100, shutil.get_terminal_size((120, 40)).columns))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Demo:
    def __init__(self, out: Path):
        self.out = out.resolve()
        self.logs = self.out / "eagle3"
        self.env = {
            **os.environ,
            "FORENSICS_HOME": str(self.out / "store"),
            "PYTHONUNBUFFERED": "1",
            "COLUMNS": "160",
        }
        self.sshd = None
        self.host: str | None = None  # config name of the SSH host, when there is one
        self.started: list[str] = []
        self.t0 = time.monotonic()

    def remote(self, path: Path | str) -> str:
        """How the engineer names a path on the GPU host: `gpu8:/data/...` (local without SSH)."""
        return f"{self.host}:{path}" if self.host else str(path)

    # -- output --------------------------------------------------------------------------
    def step(self, title: str, what: str) -> None:
        console.print()
        console.rule(title, style="bold")
        console.print(what)

    def cli(self, *args: str, show: bool = True, ok: tuple[int, ...] = (0,)) -> str:
        """Run `forensics ARGS` in the demo folder; print the command and its output."""
        shown = "forensics " + " ".join(shlex.quote(a) for a in args)
        console.print(f"$ {shown}", style="cyan")
        p = subprocess.run(
            [sys.executable, "-m", "forensics", *args],
            cwd=self.out,
            env=self.env,
            capture_output=True,
            text=True,
        )
        text = (p.stdout + p.stderr).rstrip()
        if show and text:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
        if p.returncode not in ok:
            console.print(f"exit {p.returncode}", style="red")
            raise SystemExit(f"demo: `{shown}` failed with exit {p.returncode}")
        return p.stdout

    # -- the story -------------------------------------------------------------------------
    def setup(self) -> None:
        if self.out.exists():
            shutil.rmtree(self.out)
        self.logs.mkdir(parents=True)
        config = ""
        try:
            from forensics.localsshd import local_sshd

            self.sshd = local_sshd(self.out / "ssh")
            self.host = "gpu8"
            config = self.sshd.toml(self.host)
            where = f"an OpenSSH server on 127.0.0.1:{self.sshd.port} plays the GPU host `gpu8`"
        except Exception as exc:  # noqa: BLE001 - the demo runs without SSH too
            where = f"no SSH: {exc} — the remote steps run locally instead"
        replace_file(self.out / "forensics.toml", config, mode=0o644)
        console.print(
            "forensics demo: the seed session (docs/guide.md) replayed on the built-in "
            f"simulated SGLang server. Everything lives under {self.out}; {where}."
        )

    def launch_and_bench(self) -> None:
        from forensics.sim.perf import SEED_CONFIGS

        self.step(
            "1. Five launches, each benchmarked",
            "The baseline and the four EAGLE-3 configurations of the seed table, launched the safe "
            "way (own process group, log named after the config, health wait), measured single "
            "stream, then stopped.",
        )
        for cfg in SEED_CONFIGS:
            if cfg.target_tok_s is None:
                continue
            port = free_port()
            log = self.logs / f"{cfg.name}.log"
            self.cli(
                "launch", "--sim", "--name", cfg.name, "--log", str(log), "--port", str(port),
                "--deadline", "120", "--", "--model-path", "sim://kimi-k2.5", *cfg.flags,
                "--sim-seed", "7",
                show=False,
            )  # fmt: skip
            self.started.append(cfg.name)
            console.print(f"  {cfg.name}: ready on port {port} ({cfg.description})")
            self.cli("ingest", self.remote(log), show=False)
            out = self.cli(
                "bench", f"http://127.0.0.1:{port}", "--run", cfg.name, *BENCH_ARGS, show=False
            )
            line = next((ln for ln in out.splitlines() if "tok/s" in ln), "").strip()
            console.print(f"  {cfg.name}: {line or 'benchmarked'}")
            self.cli("stop", cfg.name, "--grace", "5", show=False)
            self.started.remove(cfg.name)
        self.cli("baseline", "sglang_baseline")

    def crash_2step(self) -> str:
        self.step(
            "2. The num_steps=2 launch, with the seed's own shell chain",
            "Sent as one `bash -c` over SSH, exactly as in the seed session. Its kill patterns "
            "are replaced by a marker unique to this demo, so it can only kill what it started.",
        )
        token = "fxdemo" + secrets.token_hex(4)
        log = self.logs / "sglang_eagle3_cg_2step.log"
        port = free_port()
        chain = SEED_CHAIN.format(port=port, log=log)
        safe = (
            chain.replace('"sglang.launch_server"', f'"{token}"')
            .replace("pkill -9 -f python3", f"pkill -9 -f {token}")
            .replace("/dev/nvidia*", str(self.out / f"{token}.nvidia"))
            .replace("python3 -m sglang.launch_server", f"{sys.executable} -m forensics.sim")
            .replace(f"--port {port}", f"--port {port} --sim-tag {token}")
        )
        console.print(f"$ ssh {self.host or 'localhost'} '{safe}'", style="cyan")
        if self.host:
            from forensics.hosts import get_host

            os.environ["FORENSICS_HOME"] = self.env["FORENSICS_HOME"]
            cwd = os.getcwd()
            os.chdir(self.out)
            try:
                res = get_host(self.host).run(safe, timeout=60, allow_timeout=True)
            finally:
                os.chdir(cwd)
            rc = res.rc
        else:
            rc = subprocess.run(["bash", "-c", safe], timeout=60).returncode
            rc = 128 - rc if rc < 0 else rc
        if rc is None:
            console.print(
                "  the remote shell was killed before it could exit: ssh got no exit status "
                "(the ssh client reports 255)"
            )
        else:
            console.print(f"  the chain exited {rc}")
        time.sleep(1)
        console.print(f"$ tail -50 {log}", style="cyan")
        if log.exists():
            console.print(log.read_text()[-2000:])
        else:
            console.print(f"tail: cannot open '{log}' for reading: No such file or directory")
        # the recipe, as the engineer would write it into forensics.toml to relaunch it
        toml = self.out / "forensics.toml"
        replace_file(
            toml,
            toml.read_text()
            + "\n[recipes.sglang_eagle3_cg_2step]\n"
            + f"shell = '''{chain}'''\n"
            + (f'host = "{self.host}"\n' if self.host else ""),
            mode=0o644,
        )
        return chain

    def analyse(self, chain: str) -> None:
        self.step(
            "3. Every log in one table",
            "All logs ingested from the host (globs expanded remotely over SFTP); one row per run.",
        )
        self.cli("ingest", self.remote(f"{self.logs}/*.log"))
        self.cli("runs")

        self.step(
            "4. Why did 2step die? The lint, then a journaled relaunch",
            "No log exists, so the chain is checked and then relaunched step by step under a "
            "journal (safe patterns, simulator in place of SGLang).",
        )
        self.cli("lint", "--shell", chain, ok=(0, 1, 4))
        self.cli("diagnose", "2step", ok=(0, 1, 3))
        self.cli("diagnose", "2step", "--relaunch", "--safe-patterns", "--sim", ok=(0, 1))

        self.step(
            "5. Is tuning still worth it?",
            "The advisor estimates each configuration family's round cost and the accept length "
            "it needs to beat the baseline.",
        )
        self.cli("advise")
        trend = self.out / "trend.png"
        report = self.out / "report.html"
        self.cli("plot", "trend", "--out", str(trend))
        self.cli("plot", "accept", "--out", str(self.out / "accept.png"), show=False)
        self.cli("report", "--out", str(report))
        console.print(f"trend plot:  {trend}")
        console.print(f"accept plot: {self.out / 'accept.png'}")
        console.print(f"report:      {report}  (open it in a browser)")
        console.print(f"store:       {self.out / 'store'}  (FORENSICS_HOME)")

    def sweep(self) -> None:
        self.step(
            "6. The same loop, as one command",
            "`forensics sweep` plans a grid (skipping what SGLang refuses), then launches, "
            "benchmarks, stops and ingests each config; a failing config is diagnosed and the "
            "sweep goes on. This sweep file meets one of each ending.",
        )
        mix = Path(__file__).resolve().parent.parent / "fixtures" / "sweeps" / "sim-mix.toml"
        if FAST:
            self.cli("sweep", str(mix), "--dry-run")
        else:
            self.cli("sweep", str(mix))
        console.print()
        console.rule("done", style="bold")
        console.print(f"finished in {time.monotonic() - self.t0:.0f} s")

    def cleanup(self) -> None:
        for name in list(self.started):
            subprocess.run(
                [sys.executable, "-m", "forensics", "stop", name, "--grace", "3"],
                cwd=self.out,
                env=self.env,
                capture_output=True,
            )
        if self.sshd is not None:
            self.sshd.stop()


def main() -> int:
    demo = Demo(OUT)
    try:
        demo.setup()
        demo.launch_and_bench()
        chain = demo.crash_2step()
        demo.analyse(chain)
        demo.sweep()
    except KeyboardInterrupt:
        console.print("interrupted")
        return 130
    finally:
        demo.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
