"""What a command runs besides itself (pure, never evaluates): the command a wrapper chain
finally runs (``WRAPPERS``, ``unwrap``: nohup, setsid, env, sudo, timeout, xargs…), the scripts
it hands to a shell (``bash -c``, ``eval``, ``su -c``, ``ssh HOST '…'``), what a shell reads
from its stdin (here-documents, ``echo … | sh``), and every step nested in a step
(``nested_steps``). The chain's reader (steps, words) is ``parsers/shell.py``, which
re-exports these names.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from forensics_parsers.shell_lexer import substitutions
from forensics_parsers.shell_syntax import BODY_KEYWORDS, PREFIXES

if TYPE_CHECKING:
    from forensics_parsers.shell import Command, Step


@dataclass(frozen=True)
class Wrapper:
    """A command that runs the rest of its argv as another command (a WRAPPERS row)."""

    positionals: int = 0  # words after its options before the command (timeout's duration)
    value_options: frozenset[str] = frozenset()  # its options that take the next word
    assignments: bool = False  # NAME=VALUE words may come before the command (env, sudo)


def _w(positionals: int = 0, options: str = "", assignments: bool = False) -> Wrapper:
    return Wrapper(positionals, frozenset(options.split()), assignments)


# Commands that run the rest of their argv as another command: how to find that command.
WRAPPERS: dict[str, Wrapper] = {
    "nohup": _w(),
    "setsid": _w(),
    "exec": _w(0, "-a"),
    "command": _w(),
    "builtin": _w(),
    "time": _w(0, "-f -o --format --output"),
    "nice": _w(0, "-n --adjustment"),
    "ionice": _w(0, "-c -n -p -P -u --class --classdata"),
    "stdbuf": _w(0, "-i -o -e --input --output --error"),
    "env": _w(0, "-u -C -S --unset --chdir", assignments=True),
    "timeout": _w(1, "-k -s --signal --kill-after"),  # the duration, then the command
    "sudo": _w(0, "-u -g -h -p -C -D -r -t -U -T --user --group --host --prompt --chdir", True),
    "doas": _w(0, "-u -C"),
    "runuser": _w(0, "-u -g -G --user --group"),
    "numactl": _w(0, "-N -m -C -p -i --cpunodebind --membind --physcpubind --preferred"),
    "taskset": _w(1),  # the mask (or cpu list), then the command
    "chrt": _w(1),  # the priority, then the command
    "flock": _w(1, "-w -E --timeout --conflict-exit-code"),  # the lock file, then the command
    "xargs": _w(0, "-I -L -n -P -s -d -a -E --max-args --max-procs --delimiter --arg-file"),
    "busybox": _w(),  # busybox kill -9 -1: the applet is the command
    "watch": _w(0, "-n -d -q --interval --differences --equexit"),  # runs it again and again
}
SHELLS = ("sh", "bash", "dash", "zsh", "ksh")


def _is_assignment(word: str) -> bool:
    if "=" not in word:
        return False
    name = word.split("=", 1)[0]
    return bool(name) and (name[0].isalpha() or name[0] == "_") and name.replace("_", "a").isalnum()


def _command_start(a: list[str]) -> list[str] | None:
    """The argv after what may stand before a command where one starts (None when nothing
    does): a reserved word of shell_syntax (`then kill -9 -1`, `do pkill …`, `! kill`,
    `coproc pkill`), a function header (`f() { kill …`, `function f { kill …`) or a
    ``case`` item's pattern (`x) killall5`)."""
    if a[0] in BODY_KEYWORDS or a[0] in PREFIXES:
        return a[1:]
    if a[0] == "function" and len(a) > 1:
        rest = a[2:]
        rest = rest[2:] if rest[:2] == ["(", ")"] else rest
        return rest[1:] if rest[:1] in (["{"], ["("]) else rest
    if a[1:3] == ["(", ")"]:  # NAME ( ) { body
        return a[4:] if a[3:4] in (["{"], ["("]) else a[3:]
    if a[0] == "case" and "in" in a and ")" in a:  # case WORD in PATTERN) command
        return a[a.index(")") + 1 :]
    if len(a) > 1 and a[1] == ")" and a[0] not in ("(", "{"):  # PATTERN) command (a case item)
        return a[2:]
    if len(a) > 2 and a[0] == "(" and a[2] == ")":  # (PATTERN) command
        return a[3:]
    return None


def unwrap(argv: list[str]) -> tuple[list[str], list[str]]:
    """Peel wrappers (nohup, setsid, env K=V, timeout 10, nice -n 5, sudo -u x, xargs -n 1…)
    and what may stand before a command (`then`, `do`, `!`, a function header, a case
    pattern) off an argv: (the command they run, the wrappers' names)."""
    wrappers: list[str] = []
    a = list(argv)
    while a:
        rest = _command_start(a)
        if rest is not None:
            a = rest
            continue
        w = WRAPPERS.get(a[0].rsplit("/", 1)[-1])
        if w is None:
            break
        wrappers.append(a[0].rsplit("/", 1)[-1])
        a = a[1:]
        while a and a[0].startswith("-") and a[0] != "--":
            opt = a.pop(0)
            if opt in w.value_options and a:
                a.pop(0)
        if a and a[0] == "--":
            a = a[1:]
        while w.assignments and a and _is_assignment(a[0]):
            a = a[1:]
        a = a[w.positionals :]
    return a, wrappers


