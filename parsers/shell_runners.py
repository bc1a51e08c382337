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
from forensics_parsers.shell_scripts import (
    PARALLEL_OPTIONS,
    capsh_script,
    find_exec_script,
    inline_code,
    joined,
    option_cluster,
    parallel_script,
    screen_keys,
    script_option,
    ssh_command,
    tmux_script,
    trap_action,
)
from forensics_parsers.shell_syntax import BODY_KEYWORDS, PREFIXES

if TYPE_CHECKING:
    from forensics_parsers.shell import Command, Step


@dataclass(frozen=True)
class Wrapper:
    """A command that runs another command: the rest of its argv, or a script it is given
    (a WRAPPERS row)."""

    positionals: int = 0  # words after its options before the command (timeout's duration)
    value_options: frozenset[str] = frozenset()  # its options that take the next word
    assignments: bool = False  # NAME=VALUE words may come before the command (env, sudo)
    # the shell text it runs, from the words after its name (`flock F -c TEXT`, `ssh H TEXT`,
    # `parallel CMD ::: ARGS`); None when it runs none
    script: Callable[[list[str]], str | None] | None = None
    execs: bool = True  # without a script, it runs the rest of its argv as a command
    stdin_args: bool = False  # appends the words of its stdin to that command (xargs)


def _w(
    positionals: int = 0,
    options: str = "",
    assignments: bool = False,
    script: Callable[[list[str]], str | None] | None = None,
    execs: bool = True,
    stdin_args: bool = False,
) -> Wrapper:
    return Wrapper(positionals, frozenset(options.split()), assignments, script, execs, stdin_args)


SHELLS = ("sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "yash", "posh", "fish", "csh", "tcsh")


# Commands that run another command: how to find it (the rest of the argv after their options,
# positionals and assignments), or the shell text they run (``script``).
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
    "env": _w(0, "-u -C --unset --chdir", True, script_option("-S", "--split-string")),
    "timeout": _w(1, "-k -s --signal --kill-after"),  # the duration, then the command
    "sudo": _w(0, "-u -g -h -p -C -D -r -t -U -T --user --group --host --prompt --chdir", True),
    "doas": _w(0, "-u -C"),
    "runuser": _w(0, "-u -g -G --user --group", script=script_option("-c", "--command")),
    "su": _w(script=script_option("-c", "--command", "--session-command"), execs=False),
    "numactl": _w(0, "-N -m -C -p -i --cpunodebind --membind --physcpubind --preferred"),
    "taskset": _w(1),  # the mask (or cpu list), then the command
    "chrt": _w(1),  # the priority, then the command
    "flock": _w(1, "-w -E --timeout --conflict-exit-code", script=script_option("-c")),
    "xargs": _w(
        0, "-I -L -n -P -s -d -a -E --max-args --max-procs --delimiter --arg-file", stdin_args=True
    ),
    "parallel": _w(0, " ".join(PARALLEL_OPTIONS), script=parallel_script, stdin_args=True),
    "busybox": _w(),  # busybox kill -9 -1: the applet is the command
    "sshpass": _w(0, "-p -f -d -P"),  # sshpass -p PASSWORD ssh HOST …
    "python": _w(script=inline_code("python"), execs=False),  # python3, python3.11 too
    "perl": _w(script=inline_code("perl"), execs=False),
    "ruby": _w(script=inline_code("ruby"), execs=False),
    "node": _w(script=inline_code("node"), execs=False),
    "pkexec": _w(0, "--user"),
    "setpriv": _w(0, "--reuid --regid --ruid --rgid --euid --egid --groups --inh-caps"),
    "capsh": _w(script=capsh_script, execs=False),  # capsh … -- -c CMD: bash runs CMD
    "sg": _w(1, script=script_option("-c")),  # sg GROUP -c CMD / sg GROUP CMD
    "pdsh": _w(script=joined("-w -x -l -R -f -t -u -g -X"), execs=False),  # on each host
    "clush": _w(script=joined("-w -x -g -X -l -f -t -u -R -o"), execs=False),
    "mpirun": _w(0, "-np -n -N -H -c --host --hostfile -hostfile --map-by -x --mca"),
    "mpiexec": _w(0, "-np -n -N -H -c --host --hostfile -hostfile --map-by -x --mca"),
    "watch": _w(script=joined("-n -d -q --interval --differences --equexit"), execs=False),
    "eval": _w(script=joined(), execs=False),  # eval "pkill -f x" runs its joined words
    "ssh": _w(script=ssh_command, execs=False),  # ssh HOST 'pkill -f x': the remote shell
    "find": _w(script=find_exec_script, execs=False),
    "script": _w(script=script_option("-c", "--command"), execs=False),
    "trap": _w(script=trap_action, execs=False),  # trap 'ACTION' EXIT: run at the chain's end
    "tmux": _w(script=tmux_script, execs=False),
    "screen": _w(0, "-S -c -t -T -e -h -p -X -L -Logfile", script=screen_keys),
    "chroot": _w(1, "--userspec --groups"),  # the new root, then the command
    "unshare": _w(0, "-S -G -R -w --setuid --setgid --root --wd --map-user --map-group"),
    "nsenter": _w(0, "-t -S -G --target --setuid --setgid"),
    "srun": _w(
        0,
        "-N -n -c -p -t -J -w -x -A -q -G -o -e -D --nodes --ntasks --partition --time "
        "--job-name --nodelist --exclude --account --qos --gpus --gres --output --error",
    ),
    "systemd-run": _w(
        0,
        "-p -u -M -H -E -D --property --unit --machine --host --setenv --uid --gid --nice "
        "--working-directory --description --slice --on-active --on-calendar",
    ),
}


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


