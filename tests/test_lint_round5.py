"""Issue 14, class "Lint misses dangerous steps", fifth round (hidden-suite rehearsal). One
mechanism per kind of miss:

- commands that run another command, or a script they are given, are rows of
  ``shell_runners.WRAPPERS`` carrying how (``script``: ``flock F -c``, ``env -S``, ``su -c``,
  ``runuser -c``, ``script -c``, ``watch``, ``eval``, ``ssh``, ``parallel CMD ::: ARGS``,
  ``find -exec``, ``tmux new-session``/``send-keys``, ``screen -X stuff``; exec rows: chroot,
  unshare, nsenter, srun, systemd-run, screen -dm; ``stdin_args``: xargs, parallel);
- what ``xargs``/``parallel`` reads from a pipe is the pipeline before it as a substitution
  (``kills.piped_argv``): ``docker ps -q | xargs docker kill`` is ``docker kill $(docker ps -q)``;
- kills of what a listing of every process names (``kills.MASS_KILLS`` "kill $(ps …)":
  ``ps``, ``ls /proc``, ``find /proc`` or ``/`` with no filter) and of every GPU user
  (``kills.GPU_KILLS`` rows: fuser -k, kill of a GPU-holder listing).

Nothing here runs a chain: lint only reads text.
"""

from __future__ import annotations

import pytest

from forensics.lint import lint, replay_blockers
from forensics_parsers.shell import parse_chain, runner_script, unwrap

SERVER = (
    "setsid nohup python3 -m sglang.launch_server --model-path /models/k2 --port 1 "
    "</dev/null >>/data/logs/a.log 2>&1 &"
)


def _errors(step: str) -> set[str]:
    return {f.id for f in lint(f"{step}\n{SERVER}") if f.severity == "error"}


RUNNERS = [
    "timeout 5 kill -9 -1",
    "env -S 'kill -9 -1'",
    "env -S'kill -9 -1'",
    "env --split-string='kill -9 -1'",
    "su - root -c 'kill -9 -1'",
    "runuser -u root -- kill -9 -1",
    "runuser -l root -c 'kill -9 -1'",
    "flock /tmp/l kill -9 -1",
    "flock /tmp/l -c 'kill -9 -1'",
    "flock -x /tmp/l -c 'killall5'",
    "nice -10 kill -9 -1",
    "chroot / kill -9 -1",
    "chroot / sh -c 'kill -9 -1'",
    "unshare --fork --pid kill -9 -1",
    "nsenter -t 1 -m -p kill -9 -1",
    "srun -N 1 kill -9 -1",
    "systemd-run --user --scope kill -9 -1",
    "systemd-run -p X=1 --unit foo killall5",
    "watch -n1 'kill -9 -1'",
    "time -p kill -9 -1",
    "script -q -c 'kill -9 -1' /dev/null",
    "ssh -o StrictHostKeyChecking=no host 'kill -9 -1'",
    "tmux new-session -d 'kill -9 -1'",
    "tmux new -d -s x 'killall5'",
    "tmux run-shell 'kill -9 -1'",
    "tmux send-keys -t 0 'kill -9 -1' Enter",
    "screen -dmS x kill -9 -1",
    "screen -S x -X stuff 'kill -9 -1\\n'",
    "parallel kill -9 ::: -1",
    "parallel -j0 'kill -9 {}' ::: -1",
    "parallel ::: 'kill -9 -1'",
    "parallel -j2 ::: reboot",
    "find . -exec sh -c 'kill -9 -1' \\;",
    "find . -maxdepth 0 -exec reboot \\;",
    # kills of every process a listing names
    "find /proc -maxdepth 1 -name '[0-9]*' -exec kill -9 {} +",
    "find / -name x -exec kill -9 {} +",
    "find / -name x -execdir kill -9 {} \\;",
    "find / -name x -ok kill {} \\;",
    "kill -9 $(ps -e -o pid=)",
    "kill -9 $(ps -u root -o pid=)",
    "kill -9 $(ps aux | awk '{print $2}')",
    "ps -eo pid | xargs kill -9",
    "ps aux | awk '{print $2}' | parallel kill -9",
    "skill -KILL -u root",
    # every container
    "docker ps -q | xargs docker kill",
    "docker ps -q | xargs -r -n1 docker stop",
    "docker ps -aq | xargs docker rm -f",
    "podman ps -q | xargs podman kill",
    "docker ps --format '{{.ID}}' | xargs docker kill",
    "docker kill `docker ps -q`",
    "podman rm -af",
    "podman kill --all",
    "nerdctl stop -a",
]


