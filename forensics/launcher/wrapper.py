"""The shell scripts a launch runs on the host: the POSIX-sh wrapper that runs the chain step by
step and journals each step (start, pid, end with exit status, output tail, what a step past its
deadline waited on), the server step's monitor, and the supervisor that journals begin and exit."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from forensics.recipe import server_step, step_kind
from forensics_parsers.shell import Chain, Step

KILL_AFTER_S = 2  # timeout -k: SIGKILL this long after the deadline's SIGTERM
TAIL_BYTES = 2000  # the most of a step's output (and of the log) kept in the journal / result

# Programs run inline in the wrapper shell (they change the shell's own state).
INLINE_PROGRAMS = {"cd", "export", "set", "umask", "ulimit", "source", ".", "unset", "pushd"}

_ESC = r"""_esc() { [ -f "$1" ] || return 0; tail -c TAILB "$1" 2>/dev/null | tr -d '\000-\010\013-\037\177' | tr '\t' ' ' | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' | awk 'NR>1{printf "\\n"} {printf "%s", $0}'; }
_now() { date +%s.%N 2>/dev/null || date +%s; }
"""

_MONITOR = r"""n=$1; c=$2
printf '{"v":1,"launch_id":"%s","event":"server","step":%s,"pid":%s,"pgid":%s,"t":%s}\n' "$L" "$n" "$$" "$(ps -o pgid= -p $$ 2>/dev/null | tr -d ' ')" "$(_now)" >> "$J"
[ -n "$PF" ] && echo "$$" > "$PF"
"$SH" -c "$c" > "$D/out$n" 2>&1 < /dev/null
rc=$?
printf '{"v":1,"launch_id":"%s","event":"end","step":%s,"pid":%s,"t":%s,"rc":%s,"tail":"%s"}\n' "$L" "$n" "$$" "$(_now)" "$rc" "$(_esc "$D/out$n")" >> "$J"
"""

_FUNCS = r"""_j() {
  rm -f "$D/done$1" "$D/ps$1"
  printf '{"v":1,"launch_id":"%s","event":"start","step":%s,"t":%s,"shell_pid":%s,%s}\n' "$L" "$1" "$(_now)" "$$" "$4" >> "$J"
  FORENSICS_STEP=$5 TIMEOUT "$SH" -c 'eval "$FORENSICS_STEP"' > "$D/out$1" 2>&1 < /dev/null &
  _p=$!
  printf '{"v":1,"launch_id":"%s","event":"pid","step":%s,"pid":%s,"t":%s}\n' "$L" "$1" "$_p" "$(_now)" >> "$J"
  ( _i=0
    while [ "$_i" -lt "$3" ]; do [ -f "$D/done$1" ] && exit 0; kill -0 "$_p" $$ 2>/dev/null || exit 0; sleep 0.1; _i=$((_i+1)); done
    [ -f "$D/done$1" ] || ps -ww -e -o pid=,ppid=,pgid=,stat=,wchan:32=,etimes=,args= 2>/dev/null | awk -v g="$_p" '$3==g' > "$D/ps$1"
  ) > /dev/null 2>&1 < /dev/null &
  wait "$_p"; _rc=$?
  : > "$D/done$1"
  printf '{"v":1,"launch_id":"%s","event":"end","step":%s,"pid":%s,"t":%s,"rc":%s,"tail":"%s","waiting_on":"%s"}\n' "$L" "$1" "$_p" "$(_now)" "$_rc" "$(_esc "$D/out$1")" "$(_esc "$D/ps$1")" >> "$J"
  return "$_rc"
}
_i1() {
  printf '{"v":1,"launch_id":"%s","event":"start","step":%s,"t":%s,"shell_pid":%s,%s}\n' "$L" "$1" "$(_now)" "$$" "$2" >> "$J"
  eval "$3"; _rc=$?
  printf '{"v":1,"launch_id":"%s","event":"end","step":%s,"pid":%s,"t":%s,"rc":%s,"tail":"","waiting_on":""}\n' "$L" "$1" "$$" "$(_now)" "$_rc" >> "$J"
  return "$_rc"
}
_srv() {
  printf '{"v":1,"launch_id":"%s","event":"start","step":%s,"t":%s,"shell_pid":%s,%s}\n' "$L" "$1" "$(_now)" "$$" "$2" >> "$J"
  SETSID "$SH" -c "$MON" forensics-monitor "$1" "$3" > /dev/null 2>&1 < /dev/null &
  printf '{"v":1,"launch_id":"%s","event":"spawned","step":%s,"pid":%s,"t":%s}\n' "$L" "$1" "$!" "$(_now)" >> "$J"
  return 0
}
"""


def _fields(step: Step, kind: str, cmd: str, deadline: float | None) -> str:
    """The journal's fields of a step (what is recorded, not what runs: the step's text is
    passed to the wrapper beside them), its secrets redacted (parsers/secrets.py): the
    journal beside the log never holds a chain's `--api-key X`."""
    from forensics_parsers.secrets import redact

    obj: dict[str, Any] = {"kind": kind, "cmd": redact(cmd), "orig": redact(step.text)}
    if deadline is not None:
        obj["deadline_s"] = deadline
    return json.dumps(obj, ensure_ascii=True)[1:-1]