_VERSIONED = re.compile(r"(?<=[a-z])[0-9][0-9.]*$")  # python3.11, perl5.36


def program_name(word: str) -> str:
    """A command word's program: its path and a version suffix dropped (``/usr/bin/python3.11``
    -> ``python``)."""
    return _VERSIONED.sub("", word.rsplit("/", 1)[-1])


def wrapper_row(word: str) -> Wrapper | None:
    """The WRAPPERS row of a command name (its path and a version suffix dropped)."""
    name = word.rsplit("/", 1)[-1]
    return WRAPPERS.get(name) or WRAPPERS.get(program_name(name))


def _peel(argv: list[str]) -> tuple[list[str], list[str], str | None]:
    """Peel WRAPPERS and what may stand before a command off an argv: (the command they run,
    the wrappers' names, the shell text the last of them runs when it runs one: then the
    command is that wrapper's own argv)."""
    wrappers: list[str] = []
    a = list(argv)
    while a:
        w = wrapper_row(a[0])
        if w is None:
            rest = _command_start(a)
            if rest is None:
                break
            a = rest
            continue
        if w.script is not None and (script := w.script(a[1:])) is not None:
            return a, wrappers, script
        if not w.execs:
            break
        wrappers.append(program_name(a[0]))
        a = a[1:]
        while a and a[0].startswith("-") and a[0] != "--":
            opt = a.pop(0)
            if (opt in w.value_options or option_cluster(opt, w.value_options)) and a:
                a.pop(0)
        if a and a[0] == "--":
            a = a[1:]
        while w.assignments and a and _is_assignment(a[0]):
            a = a[1:]
        a = a[w.positionals :]
    return a, wrappers, None


def unwrap(argv: list[str]) -> tuple[list[str], list[str]]:
    """Peel wrappers (nohup, setsid, env K=V, timeout 10, nice -n 5, sudo -u x, xargs -n 1…)
    and what may stand before a command (`then`, `do`, `!`, a function header, a case
    pattern) off an argv: (the command they run, the wrappers' names)."""
    inner, wrappers, _ = _peel(argv)
    return inner, wrappers


def runner_script(argv: list[str]) -> str | None:
    """The shell text a WRAPPERS row with a ``script`` runs (``eval``, ``su -c``, ``ssh HOST
    '…'``, ``flock F -c``, ``env -S``, ``watch``, ``parallel … :::``, ``find -exec``, tmux,
    screen), after the wrappers before it; None for any other command."""
    return _peel(argv)[2]


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


NESTING_LIMIT = 8  # bash -c "bash -c '...'" deeper than this is left unread


# Commands whose output is the text they are given: what a shell reading their output runs
# (`echo 'kill -9 -1' | sh`, `printf 'pkill …' | bash`), or what `$(echo …)` stands for.
def _printf(args: list[str]) -> str:
    """``printf FORMAT ARGS``'s text, for the ``%s`` and ``\\n`` it is mostly given."""
    args = args[1:] if args[:1] == ["--"] else args
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


# Programs that run a script file given as their first argument (`bash FILE`, `. FILE`), and
# those that run the script on their stdin whatever their arguments (`at now`, `batch`).
SCRIPT_FILE_READERS = (*SHELLS, "source", ".")
STDIN_SCRIPT_READERS = ("at", "batch")
# Script files that are the reader's stdin.
STDIN_FILES = ("/dev/stdin", "/dev/fd/0", "/proc/self/fd/0", "-")
# Programs whose output is what they download: a script a shell reads from one is unseen.
FETCHERS = ("curl", "wget", "fetch", "http", "https", "xh", "lwp-request", "GET")
_PROC_SUB = re.compile(r"^<\((.*)\)$", re.S)
STDIN = "<stdin>"
# Interpreters that run a script file given as their first word (`python3 x.py`), or their
# stdin given none (`curl URL | python3`), unless given code (`-c`, `-e`) or a module (`-m`).
INTERPRETERS = ("python", "perl", "ruby", "node", "php", "Rscript", "lua", "tclsh")
INTERPRETER_CODE_OPTIONS = ("-c", "-e", "-E", "-m", "-r", "--eval", "-p", "--print")


