"""LocalHost, config and location parsing (no SSH here; see test_hosts_ssh.py)."""

from __future__ import annotations

import functools
import hashlib
import os
import time
from pathlib import Path

import pytest

from forensics import hosts
from forensics.errors import (
    EXIT_DEADLINE,
    EXIT_NOT_FOUND,
    ConfigError,
    DeadlineExceeded,
    InputNotFound,
)
from forensics.hosts import LocalHost, ReadIncomplete, load_config, resolve_location
from tests.conftest import procs_with


def test_run_captures_rc_and_both_streams():
    res = LocalHost().run("echo out; echo err >&2; exit 3", timeout=10)
    assert (res.rc, res.stdout, res.stderr, res.ok) == (3, b"out\n", b"err\n", False)


def test_run_reports_signal_shell_style():
    res = LocalHost().run("kill -9 $$", timeout=10)
    assert (res.rc, res.signal) == (137, 9)


def test_run_feeds_stdin():
    assert LocalHost().run("tr a-z A-Z", timeout=10, stdin=b"abc").stdout == b"ABC"


def test_s05_deadline_kills_the_whole_group(sleep_marker):
    marker = sleep_marker
    with pytest.raises(DeadlineExceeded) as ei:
        LocalHost().run(f"sleep {marker} & sleep {marker}; wait", timeout=0.5)
    assert ei.value.exit_code == EXIT_DEADLINE
    assert ei.value.result.timed_out  # type: ignore[attr-defined]
    assert procs_with(f"sleep {marker}") == []


def test_deadline_can_be_returned_instead_of_raised():
    res = LocalHost().run("echo partial; sleep 30", timeout=0.5, allow_timeout=True)
    assert res.timed_out and res.stdout == b"partial\n"


def test_s06_huge_stdout_and_stderr_complete_and_are_capped():
    script = "head -c 10485760 /dev/zero & head -c 10485760 /dev/zero >&2; wait"
    res = LocalHost().run(script, timeout=S06_DEADLINE, max_output=1 << 20)
    assert res.rc == 0
    assert len(res.stdout) == len(res.stderr) == 1 << 20
    assert res.stdout_truncated and res.stderr_truncated
    assert res.stdout_spill is res.stderr_spill is res.spill_error is None  # no spill_dir given


# -- S06 spill: shared with test_hosts_ssh.py ---------------------------------------------------

# both streams at once, from deterministic generators so every byte can be checked. 2 MiB
# each: 8 times the 256 KiB cap (memory capped, spill whole) and far past a pipe's buffer. The
# spill is redacted as it is written (~2 MB/s of CPU), so 10 MiB streams (the catalog's S06,
# kept by the capping tests above) cost ~25 s of CPU per test for the same check.
S06_SIZE = 2 << 20
S06_SCRIPT = f"yes forensics-out | head -c {S06_SIZE} & seq 1 400000 | head -c {S06_SIZE} >&2; wait"
# a hang guard, not a timing assertion: generous, so a busy machine cannot fail it
S06_DEADLINE = 180


