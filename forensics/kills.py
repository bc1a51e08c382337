"""What a shell step kills: pattern kills (``pkill``, ``pgrep``, ``killall``, ``kill $(pgrep
…)``, ``pgrep … | xargs kill``) as ``KillSpec``s, the ``MASS_KILLS`` table (kills of everything
rather than of one server: ``kill -1``, ``kill 0``, ``killall5``, ``pkill -u root``…), also
inside ``bash -c``, ``eval``, ``$(…)`` and backticks, and whether a ``pkill -f`` pattern matches
the launching shell's own command line. Used by lint's rules and the launcher's safe patterns.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Callable

from forensics.killargs import (
    SIGNALS,
    KillSpec,
    kill_argv,
    kill_targets,
    parse_kill,
    signal_number,
)
from forensics_parsers.shell import (
    WRAPPERS,
    Command,
    Step,
    echoed,
    nested_steps,
    parse_chain,
    unwrap,
)

# Patterns that match far more than one server (bad-inputs S15).
BROAD_PATTERN = re.compile(
    r"^\^?(python[0-9.]*\*?|python|py|bash|sh|node|java|ray|torchrun|sglang|vllm|\.|\.\*)\$?$"
)


_PGREP_SUB = re.compile(r"\$\(\s*((?:pgrep|pidof)\b[^)]*)\)|`\s*((?:pgrep|pidof)\b[^`]*)`")
# Commands whose output, piped to `xargs kill`, names the processes a pattern selects: how
# to read that pattern as a KillSpec (`pgrep -f X | xargs kill`, `ps aux | grep X | awk … |
# xargs kill -9`, `pidof X` in `kill $(…)`).
PID_SOURCES: dict[str, Callable[[list[str]], KillSpec | None]] = {
    "pgrep": lambda argv: parse_kill(argv),
    "pidof": lambda argv: next(
        (KillSpec("pidof", a, False, True, 0, False) for a in argv[1:] if not a.startswith("-")),
        None,
    ),
    "grep": lambda argv: _grep_pattern(argv),
}


def _grep_pattern(argv: list[str]) -> KillSpec | None:
    """``grep [-E|-F|-i…] PATTERN`` on ps output: a full-command-line pattern (``-v``: none)."""
    words = [a for a in argv[1:] if not a.startswith("-")]
    if "-v" in argv or "--invert-match" in argv or not words:
        return None
    return KillSpec("grep", words[0], True, False, 0, False)


def _source_kill(argv: list[str]) -> KillSpec | None:
    name = argv[0].rsplit("/", 1)[-1] if argv else ""
    return PID_SOURCES[name](argv) if name in PID_SOURCES else None


def step_kills(step: Step) -> list[KillSpec]:
    """Pattern kills a step performs (``pkill``, ``killall``, ``kill $(pgrep -f X)``), also
    inside ``bash -c "…"``, ``eval "…"``, ``$(…)`` and backticks."""
    out = _own_kills(step)
    for sub in nested_steps(step):
        out.extend(_own_kills(sub))
    return out


def _own_kills(step: Step) -> list[KillSpec]:
    out: list[KillSpec] = []
    for cmd in step.commands:
        inner, _ = cmd.unwrapped()
        spec = parse_kill(inner)
        if spec:
            out.append(spec)
        if inner and inner[0].rsplit("/", 1)[-1] == "kill":
            # the pids of `kill $(pgrep …)` / `kill `pidof …`` (also through a variable)
            found = _PGREP_SUB.finditer(cmd.text + " " + " ".join(inner))
            for body in dict.fromkeys(m.group(1) or m.group(2) for m in found):
                sub = parse_chain(body)
                if sub.steps and sub.steps[0].command:
                    s = _source_kill(sub.steps[0].command.argv)
                    if s:
                        sig = next((signal_number(a[1:]) for a in inner[1:] if a[:1] == "-"), 15)
                        out.append(dataclasses.replace(s, kills=True, signal=sig))
    # "pgrep -f X | xargs kill", "ps aux | grep X | awk '{print $2}' | xargs kill -9"
    if any(_xargs_kill(c.argv) for c in step.commands[1:]):
        listed = False  # grep selects processes only from a `ps` listing before it
        for c in step.commands[:-1]:
            argv = unwrap(c.argv)[0]
            listed = listed or argv[:1] == ["ps"]
            s = _source_kill(argv)
            if s and s.program != "pgrep" and (s.program != "grep" or listed):
                out.append(s)
        for i, s in enumerate(out):
            if s.program in PID_SOURCES:
                out[i] = dataclasses.replace(s, kills=True, signal=15)
    return out


def _reads_args(wrappers: list[str]) -> bool:
    """A wrapper that appends the words of its stdin to the command (xargs, parallel)."""
    return any(WRAPPERS[w].stdin_args for w in wrappers)


def _xargs_kill(argv: list[str]) -> bool:
    inner, wrappers = unwrap(argv)
    return _reads_args(wrappers) and bool(inner) and inner[0].rsplit("/", 1)[-1] == "kill"


def piped_argv(commands: list[Command], k: int) -> list[str]:
    """The argv command ``k`` of a pipeline runs: after its wrappers, with what an ``xargs``
    (``parallel``) reads appended: the words an ECHOES command before it prints (``echo -1 |
    xargs kill -9`` is ``kill -9 -1``), else the pipeline before it as a substitution
    (``docker ps -q | xargs docker kill`` is ``docker kill $(docker ps -q)``)."""
    inner, wrappers = commands[k].unwrapped()
    if not _reads_args(wrappers):
        return inner
    bodies = [r.body for r in commands[k].redirects if r.body is not None]
    if bodies:  # xargs kill -9 <<< -1
        return _with_args(inner, bodies[-1].split())
    if not k:
        return inner
    if text := echoed(unwrap(commands[k - 1].argv)[0]):
        return _with_args(inner, text.split())
    return _with_args(inner, ["$(" + " | ".join(c.text for c in commands[:k]) + ")"])


def _with_args(argv: list[str], words: list[str]) -> list[str]:
    """``argv`` with the words xargs reads: in place of ``{}`` (``-I{}``), else appended."""
    if "{}" in argv:
        return [x for a in argv for x in (words if a == "{}" else [a])]
    return [*argv, *words]


def _kills_pid(*pids: str) -> Callable[[list[str]], bool]:
    def match(argv: list[str]) -> bool:
        t = kill_targets(argv)
        return t is not None and any(p.strip("\"'") in pids for p in t[1])

    return match


def _selects_all_of(*options: str, values: tuple[str, ...] | None = None):
    """pkill/killall with one of ``options`` (and, when given, one of ``values``) and no
    pattern: everything that selector selects."""

    def match(argv: list[str]) -> bool:
        parsed = kill_argv(argv)
        if parsed is None or parsed[0] == "pgrep" or parsed[3] is not None:
            return False
        return any(o in parsed[1] and (values is None or parsed[1][o] in values) for o in options)

    return match


def _program(*names: str) -> Callable[[list[str]], bool]:
    return lambda argv: bool(argv) and argv[0].rsplit("/", 1)[-1] in names


def _with_word(program: str, *words: str) -> Callable[[list[str]], bool]:
    """``program`` with one of ``words`` among its arguments (a subcommand, an option)."""
    return lambda argv: _program(program)(argv) and any(w in words for w in argv[1:])


_CONTAINER_STOPS = ("kill", "stop", "rm", "restart", "pause")
_ALL_CONTAINERS = re.compile(
    r"(\$\(|`)\s*(sudo\s+)?(docker|podman|nerdctl)\s+(container\s+)?(ps|ls)\b"
)


def _every_container(argv: list[str]) -> bool:
    """``docker kill $(docker ps -q)`` (stop, rm -f, restart; podman, nerdctl; ``docker
    container kill``): a stop of every container the listing names."""
    if not _program("docker", "podman", "nerdctl")(argv):
        return False
    words = argv[2:] if argv[1:2] == ["container"] else argv[1:]
    return (
        bool(words)
        and words[0] in _CONTAINER_STOPS
        and any(_ALL_CONTAINERS.search(w) or _all_flag(w) for w in words[1:])
    )


def _all_flag(word: str) -> bool:
    """``--all`` or a short-option cluster holding ``a`` (``podman rm -af``, ``stop -a``)."""
    return word == "--all" or (word[:1] == "-" and word[1:2] != "-" and "a" in word[1:])


_SUBSTITUTION = re.compile(r"^(?:\$\((.*)\)|`(.*)`)$", re.S)
# Commands that narrow a process listing down (a pattern: broad-kill and self-kill read it).
_LISTING_FILTERS = ("grep", "egrep", "fgrep", "rg", "pgrep", "sed", "head", "tail")


def _listings(argv: list[str]) -> list[list[list[str]]]:
    """The pipelines whose output ``kill`` is given (``kill -9 $(ps -eo pid)``), each as the
    argvs of its commands (after wrappers)."""
    t = kill_targets(argv)
    out = []
    for word in t[1] if t else []:
        m = _SUBSTITUTION.match(word.strip())
        if m:
            steps = parse_chain(m.group(1) if m.group(1) is not None else m.group(2)).steps
            out.extend([unwrap(c.argv)[0] for c in s.commands] for s in steps)
    return out


# ps options that select given processes (a pid, a command name, a parent, a session, a tty)
_PS_SELECTORS = ("-p", "--pid", "-q", "--quick-pid", "-C", "--ppid", "-s", "--sid", "-t", "--tty")


def _lists_every_process(pipeline: list[list[str]]) -> bool:
    """``ps`` (no selection of pids) / ``ls /proc`` / ``find / …`` (or ``/proc``) with nothing narrowing it down
    (no grep, no awk pattern): every pid on the host."""
    first = pipeline[0] if pipeline and pipeline[0] else [""]
    name = first[0].rsplit("/", 1)[-1]
    roots = [a for a in first[1:] if not a.startswith("-")]
    lists = (
        (name == "ps" and not any(a.startswith(_PS_SELECTORS) for a in first[1:]))
        or (name in ("pgrep", "pidof") and _inverse(first))
        or (name == "ls" and any(r.startswith("/proc") for r in roots))
        or (name == "find" and any(r == "/" or r.startswith("/proc") for r in roots[:1]))
    )
    narrowed = any(
        c and (c[0] in _LISTING_FILTERS or (c[0] == "awk" and re.search(r"[/~]|==", " ".join(c))))
        for c in pipeline[1:]
    )
    return lists and not narrowed


def _inverse(argv: list[str]) -> bool:
    """``pkill -v PATTERN`` / ``pgrep --inverse``: every process but those it names."""
    parsed = kill_argv(argv)
    return parsed is not None and bool({"-v", "--inverse"} & set(parsed[2]))


def _kills_own_group(argv: list[str]) -> bool:
    """``kill -- -$(ps -o pgid= -p $$)`` (``$BASHPID``): the group of the shell running it."""
    t = kill_targets(argv)
    return t is not None and any(
        w.startswith("-") and ("$$" in w or "BASHPID" in w) and "pgid" in w for w in t[1]
    )


# System daemons whose kill by name takes the host's services (or everyone's GPUs) with it:
# their names and command lines, as pkill matches them (killall: the name exactly).
SYSTEM_DAEMONS = (
    ("sshd", "sshd: /usr/sbin/sshd -D [listener]"),
    ("systemd", "/lib/systemd/systemd --system --deserialize 31"),
    ("init", "/sbin/init splash"),
    ("dockerd", "/usr/bin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock"),
    ("containerd", "/usr/bin/containerd"),
    ("nvidia-persistenced", "/usr/bin/nvidia-persistenced --user nvidia-persistenced"),
    (
        "nv-fabricmanager",
        "/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg",
    ),
    ("slurmd", "/usr/sbin/slurmd -D -s"),
    ("kubelet", "/usr/bin/kubelet --config=/var/lib/kubelet/config.yaml"),
    ("cron", "/usr/sbin/cron -f"),
)


def _kills_daemon(argv: list[str]) -> bool:
    spec = parse_kill(argv)
    if spec is None or not spec.kills:
        return False
    if spec.program == "killall":
        return any(spec.pattern == name for name, _ in SYSTEM_DAEMONS)
    rx = pattern_regex(f"^(?:{spec.pattern})$" if spec.exact else spec.pattern)
    return any(rx.search(line if spec.full else name) for name, line in SYSTEM_DAEMONS)


def _kills_listing(argv: list[str]) -> bool:
    return any(_lists_every_process(p) for p in _listings(argv))


# The GPU device files and tools whose listings name every GPU user's processes.
_GPU_HOLDERS = re.compile(r"/dev/nvidia|/dev/dri|\bnvidia-smi\b|\bnvitop\b|\bgpustat\b")


def _kills_gpu_holders(argv: list[str]) -> bool:
    """``kill $(lsof -t /dev/nvidia*)``, ``$(fuser /dev/nvidia*)``, ``$(nvidia-smi
    --query-compute-apps=pid …)`` (also ``… | xargs kill``): every process using a GPU."""
    return any(_GPU_HOLDERS.search(" ".join(" ".join(c) for c in p)) for p in _listings(argv))


def _fuser_kills_gpu(argv: list[str]) -> bool:
    """``fuser -k /dev/nvidia*`` (``-ki``, ``--kill``, ``-k -9``)."""
    if not _program("fuser")(argv):
        return False
    kills = any(a == "--kill" or (a[:1] == "-" and a[1:2] != "-" and "k" in a) for a in argv[1:])
    return kills and any(_GPU_HOLDERS.search(a) for a in argv[1:] if not a.startswith("-"))


# Kills of every GPU user (each row: what it is, how to tell): the gpu-collateral-kill rule.
GPU_KILLS: tuple[tuple[str, Callable[[list[str]], bool]], ...] = (
    ("fuser -k /dev/nvidia*", _fuser_kills_gpu),
    ("kill $(lsof -t /dev/nvidia*)", _kills_gpu_holders),
    ("killall_sglang.sh", lambda argv: any(a.endswith("killall_sglang.sh") for a in argv[:2])),
)


_RUNLEVELS = [[w] for w in "0 1 2 3 4 5 6 s S q Q u U".split()]

# Kills that are not of one server at all (each row: what it is, how to tell, what it kills):
# signals to everything, and what stops the host, a system service or a whole GPU.
MASS_KILLS: tuple[tuple[str, Callable[[list[str]], bool], str], ...] = (
    (
        "kill -1",
        _kills_pid("-1"),
        "every process this user may signal; as root that is every process on the host "
        "(sshd, your login, other users' jobs)",
    ),
    (
        "kill 0",
        _kills_pid("0", "-0", "$$", "-$$", "${$}"),
        "the shell that runs the chain and its whole process group",
    ),
    (
        "kill $(ps …)",
        _kills_listing,
        "every process a listing of all processes names (`ps`, `ls /proc`, `find /proc`): as "
        "root the whole host, sshd included",
    ),
    (
        "pkill -v PATTERN",
        _inverse,
        "every process of the user except those the pattern names (as root: the whole host)",
    ),
    (
        "kill -- -$(ps -o pgid= -p $$)",
        _kills_own_group,
        "the process group of the shell that runs the chain: the chain itself",
    ),
    (
        "kill 1",
        _kills_pid("1"),
        "init (PID 1): a TERM or INT to systemd re-executes or reboots the host; in a container "
        "PID 1 is the container itself",
    ),
    (
        "pkill sshd (a system daemon)",
        _kills_daemon,
        "a system daemon (`SYSTEM_DAEMONS`: sshd, systemd, dockerd, nvidia-persistenced, "
        "fabricmanager, slurmd…): every SSH session, container or GPU job it serves",
    ),
    (
        "loginctl terminate-user / kill-user",
        _with_word(
            "loginctl",
            "terminate-user",
            "kill-user",
            "terminate-session",
            "kill-session",
            "terminate-seat",
        ),  # fmt: skip
        "every process of that user's sessions (for root: the SSH session running the chain)",
    ),
    (
        "killall5",
        _program("killall5"),
        "every process outside its own session: as root the whole host, sshd included",
    ),
    (
        "pkill -u USER",  # killall -u USER too
        _selects_all_of("-u", "-U", "--uid", "--euid", "--user"),
        "every process of that user, whatever it runs; for root (`-u root`, `-U 0`) the whole "
        "host, sshd and init's children included",
    ),
    (
        "pkill -P 1",
        _selects_all_of("-P", "--parent", values=("1",)),
        "every child of init: every daemon and orphaned process of the user (as root sshd, "
        "cron and every service)",
    ),
    (
        "kill $PPID",
        _kills_pid("$PPID", "${PPID}", "-$PPID"),
        "the process that started the chain: your login shell or the SSH session",
    ),
    (
        "reboot / shutdown / halt / poweroff",
        _program("reboot", "shutdown", "halt", "poweroff", "kexec"),
        "the whole host: every process of every user, the SSH session included",
    ),
    (
        "init N / telinit N",
        lambda argv: _program("init", "telinit")(argv) and argv[1:2] in _RUNLEVELS,
        "the whole host (a runlevel change: 0 halts, 6 reboots, 1 drops to single user)",
    ),
    (
        "systemctl stop / restart / kill",
        _with_word(
            "systemctl",
            "stop",
            "restart",
            "kill",
            "try-restart",
            "reload-or-restart",
            "isolate",
            "reboot",
            "poweroff",
            "halt",
            "rescue",
            "emergency",
            "kexec",
        ),  # fmt: skip
        "a system service and everything it runs, for every user of the host (docker: every "
        "container; nvidia-persistenced / fabricmanager: every GPU job)",
    ),
    (
        "service NAME stop / restart",
        _with_word("service", "stop", "restart", "force-reload"),
        "a system service and everything it runs, for every user of the host",
    ),
    (
        "nvidia-smi --gpu-reset",
        _with_word("nvidia-smi", "--gpu-reset", "-r"),
        "every process on that GPU, whoever owns it (other users' jobs lose their GPU state)",
    ),
    (
        "rmmod nvidia / modprobe -r nvidia",
        lambda argv: (
            (_program("rmmod")(argv) or _with_word("modprobe", "-r", "--remove")(argv))
            and any(a.startswith("nvidia") for a in argv[1:])
        ),
        "the GPU driver under every process on every GPU of the host, whoever owns it",
    ),
    (
        "docker kill / stop / rm -f $(docker ps -q)",
        _every_container,
        "every container on the host, whoever started it (other users' servers and jobs)",
    ),
    (
        "pkill -g 0 / -s 0",
        _selects_all_of("-g", "-s", "--pgroup", "--session", values=("0",)),
        "its own process group or session: the shell that runs the chain (and over SSH the "
        "session itself)",
    ),
)


# Files whose writing stops the host, a GPU or a disk (redirections, tee, dd of=, mkfs): (path
# or glob, row name, what it kills).
MASS_WRITES: tuple[tuple[str, str, str], ...] = (
    (
        "/proc/sysrq-trigger",
        "echo b > /proc/sysrq-trigger",
        "the whole host at once (`b` reboots, `o` powers off, `i`/`e` signal every process): no "
        "clean shutdown of anything",
    ),
    (
        "/sys/bus/pci/devices/*/remove",
        "echo 1 > /sys/bus/pci/devices/…/remove",
        "a PCI device (a GPU) taken off the bus under every process using it, whoever owns it",
    ),
    (
        "/sys/bus/pci/drivers/nvidia*/unbind",
        "echo … > /sys/bus/pci/drivers/nvidia/unbind",
        "a GPU unbound from its driver under every process using it, whoever owns it",
    ),
    (
        "/dev/[hsv]d[a-z]*",
        "dd of=/dev/sda",
        "a whole disk overwritten: its filesystems and every file on them, for every user",
    ),
    ("/dev/xvd[a-z]*", "dd of=/dev/xvda", "a whole disk overwritten, for every user"),
    ("/dev/nvme[0-9]*", "dd of=/dev/nvme0n1", "a whole disk overwritten, for every user"),
    ("/dev/md[0-9]*", "dd of=/dev/md0", "a whole RAID array overwritten, for every user"),
)


def _written(cmd: Command, argv: list[str]) -> list[str]:
    """The files a command writes: its output redirections and ``tee FILE…``."""
    out = [r.target for r in cmd.redirects if r.stream != 0 and r.op not in (">&", "<&")]
    name = argv[0].rsplit("/", 1)[-1] if argv else ""
    if name == "tee":
        out += [a for a in argv[1:] if not a.startswith("-")]
    if name in ("dd", "mkfs", "wipefs", "shred") or name.startswith("mkfs."):
        # dd of=DEVICE; mkfs / wipefs / shred DEVICE (a disk's raw device is written whole)
        out += [a[3:] if a.startswith("of=") else a for a in argv[1:] if not a.startswith("-")]
    return out


def _argvs(step: Step):
    """(command, the argv it runs: piped_argv) of a step and of every step nested in it."""
    for s in [step, *nested_steps(step)]:
        for k, cmd in enumerate(s.commands):
            yield cmd, piped_argv(s.commands, k)


def mass_kills(step: Step) -> list[tuple[str, str]]:
    """``(row name, what it kills)`` for each MASS_KILLS row a step (or a script nested in it)
    matches, and each MASS_WRITES file it writes."""
    out = []
    for cmd, inner in _argvs(step):
        out.extend((name, what) for name, match, what in MASS_KILLS if match(inner))
        written = _written(cmd, inner)
        out.extend(
            (name, what)
            for path, name, what in MASS_WRITES
            if any(fnmatch.fnmatchcase(w, path) for w in written)
        )
    return out


def gpu_kills(step: Step) -> list[str]:
    """The GPU_KILLS rows a step (or a script nested in it) matches."""
    return [name for _, inner in _argvs(step) for name, match in GPU_KILLS if match(inner)]


def pattern_regex(pattern: str) -> re.Pattern[str]:
    """A pkill pattern (POSIX ERE) as a Python regex; an invalid one matches literally."""
    translated = (
        pattern.replace("[[:space:]]", r"\s")
        .replace("[[:digit:]]", r"\d")
        .replace("[[:alpha:]]", "[A-Za-z]")
        .replace("[[:alnum:]]", "[A-Za-z0-9]")
    )
    try:
        return re.compile(translated)
    except re.error:
        return re.compile(re.escape(pattern))


def self_kill_match(spec: KillSpec, cmdline: str) -> re.Match[str] | None:
    """Where the pattern matches the launching shell's command line, if it does."""
    if not spec.kills or not spec.full:
        return None
    if spec.exact:
        return pattern_regex(f"^(?:{spec.pattern})$").search(cmdline)
    return pattern_regex(spec.pattern).search(cmdline)


def signal_name(sig: int) -> str:
    names = {v: k for k, v in SIGNALS.items()}
    return f"SIG{names[sig]}" if sig in names else f"signal {sig}"