@pytest.mark.parametrize("step", RUNNERS)
def test_commands_run_by_other_commands_are_seen(step):
    assert "mass-kill" in _errors(step), step
    assert any(f.id == "mass-kill" for f in replay_blockers(f"{step}\n{SERVER}"))


@pytest.mark.parametrize(
    "step",
    [
        "parallel -j0 kill -9 {} ::: $(pgrep python)",
        "parallel --jobs 4 kill -9 ::: $(pgrep -f python)",
        "parallel pkill -f ::: python",
        "pgrep python | parallel kill -9",
        "find /proc -name stat -exec pkill -f python \\;",
        "find . -exec bash -c 'pkill -9 -f python' {} +",
        "srun -N1 -n1 pkill -9 -f python",
        "tmux new -d 'pkill -9 -f python'",
        "stdbuf -oL pkill python3",
    ],
)
def test_pattern_kills_run_by_other_commands_are_seen(step):
    assert _errors(step) & {"broad-kill", "cleanup-self-kill"}, step


@pytest.mark.parametrize(
    "step",
    [
        "fuser -k /dev/nvidia*",
        "fuser -kv /dev/nvidia*",
        "fuser --kill /dev/nvidia0",
        "sudo fuser -k -9 /dev/nvidia*",
        "lsof -t /dev/nvidia* | xargs kill -9",
        "kill -9 $(lsof -t /dev/nvidia*)",
        "kill -9 $(fuser /dev/nvidia* 2>/dev/null)",
        "kill -9 $(nvidia-smi --query-compute-apps=pid --format=csv,noheader)",
        "nvidia-smi --query-compute-apps=pid --format=csv,noheader | xargs kill -9",
        "for p in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader); do kill -9 $p; done",
        "bash -c 'fuser -k /dev/nvidia*'",
    ],
)
def test_kills_of_every_gpu_user(step):
    assert "gpu-collateral-kill" in _errors(step), step


@pytest.mark.parametrize(
    "step",
    [
        "kill $SERVER_PID",
        "kill -TERM -- -$PGID",
        "kill $(cat /tmp/server.pid)",
        "parallel kill ::: -1",  # `kill -1`: -1 is a signal there, with no pid: kill refuses
        "parallel echo ::: a b",
        "parallel -j2 gzip ::: a.log b.log",
        "find /tmp -name '*.log' -exec cat {} +",
        "kill $(ps -o pid= -p $SERVER_PID)",  # ps of one pid
        "docker kill mycontainer",
        "docker rm -f sglang-old",
        "docker ps -q | wc -l",
        "timeout 5 true",
        "ssh host uptime",
        "srun hostname",
        "tmux new-session -d -s x 'sleep 1'",
        "tmux send-keys -t 0 'ls' Enter",
        "screen -dmS x sleep 1",
        "screen -X stuff 'ls\\n'",
        "systemd-run --user true",
        "watch -n1 nvidia-smi",
        "env -S 'echo hi'",
        "flock /tmp/l true",
        "fuser -v /dev/nvidia*",
        "lsof -t /dev/nvidia*",
        "nvidia-smi --query-compute-apps=pid --format=csv",
    ],
)
def test_near_misses_stay_clean(step):
    assert not _errors(step), step


def test_a_runner_script_is_what_the_shell_would_run():
    assert runner_script(["flock", "/tmp/l", "-c", "kill -9 -1"]) == "kill -9 -1"
    assert runner_script(["nohup", "env", "-S", "pkill x"]) == "pkill x"
    assert (
        runner_script(["parallel", "kill", "-9", "{}", ":::", "1", "2"]) == "kill -9 1\nkill -9 2"
    )
    # find's {} stands for its listing, as a substitution the kill rules read
    assert runner_script(["find", "/proc", "-exec", "kill", "{}", ";"]) == "kill $(find /proc)"
    assert runner_script(["flock", "/tmp/l", "python3", "-c", "x"]) is None  # python's -c
    # an exec runner stays a wrapper: the command after it is what runs
    assert unwrap(["screen", "-dmS", "x", "kill", "-9", "-1"]) == (["kill", "-9", "-1"], ["screen"])
    assert unwrap(["chroot", "/", "kill"]) == (["kill"], ["chroot"])


def test_the_pipe_into_xargs_is_a_substitution():
    chain = parse_chain("docker ps -q | xargs -r docker kill")
    from forensics.kills import piped_argv

    assert piped_argv(chain.steps[0].commands, 1) == ["docker", "kill", "$(docker ps -q)"]