def build_wrapper(
    run: Chain,
    orig: Chain,
    *,
    journal: str,
    work_dir: str,
    launch_id: str,
    step_deadline: float,
    pid_path: str | None,
    has_timeout: bool = True,
    has_setsid: bool = True,
) -> str:
    """The POSIX-sh wrapper that runs ``run`` step by step, journaling each step.

    ``orig`` is the user's chain (same steps, before safe-pattern/simulator substitution);
    its step texts go into the journal as ``orig``.
    """
    srv = server_step(run)
    origs = {s.index: s for s in orig.steps}
    ticks = max(1, int(step_deadline * 10 * 0.8))
    head = [
        f"J={shlex.quote(journal)}",
        f"D={shlex.quote(work_dir)}",
        f"L={shlex.quote(launch_id)}",
        "SH=sh",
        f"PF={shlex.quote(pid_path or '')}",
        "export J D L SH PF",
        _ESC.replace("TAILB", str(TAIL_BYTES)),
    ]
    mon = _ESC.replace("TAILB", str(TAIL_BYTES)) + _MONITOR
    head.append(f"MON={shlex.quote(mon)}")
    # a step's text reaches its shell by the environment, not in argv: `timeout` (and the
    # `sh -c`) carried it in theirs, so a `pkill -f` of the step matched timeout, which relays
    # the signal to its process group, the pkill in it; where the pids had wrapped, pkill
    # reached timeout before the launching shell, died, and the self-kill did not happen
    # (the chain went on to its server). In the user's chain only the launching shell and
    # its subshells carry the chain's text, as here.
    funcs = _FUNCS.replace(
        "TIMEOUT", f'timeout -k {KILL_AFTER_S} "$2"' if has_timeout else ""
    ).replace("SETSID", "setsid" if has_setsid else "")
    head.append(funcs)
    body: list[str] = []
    for lst in run.and_or_lists():
        items: list[str] = []
        for s in lst:
            o = origs.get(s.index, s)
            kind = step_kind(o, srv)
            text = s.text
            if srv is not None and s.index == srv.index:
                text = _strip_setsid(s)
                item = f"_srv {s.index} {shlex.quote(_fields(o, 'server', text, None))} " + (
                    shlex.quote(text)
                )
            elif _inline(s):
                item = (
                    f"_i1 {s.index} {shlex.quote(_fields(o, kind, text, None))} {shlex.quote(text)}"
                )
            else:
                item = (
                    f"_j {s.index} {step_deadline:g} {ticks} "
                    f"{shlex.quote(_fields(o, kind, text, step_deadline))} {shlex.quote(text)}"
                )
            items.append(item)
            if s.connector in ("&&", "||"):
                items.append(s.connector)
        line = " ".join(items)
        if lst and lst[-1].background:
            line = "{ " + line + "; } &"
        body.append(line)
    body.append("wait")
    return "\n".join(head + body) + "\n"


def _inline(step: Step) -> bool:
    cmd = step.command
    if cmd is None or len(step.commands) != 1:
        return False
    if not cmd.argv and cmd.assignments:
        return True
    return bool(cmd.argv) and cmd.argv[0] in INLINE_PROGRAMS


def _strip_setsid(step: Step) -> str:
    """The server step's text without a leading ``setsid`` (the monitor gives it its own
    session, and a second setsid would move the server out of the recorded group)."""
    m = re.match(r"^(\s*(?:\w+=\S*\s+)*)setsid\s+(?:-[a-z]+\s+)*", step.text)
    return step.text if not m else m.group(1) + step.text[m.end() :]


def build_supervisor(
    *, journal: str, work_dir: str, launch_id: str, shell: str, begin: dict[str, Any]
) -> str:
    from forensics_parsers.secrets import redact_data

    fields = json.dumps(redact_data(begin), ensure_ascii=True)[1:-1]  # as _fields: recorded
    d = shlex.quote(work_dir)
    return (
        f"J={shlex.quote(journal)}\nL={shlex.quote(launch_id)}\n"
        'printf \'{"v":1,"launch_id":"%s","event":"begin","t":%s,"pid":%s,%s}\\n\' '
        f'"$L" "$(date +%s.%N)" "$$" {shlex.quote(fields)} >> "$J"\n'
        # read, then removed: they hold the chain's secrets as typed (it runs with them)
        f'w="$(cat {d}/wrapper.sh)"; c="$(cat {d}/chain.txt)"; rm -f {d}/wrapper.sh {d}/chain.txt\n'
        f'{shlex.quote(shell)} -c "$w" forensics-replay "$c"\n'
        "rc=$?\n"
        'printf \'{"v":1,"launch_id":"%s","event":"exit","t":%s,"rc":%s}\\n\' '
        '"$L" "$(date +%s.%N)" "$rc" >> "$J"\n'
    )


# --------------------------------------------------------------------------- diagnosis
