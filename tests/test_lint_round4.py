"""Issue 14, class "Lint misses dangerous steps", fourth round (hidden-suite rehearsal): the
shell reads a step before it runs it, and so must lint. One mechanism each:

- words as bash builds them (parsers/shell_lexer.py): ANSI-C quotes ``$'\\x6b'ill``,
  here-documents and here-strings read as the command's stdin (``Redirect.body``), never as
  commands of the chain (``cat <<EOF … kill -9 -1 … EOF`` is text);
- what stands before a command (parsers/shell.py ``_command_start``, keywords from
  shell_syntax): ``then``/``do``/``else``/``!``/``coproc``, function headers, case items;
- what the shell expands (``resolve_words``): ``${IFS}``, ``for NAME in``, ``read NAME <<<``,
  ``$(echo …)``;
- scripts a shell reads from stdin (``stdin_scripts``: here-docs, ``echo … | sh``);
- kill targets from a pipeline (forensics/kills.py ``PID_SOURCES``, ``piped_argv``) and rows
  (MASS_KILLS: rmmod/modprobe nvidia; MASS_WRITES: /proc/sysrq-trigger; WRAPPERS: busybox,
  watch; hazards.REMOVER_FORMS: find -delete).
"""

from __future__ import annotations

import pytest

from forensics.lint import lint, replay_blockers
from forensics_parsers.shell import parse_chain

SERVER = (
    "setsid nohup python3 -m sglang.launch_server --model-path /models/k2 --port 1 "
    "</dev/null >>/data/logs/a.log 2>&1 &"
)


def _errors(step: str) -> set[str]:
    return {f.id for f in lint(f"{step}\n{SERVER}") if f.severity == "error"}


@pytest.mark.parametrize(
    "step",
    [
        r"kill${IFS}-9${IFS}-1",
        r"kill$IFS-9$IFS-1",
        r"$'\x6b'ill -9 -1",
        r"$'\153\151\154\154' -9 -1",
        "$'kill' -9 -1",
        "if true; then kill -9 -1; fi",
        "if false; then :; else killall5; fi",
        "while :; do kill -9 -1; done",
        "case x in x) killall5;; esac",
        "! kill -9 -1",
        "sleep() { kill -9 -1; }; sleep 1",
        "function nuke { killall5 -9; }; nuke",
        "bash <<< 'kill -9 -1'",
        "bash <<EOF\nkill -9 -1\nEOF",
        "sh <<-'X'\n\tkillall5\n\tX",
        "echo 'kill -9 -1' | sh",
        "printf 'kill -9 -1\\n' | bash -s",
        "echo -1 | xargs kill -9",
        "eval \"$(printf 'kill -9 -1')\"",
        "busybox kill -9 -1",
        "busybox reboot",
        "echo b > /proc/sysrq-trigger",
        "echo o | sudo tee /proc/sysrq-trigger",
        "rmmod nvidia",
        "sudo modprobe -r nvidia_uvm",
        "docker kill $(docker ps -q)",  # every container (lead, after round 4)
        "docker stop $(docker ps -aq)",
        "sudo docker rm -f $(sudo docker ps -aq)",
        "podman container rm -f `podman ps -aq`",
        "nerdctl restart $(nerdctl container ls -q)",
    ],
)
def test_hidden_spellings_of_mass_kills_are_errors(step):
    assert "mass-kill" in _errors(step)
    # and a replay refuses it
    assert any(f.id == "mass-kill" for f in replay_blockers(f"{step}\n{SERVER}"))


@pytest.mark.parametrize(
    "step",
    [
        "coproc pkill -9 -f python",
        "watch -n 1 pkill -f python",
        "for p in $(pgrep python); do kill -9 $p; done",
        "kill -9 `pidof python3`",
        "ps aux | grep python | awk '{print $2}' | xargs kill -9",
        "read -r x <<< pkill; $x -f python",
        "bash -c \"$(echo 'pkill -9 -f python')\"",
        "cleanup() { pkill -9 -f python; }; cleanup",
    ],
)
def test_hidden_pattern_kills_are_errors(step):
    assert _errors(step) & {"broad-kill", "cleanup-self-kill"}, step


@pytest.mark.parametrize(
    "step",
    [
        "cat <<EOF\nkill -9 -1\nEOF",  # a here-document is text for cat, not a command
        "cat <<'X'\nreboot\nX",
        "cat <<< 'kill -9 -1'",
        "echo 'kill -9 -1' | tee notes.txt",
        "cat pids.txt | grep 123 | xargs kill",  # no ps listing: not a pattern over processes
        "echo reboot",
        "docker kill sglang-old",  # one named container
        "docker stop $(cat old.cid)",
        "docker ps -q",
    ],
)
def test_text_that_only_mentions_a_kill_is_not_one(step):
    assert not _errors(step) & {"mass-kill", "broad-kill", "cleanup-self-kill"}, step


@pytest.mark.parametrize(
    "chain",
    ["declare -a x=(1 2)", "local -a y=(a) z=(b)", "case a in (a) b;; (c) d;; esac"],
)
def test_valid_bash_is_no_syntax_error(chain):
    assert parse_chain(chain).errors == []


def test_a_here_document_never_becomes_steps():
    chain = parse_chain("cat <<EOF > /tmp/x\nline one\nkill -9 -1\nEOF\necho done")
    assert [s.text.split()[0] for s in chain.steps] == ["cat", "echo"]
    assert chain.steps[0].commands[0].redirects[0].body == "line one\nkill -9 -1\n"


@pytest.mark.parametrize(
    "step", ["find /models/k2 -delete", "find /models -name k2 -exec rm -rf {} +"]
)
def test_find_that_deletes_the_model_is_refused(step):
    found = replay_blockers(f"{step}; {SERVER}")
    assert [f.id for f in found] == ["removes-launch-input"]
    assert not replay_blockers(f"find /models/k2 -name '*.tmp' -print; {SERVER}")
