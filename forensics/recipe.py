"""Launch recipes: cleanup steps, the server command, the log, the health URL, env, deadlines.

A recipe comes from the config (``[recipes.NAME]`` in ``forensics.toml`` or
``$FORENSICS_HOME/config.toml``) or from the exact shell chain a user typed
(``Recipe.from_shell``). A recipe imported from a chain keeps the chain text verbatim
(``shell``), so a replay runs the same steps with the same operators; the parsed parts
(server argv, log path, health URL, name) are derived from it.

Config form (either ``shell`` or ``server``)::

    [recipes.sglang_eagle3_cg_2step]
    host = "gpu8"                      # a [hosts.NAME]; omitted = this machine
    shell = '''pkill -f "sglang.launch_server" && sleep 2 && ... > /data/eagle3/x.log 2>&1 &'''
    # or the safe form:
    cleanup = ["sleep 1"]              # extra steps run before the server (optional)
    server = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/k2"]
    log = "/data/eagle3/sglang_eagle3_cg_2step.log"
    health_url = "http://127.0.0.1:30000/health"   # default: from --host/--port of the server
    env = { CUDA_VISIBLE_DEVICES = "0,1,2,3,4,5,6,7" }
    step_deadline_s = 30               # each cleanup step
    health_deadline_s = 900            # server start -> /health answers 200
    min_free_mb = 1024                 # free space needed beside the log and in $TMPDIR (0: off)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shlex
from pathlib import PurePosixPath
from typing import Any

from forensics.errors import ConfigError, UsageError
from forensics_parsers.shell import Chain, Command, Step, parse_chain, shell_script, unwrap

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")  # \Z: "$" would let "name\n" in
DEFAULT_PORT = 30000
DEFAULT_STEP_DEADLINE_S = 30.0
DEFAULT_HEALTH_DEADLINE_S = 900.0
DEFAULT_MIN_FREE_MB = 1024.0  # S10: the log's filesystem and $TMPDIR need this much free

# What a server command looks like (first match wins); the step that runs it is the server step.
SERVER_PATTERNS = (
    ("sglang", re.compile(r"\bsglang[._]launch_server\b|-m\s+sglang\b")),
    ("forensics-sim", re.compile(r"-m\s+forensics\.sim\b")),
    ("vllm", re.compile(r"\bvllm\s+serve\b|vllm\.entrypoints")),
)

# Step kinds by the program a step runs (after nohup/setsid/env/timeout wrappers).
STEP_KINDS = (
    ("cleanup", {"pkill", "pgrep", "killall", "kill", "fuser", "killall_sglang.sh"}),
    ("wait", {"sleep", "wait"}),
)

RECIPE_KEYS = {
    "host",
    "shell",
    "cleanup",
    "server",
    "log",
    "health_url",
    "env",
    "step_deadline_s",
    "health_deadline_s",
    "min_free_mb",
    "shell_program",
}


@dataclasses.dataclass
class Recipe:
    name: str
    server: list[str]  # the server argv (what finally runs, after nohup/bash -c)
    log_path: str | None
    health_url: str | None
    shell: str | None = None  # the exact chain, when imported from one
    cleanup: list[str] = dataclasses.field(default_factory=list)  # config form
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    host: str | None = None
    step_deadline_s: float = DEFAULT_STEP_DEADLINE_S
    health_deadline_s: float = DEFAULT_HEALTH_DEADLINE_S
    min_free_mb: float = DEFAULT_MIN_FREE_MB
    shell_program: str = "bash"  # the login shell that runs the chain (bash -c '<chain>')
    source: str = "cli"  # cli | config:<path> | store

    # -- construction ------------------------------------------------------------------

    @classmethod
    def from_shell(cls, text: str, *, name: str | None = None, host: str | None = None) -> Recipe:
        """Import the exact chain a user typed. Raises UsageError when it has no steps."""
        chain = parse_chain(text)
        if not chain.steps:
            raise UsageError("the shell chain is empty", hint="pass the chain you ran")
        step = server_step(chain)
        argv = server_argv(step) if step else []
        log = step_log_path(step) if step else None
        return cls(
            name=valid_name(name) if name else name_for(log, argv),
            server=argv,
            log_path=log,
            health_url=health_url_for(argv),
            shell=text,
            env=dict(step.command.assignments) if step and step.command else {},
            host=host,
        )

    @classmethod
    def from_config(cls, name: str, table: dict[str, Any], *, source: str = "config") -> Recipe:
        where = f"{source}: recipes.{name}"
        if not isinstance(table, dict):
            raise ConfigError(f"{where} must be a table", hint=f"write [recipes.{name}]")
        try:
            valid_name(name)
        except UsageError as exc:
            raise ConfigError(f"{where}: {exc.message}", hint=exc.hint) from None
        unknown = sorted(set(table) - RECIPE_KEYS)
        if unknown:
            raise ConfigError(
                f"{where}.{unknown[0]}: unknown key",
                hint=f"known keys: {', '.join(sorted(RECIPE_KEYS))}",
            )
        for key in ("shell", "host", "log", "health_url", "shell_program"):
            if key in table and not isinstance(table[key], str):
                raise ConfigError(
                    f"{where}.{key}: must be a string, not {type(table[key]).__name__}",
                    hint="quote the value",
                )
        for key in ("server", "cleanup"):
            value = table.get(key)
            if value is None or isinstance(value, str):
                continue
            if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
                raise ConfigError(
                    f"{where}.{key}: must be a string or a list of strings",
                    hint=f"{key} = ['python3', '-m', 'sglang.launch_server', ...]",
                )
        if "shell" in table:
            r = cls.from_shell(table["shell"], name=name, host=table.get("host"))
        elif "server" in table:
            server = table["server"]
            try:
                argv = shlex.split(server) if isinstance(server, str) else list(server)
            except ValueError as exc:  # an unbalanced quote
                raise ConfigError(
                    f"{where}.server: cannot split into words ({exc})",
                    hint="balance the quotes, or write the server as a list of strings",
                ) from None
            if not argv:
                raise ConfigError(f"{where}.server: empty", hint="give the server argv")
            r = cls(
                name=valid_name(name),
                server=argv,
                log_path=table.get("log"),
                health_url=health_url_for(argv),
                cleanup=[table["cleanup"]]
                if isinstance(table.get("cleanup"), str)
                else list(table.get("cleanup", [])),
                host=table.get("host"),
            )
        else:
            raise ConfigError(f"{where}: needs `shell` or `server`", hint="see docs/launch.md")
        if "log" in table:
            r.log_path = str(table["log"])
        if "health_url" in table:
            r.health_url = str(table["health_url"])
        if "env" in table:
            if not isinstance(table["env"], dict):
                raise ConfigError(f"{where}.env must be a table", hint="env = { K = 'v' }")
            r.env.update({str(k): str(v) for k, v in table["env"].items()})
        for key in ("step_deadline_s", "health_deadline_s"):
            if key in table:
                value = table[key]
                if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                    raise ConfigError(f"{where}.{key}: must be a positive number", hint="e.g. 30")
                setattr(r, key, float(value))
        if "min_free_mb" in table:
            value = table["min_free_mb"]
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ConfigError(
                    f"{where}.min_free_mb: must be a number >= 0", hint="e.g. 1024; 0 turns it off"
                )
            r.min_free_mb = float(value)
        if "shell_program" in table:
            r.shell_program = str(table["shell_program"])
        r.source = source
        return r

    @classmethod
    def from_json(cls, text: str) -> Recipe:
        data = json.loads(text)
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in fields})

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), ensure_ascii=False, sort_keys=True)

    # -- derived -----------------------------------------------------------------------

    def chain_text(self) -> str:
        """The chain that runs this recipe: the user's own, or the safe form of a config one."""
        if self.shell is not None:
            return self.shell
        return ";\n".join([*self.cleanup, safe_server_text(self)]) + " &"

    def chain(self) -> Chain:
        return parse_chain(self.chain_text())

    @property
    def port(self) -> int | None:
        m = re.match(r"^https?://[^/:]+(?::(\d+))?", self.health_url or "")
        if not m:
            return None
        return int(m.group(1)) if m.group(1) else 80

    def replace(self, **changes: Any) -> Recipe:
        return dataclasses.replace(self, **changes)