@pytest.mark.parametrize(
    "step",
    [
        "source <(echo 'kill -9 -1')",
        ". <(printf 'killall5\\n')",
        "bash <(echo reboot)",
        "sh <(echo 'kill -9 -1')",
        "bash < <(echo 'kill -9 -1')",
        "source /dev/stdin <<< 'kill -9 -1'",
        ". /dev/stdin <<< 'killall5'",
        "echo 'kill -9 -1' | bash /dev/stdin",
        "at now <<< 'kill -9 -1'",
        "echo 'kill -9 -1' | at now",
        "batch <<< 'reboot'",
    ],
)
def test_scripts_fed_to_a_shell_by_process_substitution_or_stdin(step):
    assert "mass-kill" in _errors(step), step


@pytest.mark.parametrize(
    "step",
    [
        ". <(curl -s http://x/kill.sh)",
        "source <(curl -fsSL https://x/setup.sh)",
        "bash <(wget -qO- http://x/k.sh)",
        "curl -s http://x/k.sh | bash",
        "curl -s http://x/k.sh | sudo bash -s",
        "wget -qO- http://x | sh",
        "bash -c 'curl -s http://x | sh'",
    ],
)
def test_a_downloaded_script_run_by_a_shell_is_refused(step):
    assert "runs-fetched-script" in _errors(step), step
    assert "runs-fetched-script" in {f.id for f in replay_blockers(f"{step}\n{SERVER}")}


@pytest.mark.parametrize(
    "step",
    [
        "source <(conda shell.bash hook)",  # a local program's output: what it prints is its own
        "bash <(echo echo hi)",
        "source ~/.bashrc",
        ". /etc/profile",
        "curl -fsSLo setup.sh http://x/setup.sh",
        "curl -s http://x/health | grep ok",
        "echo hi | at now",
    ],
)
def test_scripts_read_by_shells_near_misses(step):
    assert not _errors(step), step


# Secrets other programs take on their command line: one row each of
# parsers/secrets.py SECRET_OPTIONS (or a key of SECRET_KEY), redacted by the parser's one
# `redact`, which every finding goes through (forensics/finding.py).
CHAIN_SECRETS = [
    ("mysql -pR5mysqlPw -e 'select 1'", "R5mysqlPw"),
    ("mysql -u root -p'R5 quoted' db", "R5 quoted"),
    ("mysqldump -pR5dumpPw db > x.sql", "R5dumpPw"),
    ("mysql --password=R5longPw db", "R5longPw"),
    ("PGPASSWORD=R5pgPw psql -h x", "R5pgPw"),
    ("MYSQL_PWD=R5mysqlPwd mysql", "R5mysqlPwd"),
    ("sshpass -p R5sshPw ssh host uptime", "R5sshPw"),
    ("sshpass -pR5sshGlued ssh host uptime", "R5sshGlued"),
    ("curl -u user:R5curlPw http://x", "R5curlPw"),
    ("curl --user=user:R5curlUser http://x", "R5curlUser"),
    ("curl -uuser:R5curlGlued http://x", "R5curlGlued"),
    ("curl -H 'Authorization: Bearer R5bearerTok' http://x", "R5bearerTok"),
    ("curl -H 'Cookie: session=R5cookie' http://x", "R5cookie"),
    ("curl -H 'X-Auth-Token: R5xauth' http://x", "R5xauth"),
    ("curl --oauth2-bearer R5oauth http://x", "R5oauth"),
    ("wget --http-password=R5wgetPw http://x", "R5wgetPw"),
    ("redis-cli -a R5redisPw ping", "R5redisPw"),
    ("ldapsearch -x -w R5ldapPw -D cn=x", "R5ldapPw"),
    ("docker login -u x -p R5dockerPw", "R5dockerPw"),
    ("openssl enc -pass pass:R5osslPw -in x", "R5osslPw"),
    ("smbclient -U user%R5smbPw //h/s", "R5smbPw"),
    ("htpasswd -b .htpasswd user R5htPw", "R5htPw"),
    ("git clone https://user:R5gitPw@github.com/x", "R5gitPw"),
]


