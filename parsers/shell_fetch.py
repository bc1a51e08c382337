"""Downloaded code a chain runs (pure; lint's ``runs-fetched-script``), found one way: each
command is asked where the code it runs comes from (``code_sources``), and a source that is a
download is reported. The sources:

- a script read from stdin or a process substitution (``curl URL | bash``, ``. <(curl …)``,
  ``curl URL | python3``, ``python3 <(wget -qO- URL)``): ``shell_runners.fetched_scripts``;
- code given as an argument that is a download's output (``python -c "$(curl URL)"``,
  ``bash -c "$(wget -qO- URL)"``, ``eval "$(curl URL)"``, ``perl -e "`curl URL`"``);
- a file a download wrote earlier in the chain (``curl -o x URL; bash x``, ``wget -O x URL &&
  sh x``, ``curl -O URL/i.sh; chmod +x i.sh; ./i.sh``, ``curl URL > x.py; python3 x.py``):
  ``FETCH_OUTPUTS`` says which files each downloader writes; a command runs a file when a
  script reader is given it (``bash x``, ``. x``, ``python3 x``) or it is the command itself
  (``./x``, ``/tmp/x``).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator

from forensics_parsers.shell_lexer import substitutions
from forensics_parsers.shell_runners import (
    FETCHERS,
    INTERPRETERS,
    SCRIPT_FILE_READERS,
    fetched_scripts,
    fetcher_output,
    given_code,
    program_name,
    runner_script,
    shell_script,
    unwrap,
)
from forensics_parsers.shell_scripts import INLINE_CODE, script_option

# A downloader's row: (options whose value is the file it writes, options that make it write
# the URL's last path segment, whether it writes that segment when given no option at all).
FETCH_OUTPUTS: dict[str, tuple[frozenset[str], frozenset[str], bool]] = {
    "curl": (
        frozenset({"-o", "--output"}),
        frozenset({"-O", "--remote-name", "--remote-name-all"}),
        False,
    ),
    "wget": (frozenset({"-O", "--output-document"}), frozenset(), True),
    "aria2c": (frozenset({"-o", "--out"}), frozenset(), True),
    "http": (frozenset({"-o", "--output"}), frozenset({"-d", "--download"}), False),
    "https": (frozenset({"-o", "--output"}), frozenset({"-d", "--download"}), False),
    "xh": (frozenset({"-o", "--output"}), frozenset({"-d", "--download"}), False),
    "fetch": (frozenset({"-o"}), frozenset(), True),
}
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.I)


def written_files(argv: list[str]) -> list[str]:
    """The files a download command writes (``curl -o F``, ``curl -O URL``, ``wget URL``)."""
    inner, _ = unwrap(argv)
    row = FETCH_OUTPUTS.get(program_name(inner[0])) if inner else None
    if row is None:
        return []
    values, remote, remote_named = row
    named: list[str] = []
    words = inner[1:]
    for k, w in enumerate(words):
        value = _option_value(w, words[k + 1 : k + 2], values)
        if value is not None:
            named.append(value)
        elif w in remote or (_cluster(w) and any(f"-{c}" in remote for c in w[1:])):
            remote_named = True
    if named:
        return [f for f in named if f not in ("-", "/dev/stdout", "")]
    if not remote_named:
        return []
    urls = [w for w in words if _URL.match(w)]
    return [u.split("?")[0].rstrip("/").rsplit("/", 1)[-1] for u in urls]


def _cluster(word: str) -> bool:
    return word[:1] == "-" and word[1:2] != "-" and word[1:].isalpha()


def _option_value(word: str, following: list[str], values: frozenset[str]) -> str | None:
    """The file named by an output option: ``-o F``, ``-oF``, ``-sSo F``, ``-qO-`` (flags
    before it), ``--output F``, ``--output=F``; None when ``word`` is not such an option."""
    if word.startswith("--"):
        opt, eq, glued = word.partition("=")
        if opt not in values:
            return None
        return glued if eq else (following[0] if following else "")
    if word[:1] != "-" or len(word) < 2:
        return None
    for k, c in enumerate(word[1:], start=1):  # flags, then the option and its value
        if f"-{c}" in values:
            return word[k + 1 :] or (following[0] if following else "")
        if not c.isalpha():
            return None
    return None


def run_file(argv: list[str]) -> str | None:
    """The script file a command runs: the first word given to a script reader (``bash x``,
    ``. x``, ``python3 x.py``), or the command itself when it is a path (``./x``)."""
    inner, _ = unwrap(argv)
    if not inner:
        return None
    if "/" in inner[0] and program_name(inner[0]) not in (*SCRIPT_FILE_READERS, *INTERPRETERS):
        return inner[0]
    name = program_name(inner[0])
    if name not in (*SCRIPT_FILE_READERS, *INTERPRETERS) or shell_script(argv) is not None:
        return None
    if name in INTERPRETERS and any(given_code(a) for a in inner[1:]):
        return None
    files = [a for a in inner[1:] if not a.startswith("-")]
    return files[0] if files else None


def code_arguments(argv: list[str]) -> list[str]:
    """The code a command is given as an argument: ``bash -c CODE``, ``eval CODE``, a
    runner's script, an interpreter's ``-c`` / ``-e`` code (as typed, before INLINE_CODE reads
    what it amounts to)."""
    out = [t for t in (shell_script(argv), runner_script(argv)) if t]
    inner, _ = unwrap(argv)
    lang = program_name(inner[0]) if inner else ""
    if lang in INLINE_CODE:
        code = script_option(*INLINE_CODE[lang][0])(inner[1:])
        out += [code] if code else []
    return out


def _same(a: str, b: str) -> bool:
    a, b = posixpath.normpath(a), posixpath.normpath(b)
    if a == b:
        return True
    # a relative name and a path of the same name: the chain may have changed folder
    both_named = posixpath.basename(a) == posixpath.basename(b)
    return both_named and not (a.startswith("/") and b.startswith("/"))


def saved_downloads(commands: list) -> dict[str, str]:
    """The files a pipeline's downloads write -> the download's text: a downloader's own
    output file (``FETCH_OUTPUTS``), and from the first download on, a ``> F`` redirection
    and the files of a ``tee`` after it."""
    at = next((k for k, c in enumerate(commands) if program_name(_argv0(c.argv)) in FETCHERS), None)
    out: dict[str, str] = {}
    for k, cmd in enumerate(commands):
        written = written_files(cmd.argv)
        if at is not None and k >= at:
            target = cmd.stdout_target()
            written += [target] if target and not target.startswith("/dev/") else []
            if k > at and program_name(_argv0(cmd.argv)) == "tee":
                written += [a for a in cmd.argv[1:] if not a.startswith("-")]
        for f in written:
            out[f] = commands[at].text if at is not None else cmd.text
    return out


def _argv0(argv: list[str]) -> str:
    inner, _ = unwrap(argv)
    return inner[0] if inner else ""


def fetched_code(steps: list) -> Iterator[tuple[object, str, str]]:
    """(step, the download, how its code runs) for each command of ``steps`` (in order, the
    nested ones of each step beside it) that runs downloaded code."""
    from forensics_parsers.shell_runners import nested_steps

    files: dict[str, str] = {}  # a file a download wrote -> the download's text
    for step in steps:
        for s in [step, *nested_steps(step)]:
            for fetch in fetched_scripts(s.commands):
                yield step, fetch, "is run as it arrives"
            for cmd in s.commands:
                for code in code_arguments(cmd.argv):
                    for sub in substitutions(code):
                        if (fetch := fetcher_output(sub)) is not None:
                            yield step, fetch, "is given as the code to run"
                path = run_file(cmd.argv)
                hit = next((f for f in files if path and _same(path, f)), None)
                if hit is not None:
                    yield step, files[hit], f"is saved as `{hit}` and run from there"
            files.update(saved_downloads(s.commands))


__all__ = [
    "FETCH_OUTPUTS",
    "INTERPRETERS",
    "code_arguments",
    "fetched_code",
    "run_file",
    "saved_downloads",
    "written_files",
]