# --------------------------------------------------------------------------- derivation


def step_kind(step: Step, server: Step | None = None) -> str:
    if server is not None and step.index == server.index:
        return "server"
    cmd = step.command
    if cmd is None:
        return "other"
    inner, _ = cmd.unwrapped()
    prog = inner[0].rsplit("/", 1)[-1] if inner else ""
    for kind, programs in STEP_KINDS:
        if prog in programs:
            return kind
    return "other"


def _server_match(step: Step) -> bool:
    texts = [step.text]
    if step.command is not None:
        script = shell_script(step.command.argv)
        if script:
            texts.append(script)
    return any(p.search(t) for _, p in SERVER_PATTERNS for t in texts)


def server_step(chain: Chain) -> Step | None:
    """The step that starts the server: a known server command, else the last background
    step with its output redirected, else None."""
    candidates = [s for s in chain.steps if step_kind(s) not in ("cleanup", "wait")]
    for step in candidates:
        if _server_match(step):
            return step
    for step in reversed(candidates):
        if step.background and step.command and step.command.stdout_target():
            return step
    return None


def server_argv(step: Step) -> list[str]:
    """The argv that finally runs in the server step (inside nohup/setsid/bash -c)."""
    cmd = step.command
    if cmd is None:
        return []
    script = shell_script(cmd.argv)
    if script is not None:
        inner = parse_chain(script)
        for s in inner.steps:
            if _server_match(s) and s.command:
                return unwrap(s.command.argv)[0]
        return unwrap(inner.steps[-1].command.argv)[0] if inner.steps else []
    return unwrap(cmd.argv)[0]