@pytest.mark.parametrize(("cmd", "secret"), CHAIN_SECRETS)
def test_lint_never_prints_a_password_given_on_a_command_line(cmd, secret):
    from click.testing import CliRunner

    from forensics.cli import cli

    # the step that holds it is quoted by a finding: a group with a mass kill
    chain = f"{{ {cmd}; kill -9 -1; }}\n{SERVER}"
    for args in (["lint", "--shell", chain], ["lint", "--shell", chain, "--json"]):
        res = CliRunner().invoke(cli, args)
        assert res.exit_code == 1, res.output
        assert secret not in res.output
        assert "redacted:" in res.output or "***@" in res.output  # URLs are masked on output
    # and a refused replay's message
    blocked = replay_blockers(chain)
    assert blocked and all(secret not in f.text + f.explanation for f in blocked)


def test_the_parser_redacts_the_same_options_in_a_log():
    import polars as pl

    from forensics_parsers.secrets import redact_lines

    lines = pl.Series([cmd for cmd, _ in CHAIN_SECRETS])
    out, changed, _ = redact_lines(lines)
    assert changed == len(CHAIN_SECRETS)
    for text, (_, secret) in zip(out.to_list(), CHAIN_SECRETS):
        assert secret not in text


def test_options_that_are_no_password_stay():
    from forensics_parsers.secrets import redact

    for text in (
        "mysql -p -e 'select 1'",  # a lone -p prompts
        "mysql -P 3306 -h db",
        "curl -u user http://x",  # no password given: curl prompts
        "ssh -p 22 host",
        "docker run -p 8000:8000 img",
        "ldapsearch -x -W -D cn=x",
    ):
        assert redact(text) == text, text


@pytest.mark.parametrize(
    "step",
    [
        "rm -rf /",
        "rm -rf /*",
        "sudo rm -rf /data",
        "rm -rf ~",
        "rm -rf $HOME",
        "rm -rf /home/alice",
        "rm -rf ~/.cache",
        "rm -rf ~/.cache/huggingface",
        "rm -rf $HOME/.cache/huggingface/hub",
        "rm -rf ~/.cache/huggingface/hub/*",
        "rm -rf /root/.cache/huggingface",
        "rm -rf $HF_HOME",
        "rm -rf ${HF_HOME}/hub",
        'rm -rf "$HF_HOME"/*',
        "rm -rf $TRANSFORMERS_CACHE",
        "rm -rf ~/.cache/torch",
        "rm -fr /data/models",
        "rm -rf ../models",
        "rm --recursive --force /srv/checkpoints",
        "find ~/.cache/huggingface -delete",
        "find / -name '*.safetensors' -delete",
        "shred -u /tmp/w/model.safetensors",
        "H=~/.cache/huggingface; rm -rf $H",
        "bash -c 'rm -rf ~/.cache/huggingface'",
    ],
)
def test_mass_deletes_of_shared_data_are_errors(step):
    assert "removes-shared-data" in _errors(step), step
    assert "removes-shared-data" in {f.id for f in replay_blockers(f"{step}\n{SERVER}")}


@pytest.mark.parametrize(
    "step",
    [
        "rm -rf /tmp/old-logs",
        "rm -f /data/logs/a.log.old",
        "rm -rf /data/logs/old",
        "rm -rf $HOME/tmp",
        "rm -rf ./build",
        "rm -rf /tmp/x/.cache",
        "rm -rf ~/.cache/huggingface/hub/models--org--name",  # one model of the cache
        "rm -rf ./models/old-run",
        "rm -f /models/k2/*.tmp",
        "find /models/k2 -name '*.tmp' -delete",
        "find / -name core -delete",
        "rm -f x.safetensors.tmp",
        "rm -rf ~/.triton/cache",  # a compile cache: a known fix, rebuilt at the next start
        "rm -rf ~/.cache/flashinfer",
    ],
)
def test_removals_of_one_runs_files_stay_clean(step):
    assert not _errors(step), step


def test_a_self_kill_excerpt_never_cuts_a_secret_out_of_its_context():
    """The self-kill finding quotes a window of the launching shell's command line; cut from
    the raw text, the window held `…-pS3cret -e x; pkill…` without the `mysql` that marks it."""
    chain = "mysql -pR5cutPw -e x; pkill -f python; python3 -m sglang.launch_server --port 1"
    found = [f for f in lint(chain) if f.id == "cleanup-self-kill"]
    assert found and all("R5cutPw" not in f.explanation for f in found)
    assert "»" in found[0].explanation  # the end of the mark is in the window
    # a pattern that matches only inside the secret (on the raw line): the window is «redacted»
    only = lint("mysql -pR5onlyPw x; pkill -f 'R5only[P]w'; python3 -m sglang.launch_server")
    kills = [f for f in only if f.id == "cleanup-self-kill"]
    assert kills and all("R5onlyPw" not in f.explanation for f in kills)
    assert "(«redacted»" in kills[0].explanation.replace("'", "")


