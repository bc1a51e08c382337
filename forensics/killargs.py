"""The argv of the kill programs, read as they read it: ``pkill``/``pgrep``/``killall``/``skill``
(options, signal, pattern: ``KillSpec``, ``parse_kill``) and ``kill`` (signal and targets:
``kill_targets``). What a step kills, and which kills are mass kills, is ``forensics/kills.py``.
"""

from __future__ import annotations

import dataclasses

# Signals by name (pkill -KILL / -SIGKILL / --signal KILL); numbers are taken as they are.
SIGNALS = {"HUP": 1, "INT": 2, "QUIT": 3, "KILL": 9, "USR1": 10, "USR2": 12, "TERM": 15}

# Options that take a value, per program (procps' pkill/pgrep, psmisc's killall): the next
# word, or glued to a short option (`-uroot`, `-U0`), or after `=` (`--uid=0`).
_PROCPS_VALUES = (
    "-g -G -P -s -t -u -U -F -r -q --signal --pgroup --group --parent --session --terminal "
    "--euid --uid --pidfile --runstates --ns --nslist --queue"
)
KILL_OPTS_WITH_VALUE: dict[str, frozenset[str]] = {
    "pkill": frozenset(_PROCPS_VALUES.split()),
    "pgrep": frozenset((_PROCPS_VALUES + " -d --delimiter").split()),
    "skill": frozenset("-t -u -p -c --tty --user --pid --command".split()),
    "killall": frozenset(
        "-s -u -o -y -n -Z --signal --user --older-than --younger-than --ns --context".split()
    ),
}


@dataclasses.dataclass
class KillSpec:
    """One pattern kill: ``pkill -9 -f python3`` -> program pkill, signal 9, full, python3."""

    program: str  # pkill | pgrep | killall
    pattern: str
    full: bool  # -f: match the full command line (else the process name)
    exact: bool  # -x
    signal: int  # 15 unless given; 0 for pgrep (it kills nothing by itself)
    kills: bool  # pkill/killall, or pgrep feeding kill


def signal_number(value: str) -> int:
    v = value.upper().removeprefix("SIG")
    if v.isdigit():
        return int(v)
    return SIGNALS.get(v, 15)


def kill_argv(argv: list[str]) -> tuple[str, dict[str, str], list[str], str | None] | None:
    """A ``pkill``/``pgrep``/``killall`` argv -> (program, {option: value} for the options
    that take one, the flags, the pattern or None); None for any other program."""
    prog = argv[0].rsplit("/", 1)[-1] if argv else ""
    takes = KILL_OPTS_WITH_VALUE.get(prog)
    if takes is None:
        return None
    values: dict[str, str] = {}
    flags: list[str] = []
    words = iter(argv[1:])
    for a in words:
        if a == "--":
            return prog, values, flags, next(words, None)
        if a in takes:
            values[a] = next(words, "")
        elif a.startswith("--") and "=" in a:
            key, value = a.split("=", 1)
            values[key] = value
        elif a.startswith("-") and len(a) > 1 and not a.startswith("--") and not _is_signal(a):
            for k, ch in enumerate(a[1:], 1):  # a cluster of short options: `-fu root`, `-uroot`
                if "-" + ch in takes:
                    values["-" + ch] = a[k + 1 :] or next(words, "")
                    break
                flags.append("-" + ch)
        elif a.startswith("-") and len(a) > 1:
            flags.append(a)
        else:
            return prog, values, flags, a
    return prog, values, flags, None


def _is_signal(option: str) -> bool:
    """``-9``, ``-KILL``, ``-SIGKILL``: a signal given as an option of its own."""
    body = option[1:].upper().removeprefix("SIG")
    return body.isdigit() or body in SIGNALS


def parse_kill(argv: list[str]) -> KillSpec | None:
    """A ``pkill``/``pgrep``/``killall`` argv -> KillSpec (None for anything else)."""
    parsed = kill_argv(argv)
    if parsed is None:
        return None
    prog, values, flags, pattern = parsed
    full = exact = False
    sig = 15
    for a, v in values.items():
        if a == "--signal" or (a == "-s" and prog == "killall"):
            sig = signal_number(v) if prog != "pgrep" else sig
    for a in flags:
        if a in ("-f", "--full"):
            full = True
        elif a in ("-x", "--exact"):
            exact = True
        elif _is_signal(a):
            sig = signal_number(a[1:])
    if pattern is None:
        return None
    if prog == "killall":
        full = False
    kills = prog != "pgrep"
    return KillSpec(prog, pattern, full, exact, sig if kills else 0, kills)


def kill_targets(argv: list[str]) -> tuple[int, list[str]] | None:
    """``kill [-SIG | -s SIG | -n SIG | --signal SIG] [--] PID...`` -> (signal, the pids as
    written); None for any other command (or ``kill -l``)."""
    if not argv or argv[0].rsplit("/", 1)[-1] != "kill":
        return None
    sig, args = None, argv[1:]
    while args:
        a = args[0]
        if a == "--":
            args = args[1:]
            break
        if a in ("-l", "-L", "--list", "--table"):
            return None
        if a in ("-s", "-n", "--signal") and len(args) > 1 and sig is None:
            sig, args = signal_number(args[1]), args[2:]
            continue
        if a.startswith("-") and len(a) > 1 and sig is None and not a[1:].startswith("-"):
            sig, args = signal_number(a[1:]), args[1:]
            continue
        break
    return (15 if sig is None else sig), args