@functools.cache
def s06_expected() -> tuple[bytes, bytes]:
    out = (b"forensics-out\n" * (S06_SIZE // 14 + 1))[:S06_SIZE]
    err = "".join(f"{i}\n" for i in range(1, 400001)).encode()[:S06_SIZE]
    assert len(out) == len(err) == S06_SIZE
    return out, err


def record_capped(monkeypatch) -> list:
    """Every ``_Capped`` buffer made from now on, with the largest size its buffer reached."""
    made: list = []

    class Recording(hosts.capture._Capped):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.peak = 0
            made.append(self)

        def add(self, data: bytes) -> None:
            super().add(data)
            self.peak = max(self.peak, len(self.buf))

    monkeypatch.setattr(hosts.capture, "_Capped", Recording)
    return made


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_s06_spill(res, spill_dir: Path, cap: int, made: list) -> list[str]:
    """The S06 result: tails in memory, whole streams in two 0600 files; returns their names."""
    exp_out, exp_err = s06_expected()
    assert (res.rc, res.spill_error) == (0, None)
    assert res.stdout_truncated and res.stderr_truncated
    assert sha(res.stdout) == sha(exp_out[-cap:]) and sha(res.stderr) == sha(exp_err[-cap:])
    # memory stayed capped the whole time, for both streams
    assert len(made) == 2 and all(c.total == S06_SIZE and 0 < c.peak <= cap for c in made)
    names = []
    for path, exp, stream in (
        (res.stdout_spill, exp_out, "stdout"),
        (res.stderr_spill, exp_err, "stderr"),
    ):
        p = Path(path)
        assert p.parent == spill_dir and p.name.endswith(f".{stream}")
        assert p.stat().st_mode & 0o777 == 0o600
        data = p.read_bytes()
        assert len(data) == S06_SIZE and sha(data) == sha(exp)  # whole, in order, not mixed
        names.append(p.name)
    return names


def test_s06_huge_streams_spill_whole_to_files_memory_capped(tmp_path, monkeypatch):
    made = record_capped(monkeypatch)
    spill = tmp_path / "spill"
    cap = 256 << 10
    res = LocalHost().run(S06_SCRIPT, timeout=S06_DEADLINE, max_output=cap, spill_dir=spill)
    first = check_s06_spill(res, spill, cap, made)
    made.clear()
    again = LocalHost().run(S06_SCRIPT, timeout=S06_DEADLINE, max_output=cap, spill_dir=str(spill))
    second = check_s06_spill(again, spill, cap, made)
    # every run gets its own files: nothing overwritten, nothing else in the directory
    assert sorted(os.listdir(spill)) == sorted(first + second) and len(set(first + second)) == 4


def test_s06_output_within_the_cap_makes_no_spill_file(tmp_path):
    spill = tmp_path / "spill"
    res = LocalHost().run(
        "head -c 4096 /dev/zero; echo e >&2", timeout=10, max_output=4096, spill_dir=spill
    )
    assert (res.rc, len(res.stdout), res.stderr, res.stdout_truncated) == (0, 4096, b"e\n", False)
    assert res.stdout_spill is res.stderr_spill is res.spill_error is None
    assert not spill.exists()  # created lazily, only for a stream past the cap
    one_over = LocalHost().run(
        "head -c 4097 /dev/zero",
        timeout=10,
        max_output=4096,
        spill_dir=spill,
        spill_name="py-spy 42",
    )
    name = Path(one_over.stdout_spill).name
    assert one_over.stderr_spill is None and os.listdir(spill) == [name]
    assert name.startswith("py-spy_42.") and name.endswith(".stdout")
    assert Path(one_over.stdout_spill).read_bytes() == bytes(4097) and len(one_over.stdout) == 4096


def test_s06_unwritable_spill_dir_does_not_fail_the_command(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the spill directory should be")
    res = LocalHost().run(
        S06_SCRIPT, timeout=S06_DEADLINE, max_output=1 << 16, spill_dir=blocker / "spill"
    )
    exp_out, exp_err = s06_expected()
    assert (
        res.rc == 0 and res.stdout == exp_out[-(1 << 16) :] and res.stderr == exp_err[-(1 << 16) :]
    )
    assert res.stdout_spill is None and res.stderr_spill is None
    assert res.spill_error is not None and "cannot spill to" in res.spill_error
    assert str(blocker / "spill") in res.spill_error and "Not a directory" in res.spill_error
    assert "stdout" in res.spill_error and "stderr" in res.spill_error


def test_s06_spill_that_hits_a_full_disk_is_dropped_not_fatal(tmp_path, monkeypatch):
    # the spill file's writes go to /dev/full: the kernel answers ENOSPC, as on a full disk
    placeholder = tmp_path / "spill" / "placeholder.stdout"
    real_open = hosts.capture._open_spill

    def open_full(directory: str, label: str) -> tuple[int, str]:
        if not label.endswith(".stdout"):
            return real_open(directory, label)
        placeholder.write_bytes(b"")
        return os.open("/dev/full", os.O_WRONLY), str(placeholder)

    monkeypatch.setattr(hosts.capture, "_open_spill", open_full)
    res = LocalHost().run(
        S06_SCRIPT, timeout=S06_DEADLINE, max_output=1 << 16, spill_dir=tmp_path / "spill"
    )
    exp_out, exp_err = s06_expected()
    assert res.rc == 0 and res.stdout == exp_out[-(1 << 16) :]
    assert res.stdout_spill is None and not placeholder.exists()  # no misleading partial file
    assert "spill to" in res.spill_error and "No space left on device" in res.spill_error
    assert sha(Path(res.stderr_spill).read_bytes()) == sha(exp_err)  # the other stream is whole


def test_s17_spawn_is_detached_in_its_own_session(tmp_path):
    log = tmp_path / "x.log"
    pid = LocalHost().spawn("echo started; echo $PWD", cwd=str(tmp_path), log=str(log))
    try:
        # stat field 5 is the process group: setsid made the pid its group leader
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        assert int(stat[2]) == pid
    except FileNotFoundError:
        pass  # already finished; the log below still proves it ran
    for _ in range(100):
        if log.exists() and log.read_text().count("\n") >= 2:
            break
        time.sleep(0.05)
    assert log.read_text() == f"started\n{tmp_path}\n"


def test_glob_sorted_skips_dotfiles_and_handles_odd_names(tmp_path):
    for name in ("b.log", "a b.log", "c\nd.log", ".hidden.log", "x.txt"):
        (tmp_path / name).write_text(name)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "z.log").write_text("z")
    got = LocalHost().glob(f"{tmp_path}/*.log")
    assert got == sorted(str(tmp_path / n) for n in ("b.log", "a b.log", "c\nd.log"))
    assert LocalHost().glob(f"{tmp_path}/*/*.log") == [str(tmp_path / "sub" / "z.log")]
    assert LocalHost().glob(f"{tmp_path}/.h*") == [str(tmp_path / ".hidden.log")]


def test_glob_no_match_is_not_found(tmp_path):
    with pytest.raises(InputNotFound) as ei:
        LocalHost().glob(f"{tmp_path}/*.nothing")
    assert ei.value.exit_code == EXIT_NOT_FOUND
    assert "*.nothing" in str(ei.value)


def test_stat_read_and_offsets(tmp_path):
    p = tmp_path / "f.log"
    p.write_bytes(b"0123456789")
    h = LocalHost()
    st = h.stat(str(p))
    assert (st.size, st.inode, st.is_dir) == (10, p.stat().st_ino, False)
    assert h.read(str(p)) == b"0123456789"
    assert h.read(str(p), 3, 4) == b"3456"
    assert b"".join(h.iter_chunks(str(p), 2, chunk=3)) == b"23456789"
    assert h.read(str(p), 20) == b""
    with pytest.raises(InputNotFound):
        h.stat(str(tmp_path / "missing"))
    with pytest.raises(InputNotFound):
        h.read(str(tmp_path / "missing"))


def test_s09_read_stops_at_size_when_opened(tmp_path):
    p = tmp_path / "grow.log"
    p.write_bytes(b"a" * 10)
    it = LocalHost().iter_chunks(str(p), chunk=4)
    first = next(it)
    with open(p, "ab") as f:
        f.write(b"b" * 10)
    assert first + b"".join(it) == b"a" * 10


def test_s08_file_shrinking_mid_read_keeps_bytes(tmp_path):
    p = tmp_path / "rot.log"
    p.write_bytes(b"x" * 100)
    got = []
    with pytest.raises(ReadIncomplete) as ei:
        for chunk in LocalHost().iter_chunks(str(p), chunk=30):
            got.append(chunk)
            os.truncate(p, 0)  # copytruncate rotation
    assert b"".join(got) == b"x" * 30
    assert ei.value.bytes_read == 30 and ei.value.exit_code == 4


def test_write_is_atomic_with_mode_and_makedirs(tmp_path):
    h = LocalHost()
    d = tmp_path / "a" / "b"
    h.makedirs(str(d))
    h.write(str(d / "f"), b"data", mode=0o640)
    assert (d / "f").read_bytes() == b"data"
    assert (d / "f").stat().st_mode & 0o777 == 0o640
    assert [x.name for x in d.iterdir()] == ["f"]
    assert h.exists(str(d / "f")) and h.is_dir(str(d)) and not h.exists(str(d / "g"))


# -- config -----------------------------------------------------------------------------------


def test_config_cwd_wins_over_home(tmp_path):
    home = Path(os.environ["FORENSICS_HOME"])
    home.mkdir(parents=True)
    (home / "config.toml").write_text(
        '[hosts.gpu8]\naddress = "a@h1"\n[hosts.other]\naddress = "b@h2:2222"\n'
    )
    Path("forensics.toml").write_text('[hosts.gpu8]\naddress = "root@10.0.0.8:22"\n')
    cfg = load_config()["hosts"]
    assert cfg["gpu8"].address == "root@10.0.0.8:22"
    assert (cfg["other"].user, cfg["other"].host, cfg["other"].port) == ("b", "h2", 2222)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('[hosts.g]\naddress = "a@h"\nidentiy_file = "x"\n', "hosts.g.identiy_file: unknown key"),
        ("[hosts.g]\nidentity_file = 'x'\n", "hosts.g.address: missing"),
        ('[hosts.g]\naddress = "a@h:99999"\n', "port 99999"),
        ('[hosts.g]\naddress = "a b@@h"\n', "not an address"),
        ("[hosts.g\naddress=1", "not valid TOML"),
        ('[hosts.g]\naddress = "a@h"\nconnect_timeout = -1\n', "connect_timeout"),
    ],
)
def test_bad_config_names_file_and_key(text, needle):
    Path("forensics.toml").write_text(text)
    with pytest.raises(ConfigError) as ei:
        load_config()
    assert needle in str(ei.value)
    assert str(ei.value).startswith("forensics.toml")


