"""parsers/shell.py: a typed chain -> steps, keeping operators, quoting and redirections."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from forensics_parsers.shell import (
    launching_command_line,
    parse_chain,
    shell_script,
    steps_frame,
    unwrap,
)

SEED = (
    'pkill -f "sglang.launch_server" && sleep 2 && pkill -9 -f python3; sleep 3 && \\\n'
    "fuser -k /dev/nvidia* 2>/dev/null; sleep 3 && \\\n"
    'nohup bash -c "python3 -m sglang.launch_server --model-path ... --speculative-algorithm '
    "EAGLE3 \\\n  --speculative-draft-model-path /data/eagle3/output_10k_sglang/4 "
    '--speculative-num-steps 2 \\\n  --speculative-eagle-topk 4 --speculative-num-draft-tokens 5 ..." \\\n'
    "  > /data/eagle3/sglang_eagle3_cg_2step.log 2>&1 &"
)


def test_seed_chain_steps_operators_and_background():
    chain = parse_chain(SEED)
    assert [s.text.split()[0] for s in chain.steps] == [
        "pkill", "sleep", "pkill", "sleep", "fuser", "sleep", "nohup",
    ]  # fmt: skip
    assert [s.connector for s in chain.steps] == ["&&", "&&", ";", "&&", ";", "&&", "&"]
    # `&` backgrounds the whole and-or list `sleep 3 && nohup ...`
    assert [s.background for s in chain.steps] == [False] * 5 + [True, True]
    assert [s.list_index for s in chain.steps] == [0, 0, 0, 1, 1, 2, 2]
    assert chain.warnings == []


def test_quotes_removed_in_argv_but_kept_in_text():
    chain = parse_chain(SEED)
    first = chain.steps[0]
    assert first.command.argv == ["pkill", "-f", "sglang.launch_server"]
    assert first.text == 'pkill -f "sglang.launch_server"'
    assert chain.text[first.start : first.end] == first.text


def test_redirections_with_fd_and_dup():
    chain = parse_chain(SEED)
    fuser = chain.steps[4].command
    assert fuser.argv == ["fuser", "-k", "/dev/nvidia*"]
    assert [(r.fd, r.op, r.target) for r in fuser.redirects] == [(2, ">", "/dev/null")]
    server = chain.steps[6].command
    assert [(r.fd, r.op, r.target) for r in server.redirects] == [
        (None, ">", "/data/eagle3/sglang_eagle3_cg_2step.log"),
        (2, ">&", "1"),
    ]
    assert server.stdout_target() == "/data/eagle3/sglang_eagle3_cg_2step.log"


def test_bash_c_nesting_and_wrappers():
    server = parse_chain(SEED).steps[6].command
    inner, wrappers = unwrap(server.argv)
    assert wrappers == ["nohup"]
    assert inner[:2] == ["bash", "-c"]
    script = shell_script(server.argv)
    assert script.startswith("python3 -m sglang.launch_server --model-path ...")
    # the line continuations inside the double quotes are removed, as bash does
    assert "\\\n" not in script and "--speculative-num-steps 2" in script


def test_or_pipe_append_stdin_and_assignments():
    chain = parse_chain(
        "A=1 B='x y' cmd --flag </dev/null >>log.txt 2>&1 || echo 'a;b' | tee -a f; x&"
    )
    s1, s2, s3 = chain.steps
    assert s1.connector == "||" and s2.connector == ";" and s3.connector == "&"
    assert s1.command.assignments == {"A": "1", "B": "x y"}
    assert s1.command.argv == ["cmd", "--flag"]
    assert s1.command.stdin_target() == "/dev/null"
    assert s1.command.stdout_target() == "log.txt"
    assert [c.argv for c in s2.commands] == [["echo", "a;b"], ["tee", "-a", "f"]]
    assert s3.background and not s1.background


def test_groups_subshells_and_command_substitution_stay_one_step():
    chain = parse_chain("(cd /x && make) ; kill $(pgrep -f 'a;b') && { echo 1; echo 2; }")
    assert [s.text for s in chain.steps] == [
        "(cd /x && make)",
        "kill $(pgrep -f 'a;b')",
        "{ echo 1; echo 2; }",
    ]


def test_unterminated_quote_is_a_warning_not_a_crash():
    chain = parse_chain('echo "abc && rm x')
    assert len(chain.steps) == 1
    assert any("unterminated" in w for w in chain.warnings)


def test_launching_command_line_is_shell_dash_c_chain():
    assert launching_command_line("a && b", "bash") == "bash -c a && b"


def test_steps_frame_columns():
    df = steps_frame(parse_chain(SEED))
    assert df.height == 7
    assert df["program"].to_list()[-1] == "bash"
    assert json.loads(df["redirects"][4]) == ["2>/dev/null"]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab \"'\\$()`{}|&;<>#\n=-2*")), max_size=60))
def test_parse_never_crashes_and_texts_are_slices(text):
    chain = parse_chain(text)
    for s in chain.steps:
        assert text[s.start : s.end] == s.text
        assert s.connector in (None, "&&", "||", ";", "&")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_parse_never_crashes_on_any_text(text):
    parse_chain(text)


def test_unterminated_quote_inside_command_substitution():
    """Found by hypothesis: `$("` used to recurse forever."""
    for text in ['$("', '"$("', '$($("', "${", '"`']:
        chain = parse_chain(text)
        assert [s.text for s in chain.steps] == [text]