def given_code(word: str) -> bool:
    """An interpreter's option that gives it code or a module: ``-c``, ``-mjson.tool``,
    ``--eval=…``."""
    if word.startswith("--"):
        return word.split("=", 1)[0] in INTERPRETER_CODE_OPTIONS
    return word[:2] in INTERPRETER_CODE_OPTIONS


def _interpreter_input(inner: list[str]) -> str | None:
    """``_script_input`` of an INTERPRETERS command (its argv after wrappers)."""
    if any(given_code(a) for a in inner[1:]):
        return None
    files = [a for a in inner[1:] if not a.startswith("-") or a == "-"]
    if not files or files[0] in STDIN_FILES:
        return STDIN
    m = _PROC_SUB.match(files[0])
    return m.group(1) if m else None


def _script_input(argv: list[str]) -> str | None:
    """Where a command reads the script it runs: ``STDIN`` (``bash``, ``sh -s``, ``source
    /dev/stdin``, ``at now``), the text of a process substitution (``bash <(…)``, ``. <(…)``:
    the commands whose output it is), else None (a script of its own, a file on disk)."""
    inner, _ = unwrap(argv)
    name = inner[0].rsplit("/", 1)[-1] if inner else ""
    if program_name(name) in INTERPRETERS:
        return _interpreter_input(inner)
    if name in STDIN_SCRIPT_READERS:
        return None if "-f" in inner else STDIN
    if name not in SCRIPT_FILE_READERS or shell_script(argv) is not None:
        return None
    options = [a for a in inner[1:] if a.startswith("-") and not a.startswith("--")]
    files = [a for a in inner[1:] if not a.startswith("-") or a == "-"]
    if not files or files[0] in STDIN_FILES or any("s" in o[1:] for o in options):
        return STDIN
    m = _PROC_SUB.match(files[0])
    return m.group(1) if m else None


def _output_of(text: str) -> tuple[str | None, str | None]:
    """What a pipeline (as text) prints, as far as lint can tell: (the text an ECHOES command
    at its end prints, the fetch command it downloads with)."""
    from forensics_parsers.shell import parse_chain  # the reader imports this module

    steps = parse_chain(text).steps
    commands = steps[-1].commands if steps else []
    if not commands:
        return None, None
    argvs = [unwrap(c.argv)[0] for c in commands]
    fetch = next((c.text for c, a in zip(commands, argvs) if a and a[0] in FETCHERS), None)
    return echoed(argvs[-1]), fetch


def fetcher_output(text: str) -> str | None:
    """The download command whose output a pipeline (as text) prints, else None."""
    return _output_of(text)[1]


def _fed(commands: list[Command]) -> list[tuple[str | None, str | None]]:
    """(script, fetch command) of each command of a pipeline that reads a script from its
    stdin or a process substitution: a here-document or here-string, ``< <(…)``, the commands
    piped into it, or the ``<(…)`` it is given."""
    out = []
    for k, cmd in enumerate(commands):
        source = _script_input(cmd.argv)
        if source is None:
            continue
        if source != STDIN:
            out.append(_output_of(source))
            continue
        bodies = [r.body for r in cmd.redirects if r.body is not None]
        subs = [
            m.group(1) for r in cmd.redirects if r.op == "<" and (m := _PROC_SUB.match(r.target))
        ]
        if bodies:
            out.append((bodies[-1], None))
        elif subs:
            out.append(_output_of(subs[-1]))
        elif k:
            out.append(_output_of(" | ".join(c.text for c in commands[:k])))
    return out


def stdin_scripts(commands: list[Command]) -> list[str]:
    """What the script readers of a pipeline run (SCRIPT_FILE_READERS given no script or a
    stdin file, STDIN_SCRIPT_READERS): a here-document or here-string (`bash <<EOF … EOF`,
    `sh <<< '…'`, `at now <<< '…'`), the output of an ECHOES command piped into them (`echo '…'
    | sh`) or in a process substitution (`source <(echo '…')`, `bash < <(printf '…')`)."""
    return [script for script, _ in _fed(commands) if script is not None]


def fetched_scripts(commands: list[Command]) -> list[str]:
    """The download commands (FETCHERS) whose output a script reader of the pipeline runs:
    `curl -s URL | bash`, `. <(curl …)`, `bash <(wget -qO- URL)`."""
    return [fetch for _, fetch in _fed(commands) if fetch is not None]


def nested_scripts(cmd: Command) -> list[str]:
    """The shell text a command runs besides itself: ``bash -c SCRIPT`` / ``sh -c``, the
    script of a WRAPPERS row (``eval``, ``su -c``, ``ssh``, ``find -exec``…), the body of a
    ``( … )`` or ``{ …; }`` group, and its ``$(...)`` / backtick substitutions."""
    script = shell_script(cmd.argv) or runner_script(cmd.argv) or _group_body(cmd)
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