def test_resolve_local_paths_stay_local(tmp_path):
    odd = tmp_path / "run:1.log"
    odd.write_text("x")
    for text in ("/data/x/*.log", "relative/*.log", str(odd)):
        host, path = resolve_location(text)
        assert host.name == "local" and path == text


def test_resolve_unknown_name_is_a_config_error():
    Path("forensics.toml").write_text('[hosts.gpu8]\naddress = "root@10.0.0.8"\n')
    with pytest.raises(ConfigError) as ei:
        resolve_location("gpu9:/data/*.log")
    assert "gpu9" in str(ei.value) and "gpu8" in str(ei.value)


def test_is_remote_forms():
    Path("forensics.toml").write_text('[hosts.gpu8]\naddress = "root@10.0.0.8"\n')
    assert hosts.is_remote("ssh://root@h:2222/data/*.log")
    assert hosts.is_remote("gpu8:/data/*.log")
    assert hosts.is_remote("root@h:/data/x.log")
    assert not hosts.is_remote("/data/x.log")


def test_parse_address_forms():
    assert hosts.parse_address("root@10.0.0.8:2222") == ("root", "10.0.0.8", 2222)
    assert hosts.parse_address("u@[::1]:22") == ("u", "::1", 22)
    assert hosts.parse_address("h")[1:] == ("h", 22)


def test_s06_spill_of_a_stream_a_background_process_keeps_open(tmp_path, sleep_marker):
    # the command ends but its background child still holds stdout: the run returns after the
    # drain grace, keeps the spill written so far and says it may be incomplete (the background
    # sleep runs on: sleep_marker kills it)
    res = LocalHost().run(
        f"head -c 5000 /dev/zero; sleep {sleep_marker} & exit 0",
        timeout=30,
        max_output=1000,
        spill_dir=tmp_path / "spill",
    )
    assert res.rc == 0 and len(res.stdout) == 1000
    assert Path(res.stdout_spill).read_bytes() == bytes(5000)
    assert "a background process still writes" in res.spill_error