def step_log_path(step: Step) -> str | None:
    """Where the server step sends stdout (the log), looking inside ``bash -c`` too."""
    cmd = step.command
    if cmd is None:
        return None
    target = cmd.stdout_target()
    if target:
        return target
    script = shell_script(cmd.argv)
    if script:
        for s in parse_chain(script).steps:
            if s.command and s.command.stdout_target():
                return s.command.stdout_target()
    return None


def _flag(argv: list[str], name: str) -> str | None:
    for k, a in enumerate(argv):
        if a == name and k + 1 < len(argv):
            return argv[k + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def health_url_for(argv: list[str]) -> str | None:
    if not argv:
        return None
    port = _flag(argv, "--port") or str(DEFAULT_PORT)
    host = _flag(argv, "--host") or "127.0.0.1"
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"http://{host}:{port}/health"


def valid_name(name: str) -> str:
    """A run name usable in paths (bad-inputs §3.1 rule 2, §3.4); raises UsageError."""
    if not NAME_RE.match(name or ""):
        raise UsageError(
            f"{name!r} is not a valid launch name",
            hint="use 1-64 letters, digits, '.', '_', '-', not starting with '.' or '-'",
        )
    return name


def slug(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._-")[:56] or "launch"
    if s != text:
        s = f"{s}-{hashlib.sha1(text.encode()).hexdigest()[:6]}"
    return s


def name_for(log_path: str | None, argv: list[str]) -> str:
    """``/data/eagle3/sglang_eagle3_cg_2step.log`` -> ``sglang_eagle3_cg_2step``."""
    if log_path:
        stem = PurePosixPath(log_path).name
        stem = stem[:-4] if stem.endswith(".log") else stem
        return stem if NAME_RE.match(stem) else slug(stem)
    return slug(" ".join(argv[:3])) if argv else "launch"


def safe_server_text(recipe: Recipe) -> str:
    """``setsid nohup env K=V <argv> </dev/null >> LOG 2>&1`` (bad-inputs S17, §3.1 rule 5)."""
    env = ["env", *(f"{k}={v}" for k, v in recipe.env.items())] if recipe.env else []
    log = shlex.quote(recipe.log_path) if recipe.log_path else "/dev/null"
    return f"setsid nohup {shlex.join([*env, *recipe.server])} </dev/null >>{log} 2>&1"


# --------------------------------------------------------------------------- rewriting


def rewrite_steps(chain: Chain, replacements: dict[int, str]) -> str:
    """The chain text with the given steps' source text replaced (operators kept verbatim)."""
    out, pos = [], 0
    for step in chain.steps:
        if step.index in replacements:
            out.append(chain.text[pos : step.start])
            out.append(replacements[step.index])
            pos = step.end
    out.append(chain.text[pos:])
    return "".join(out)


def command_text(cmd: Command, argv: list[str]) -> str:
    """Render a command with a new argv, keeping its assignments and redirections."""
    parts = [f"{k}={shlex.quote(v)}" for k, v in cmd.assignments.items()]
    parts.append(shlex.join(argv))
    parts.extend(r.text for r in cmd.redirects)
    return " ".join(parts)


def replace_server_argv(step: Step, new_argv: list[str]) -> str:
    """The server step's text with the server argv replaced (inside ``bash -c`` too)."""
    cmd = step.command
    assert cmd is not None
    script = shell_script(cmd.argv)
    if script is not None:
        k = len(cmd.argv) - 1 - cmd.argv[::-1].index(script)
        argv = [*cmd.argv[:k], shlex.join(new_argv), *cmd.argv[k + 1 :]]
    else:
        inner, _ = unwrap(cmd.argv)
        prefix = cmd.argv[: len(cmd.argv) - len(inner)]
        argv = [*prefix, *new_argv]
    rest = [c.text for c in step.commands[1:]]
    return " | ".join([command_text(cmd, argv), *rest])


def sim_argv(
    argv: list[str],
    *,
    python: str,
    tag: str,
    speed: float = 50.0,
    fail: str | None = None,
    port: int | None = None,
) -> list[str]:
    """A server argv with the simulator in place of SGLang (flags kept, ``...`` dropped)."""
    args = list(argv)
    for k, a in enumerate(args):
        if a == "-m" and k + 1 < len(args):
            args = args[k + 2 :]
            break
        if a.endswith("launch_server") or a.endswith(".py"):
            args = args[k + 1 :]
            break
    else:
        args = args[1:]
    out: list[str] = []
    skip = False
    for k, a in enumerate(args):
        if skip:
            skip = False
            continue
        nxt = args[k + 1] if k + 1 < len(args) else None
        if a in ("--port", "--sim-speed", "--sim-tag", "--sim-fail") and nxt is not None:
            if a == "--port" and port is None:
                out += [a, nxt]
            skip = True
            continue
        if a == "--model-path":
            if nxt is None or nxt.startswith("--"):
                out += [a, "sim://model"]
                continue
            value = (
                nxt
                if nxt.startswith("sim://")
                else "sim://" + (nxt.strip("/").rsplit("/", 1)[-1].strip(".") or "model")
            )
            out += [a, value]
            skip = True
            continue
        if a != "...":
            out.append(a)
    if "--model-path" not in out:
        out += ["--model-path", "sim://model"]
    if port is not None:
        out += ["--port", str(port)]
    out += ["--sim-speed", f"{speed:g}", "--sim-tag", tag]
    if fail:
        out += ["--sim-fail", fail]
    return [python, "-m", "forensics.sim", *out]


def with_simulator(
    recipe: Recipe,
    *,
    python: str,
    tag: str,
    speed: float = 50.0,
    fail: str | None = None,
    port: int | None = None,
) -> Recipe:
    """The same recipe with the simulated server in place of SGLang (same chain otherwise)."""
    new_argv = sim_argv(recipe.server, python=python, tag=tag, speed=speed, fail=fail, port=port)
    changes: dict[str, Any] = {"server": new_argv, "health_url": health_url_for(new_argv)}
    if recipe.shell is not None:
        chain = parse_chain(recipe.shell)
        step = server_step(chain)
        if step is None:
            raise UsageError("the chain has no server step to replace", hint="check the chain")
        changes["shell"] = rewrite_steps(chain, {step.index: replace_server_argv(step, new_argv)})
    return recipe.replace(**changes)


def load_recipes() -> dict[str, Recipe]:
    """Every ``[recipes.NAME]`` of the config files (first file wins per name)."""
    from forensics.hosts import load_config

    out: dict[str, Recipe] = {}
    for path, data in load_config()["raw"]:
        section = data.get("recipes", {})
        if not isinstance(section, dict):
            raise ConfigError(f"{path}: [recipes] must be a table", hint="use [recipes.NAME]")
        for name, table in section.items():
            if name not in out:
                out[name] = Recipe.from_config(name, table, source=f"config:{path}")
    return out