def test_many_here_documents_are_read_once_each():
    """4,000 here-documents: each body found by its token's index (it was a list search per
    document, quadratic: the probe's case ran past 30 s)."""
    chain = parse_chain("".join(f"cat <<E{i}\nline {i}\nE{i}\n" for i in range(4000)))
    assert len(chain.steps) == 4000
    assert chain.steps[3999].commands[0].redirects[0].body == "line 3999\n"


@pytest.mark.parametrize(
    "step",
    [
        # more runners (WRAPPERS rows) and shells
        "pkexec kill -9 -1",
        "setpriv --reuid=0 kill -9 -1",
        "capsh -- -c 'kill -9 -1'",
        "sg wheel -c 'kill -9 -1'",
        "pdsh -w host kill -9 -1",
        "clush -w host 'kill -9 -1'",
        "mpirun -np 2 kill -9 -1",
        "fish -c 'kill -9 -1'",
        "bash -s -- arg <<< 'kill -9 -1'",
        # what xargs reads from its own stdin
        "xargs kill -9 <<< -1",
        "xargs -I{} kill -9 {} <<< -1",
        "printf -- '-1' | xargs kill -9",
        # inverse selections, the chain's own group, init, sessions, system daemons
        "pkill -9 -v sglang",
        "pgrep -v x | xargs kill",
        "kill -- -$(ps -o pgid= -p $$ | tr -d ' ')",
        "kill -9 1",
        "kill -INT 1",
        "loginctl terminate-user root",
        "loginctl kill-user root",
        "pkill sshd",
        "killall -9 sshd",
        "killall dockerd",
        "pkill nvidia-persistenced",
        "pkill -f /usr/sbin",
        # interpreters' inline code (shell_scripts.INLINE_CODE)
        "python3 -c 'import os; os.kill(-1, 9)'",
        "python3.11 -c 'import os; os.kill(-1, 9)'",
        "python -c 'import os,signal; os.killpg(0, signal.SIGKILL)'",
        "python3 -c \"import os; os.system('kill -9 -1')\"",
        'python3 -c \'import subprocess; subprocess.run(["killall5", "-9"])\'',
        "perl -e 'kill 9, -1'",
        "perl -e 'kill KILL => -1'",
        "perl -e 'system(\"killall5 -9\")'",
        "ruby -e 'Process.kill(:KILL, -1)'",
        "node -e 'process.kill(-1, \"SIGKILL\")'",
    ],
)
def test_more_runners_selections_and_inline_code(step):
    assert "mass-kill" in _errors(step), step


@pytest.mark.parametrize(
    "step",
    [
        "python3 -c 'print(1)'",
        "python3 -c 'import os; os.kill(12345, 0)'",
        "python3 -c 'import subprocess; subprocess.run([\"nvidia-smi\"])'",
        "perl -e 'print 1'",
        "node -e 'console.log(1)'",
        "python3 bench.py -c 4",
        "pkill -f sglang.launch_server_old",
        "killall ssh",  # ssh clients by name, not sshd
        "kill -1 $PID",  # -1 is the signal (HUP) there
        "xargs -a pids.txt kill",
        "docker kill -s HUP mycontainer",
    ],
)
def test_more_near_misses(step):
    assert not _errors(step) & {"mass-kill", "broad-kill"}, step


@pytest.mark.parametrize(
    "step",
    [
        "echo 1 > /sys/bus/pci/devices/0000:3b:00.0/remove",
        "echo 0000:3b:00.0 | sudo tee /sys/bus/pci/drivers/nvidia/unbind",
        "dd if=/dev/zero of=/dev/sda bs=1M",
        "sudo mkfs.ext4 /dev/nvme0n1",
        "wipefs -a /dev/sdb",
        "bash -c 'dd if=/dev/urandom of=/dev/vda'",
    ],
)
def test_writes_that_take_a_gpu_or_a_disk(step):
    assert "mass-kill" in _errors(step), step


@pytest.mark.parametrize(
    "step",
    [
        "dd if=/dev/zero of=/tmp/x bs=1M count=1",
        "echo hi > /dev/null",
        "mkfs.ext4 /tmp/disk.img",
        "echo x > /dev/stderr",
        "cat /sys/bus/pci/devices/0000:3b:00.0/vendor",
    ],
)
def test_writes_of_ones_own_files_stay_clean(step):
    assert not _errors(step), step