def shell_script(argv: list[str]) -> str | None:
    """The script of ``bash -c SCRIPT`` / ``sh -c SCRIPT`` (after wrappers), else None."""
    inner, _ = unwrap(argv)
    if not inner or inner[0].rsplit("/", 1)[-1] not in SHELLS:
        return None
    args = inner[1:]
    for k, arg in enumerate(args):
        if arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:]:
            return args[k + 1] if k + 1 < len(args) else None
        if not arg.startswith("-"):
            return None
    return None


# ssh's options that take a value (the next word or glued): the host comes after them.
SSH_VALUE_OPTIONS = frozenset(
    "-b -B -c -D -E -e -F -I -i -J -L -l -m -O -o -p -P -Q -R -S -W -w".split()
)


def _ssh_command(args: list[str]) -> str | None:
    """``ssh [options] HOST COMMAND...``: the command the remote login shell runs (joined as
    ssh joins it), None when there is none (an interactive login)."""
    k = 0
    while k < len(args) and args[k].startswith("-") and args[k] != "--":
        k += 2 if args[k] in SSH_VALUE_OPTIONS else 1
    k += 1 if k < len(args) and args[k] == "--" else 0
    rest = args[k + 1 :]
    return " ".join(rest) if rest else None


# Commands that run a script given as an argument: name -> how the script is found.
SCRIPT_RUNNERS = {
    "eval": lambda args: " ".join(args),  # eval "pkill -f x" runs its joined arguments
    "su": lambda args: next((args[k + 1] for k, a in enumerate(args[:-1]) if a == "-c"), None),
    "ssh": _ssh_command,  # ssh HOST 'pkill -f x': the remote shell runs it
}
NESTING_LIMIT = 8  # bash -c "bash -c '...'" deeper than this is left unread


# Commands whose output is the text they are given: what a shell reading their output runs
# (`echo 'kill -9 -1' | sh`, `printf 'pkill …' | bash`), or what `$(echo …)` stands for.
def _printf(args: list[str]) -> str:
    """``printf FORMAT ARGS``'s text, for the ``%s`` and ``\\n`` it is mostly given."""
    if not args:
        return ""
    fmt = args[0].replace("\\n", "\n").replace("\\t", "\t")
    rest = iter(args[1:])
    return re.sub(r"%[sbd]", lambda m: next(rest, ""), fmt)


ECHOES: dict[str, Callable[[list[str]], str]] = {
    "echo": lambda args: " ".join(a for a in args if a not in ("-n", "-e", "-E")),
    "printf": _printf,
}


def echoed(argv: list[str]) -> str | None:
    """The text an ECHOES command prints (None for another command)."""
    if not argv or argv[0].rsplit("/", 1)[-1] not in ECHOES:
        return None
    try:
        return ECHOES[argv[0].rsplit("/", 1)[-1]](argv[1:])
    except (TypeError, ValueError):
        return " ".join(argv[1:])


def _reads_script_from_stdin(argv: list[str]) -> bool:
    """A shell given no script (`bash`, `sh -s`, `bash -x`): it runs what its stdin holds."""
    inner, _ = unwrap(argv)
    if not inner or inner[0].rsplit("/", 1)[-1] not in SHELLS:
        return False
    return shell_script(argv) is None and all(a.startswith("-") for a in inner[1:])


def stdin_scripts(commands: list[Command]) -> list[str]:
    """What the shells of a pipeline read from their standard input and run: a here-document
    or here-string (`bash <<EOF … EOF`, `sh <<< '…'`) or the output of an ECHOES command piped
    into them (`echo '…' | sh`)."""
    out = []
    for k, cmd in enumerate(commands):
        if not _reads_script_from_stdin(cmd.argv):
            continue
        bodies = [r.body for r in cmd.redirects if r.body is not None]
        if bodies:
            out.append(bodies[-1])
        elif k and (text := echoed(unwrap(commands[k - 1].argv)[0])) is not None:
            out.append(text)
    return out


def nested_scripts(cmd: Command) -> list[str]:
    """The shell text a command runs besides itself: ``bash -c SCRIPT`` / ``sh -c``,
    ``eval ARGS``, ``su -c SCRIPT`` (after wrappers), the body of a ``( … )`` or ``{ …; }``
    group, and its ``$(...)`` / backtick substitutions."""
    script = shell_script(cmd.argv) or _group_body(cmd)
    inner, _ = unwrap(cmd.argv)
    if script is None and inner and inner[0].rsplit("/", 1)[-1] in SCRIPT_RUNNERS:
        script = SCRIPT_RUNNERS[inner[0].rsplit("/", 1)[-1]](inner[1:])
    # a substitution inside the script is the script's own (read when the script is)
    out = [b for b in substitutions(cmd.text) if not (script and b in script)]
    return [*out, script] if script else out


def _group_body(cmd: Command) -> str | None:
    """The commands inside a ``( … )`` subshell or a ``{ …; }`` group, as text."""
    text = cmd.text.strip()
    for open_, close in (("(", ")"), ("{", "}")):
        if cmd.argv[:1] == [open_] and text.startswith(open_):
            end = text.rfind(close)
            return text[1:end] if end > 0 else text[1:]
    return None


def nested_steps(step: Step, _depth: int = 0) -> list[Step]:
    """Every step the shell would run inside ``step`` (``bash -c``, ``eval``, ``$(...)``,
    backticks), recursively; their ``index`` is that of the outer step."""
    from forensics_parsers.shell import parse_chain  # the reader imports this module

    if _depth >= NESTING_LIMIT:
        return []
    out: list[Step] = []
    scripts = [s for cmd in step.commands for s in nested_scripts(cmd)]
    for script in [*scripts, *stdin_scripts(step.commands)]:
        for sub in parse_chain(script).steps:
            sub.index = step.index
            out.append(sub)
            out.extend(nested_steps(sub, _depth + 1))
    return out
