"""What a chain step destroys besides processes: the files the launch needs, the shell that
runs the chain, the signals the server could be stopped with.

Each function reads a parsed chain (and the recipe it belongs to) and returns
``(step, explanation)`` pairs; lint's rules turn them into findings. Tables:
``LAUNCH_INPUTS`` (the paths a launch reads or writes, from the recipe) and ``REMOVERS`` (the
commands that delete a path given as an argument, with their options that take a value).
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from collections.abc import Callable, Iterator

from forensics.recipe import Recipe
from forensics_parsers.shell import Chain, Step, nested_steps
from forensics_parsers.shell_fetch import fetched_code


def _flag(argv: list[str], *names: str) -> str | None:
    for k, a in enumerate(argv):
        for name in names:
            if a == name and k + 1 < len(argv):
                return argv[k + 1]
            if a.startswith(name + "="):
                return a.split("=", 1)[1]
    return None


# The paths a launch needs: (what it is, how to find it in the recipe, what removing it does).
LAUNCH_INPUTS: tuple[tuple[str, Callable[[Recipe], str | None], str], ...] = (
    (
        "the log's folder",
        lambda r: posixpath.dirname(r.log_path) if r.log_path else None,
        "the redirection to the log cannot be opened, so the server never starts and no log "
        "is written",
    ),
    (
        "the model",
        lambda r: _flag(r.server, "--model-path", "--model"),
        "the server has no weights to load (before it starts), or loses them while loading",
    ),
    (
        "the draft model",
        lambda r: _flag(r.server, "--speculative-draft-model-path"),
        "the speculative draft model is gone when the server loads it",
    ),
    (
        "the tokenizer",
        lambda r: _flag(r.server, "--tokenizer-path"),
        "the server cannot load its tokenizer",
    ),
)

# Commands that delete the paths given as arguments: program -> its options that take a value.
REMOVERS: dict[str, frozenset[str]] = {
    "rm": frozenset(),
    "rmdir": frozenset(),
    "unlink": frozenset(),
    "shred": frozenset({"-n", "-s", "--iterations", "--size", "--remove"}),
}


def _find_removed(argv: list[str]) -> list[str]:
    """``find PATH… -delete`` / ``-exec rm …``: the starting points when it deletes (``PATH/*NAME``
    with ``-name NAME``: what it names below them, at any depth)."""
    if not any(a == "-delete" or a in ("-exec", "-execdir", "-ok") for a in argv[1:]):
        return []
    deletes = "-delete" in argv or any(
        a in ("-exec", "-execdir", "-ok") and argv[k + 2 : k + 3] and argv[k + 1] in REMOVERS
        for k, a in enumerate(argv[:-1])
    )
    paths = []
    for a in argv[1:]:
        if a.startswith(("-", "(", "!")):
            break
        paths.append(a)
    # `-name PATTERN` (or -iname) keeps it to what the pattern names, at any depth
    names = [argv[k + 1] for k, a in enumerate(argv[:-1]) if a in ("-name", "-iname")]
    if names:
        paths = [f"{p.rstrip('/')}/*{n.lstrip('*')}" for p in paths for n in names]
    return paths if deletes else []


# Commands that delete what they select by other means than their arguments.
REMOVER_FORMS: dict[str, Callable[[list[str]], list[str]]] = {"find": _find_removed}


def _removed(argv: list[str]) -> list[str]:
    """The paths a REMOVERS command (or a REMOVER_FORMS one) deletes (none for another)."""
    if argv and argv[0].rsplit("/", 1)[-1] in REMOVER_FORMS:
        return REMOVER_FORMS[argv[0].rsplit("/", 1)[-1]](argv)
    if not argv or argv[0].rsplit("/", 1)[-1] not in REMOVERS:
        return []
    takes = REMOVERS[argv[0].rsplit("/", 1)[-1]]
    out, words, options = [], iter(argv[1:]), True
    for a in words:
        if options and a == "--":
            options = False
        elif options and a in takes:
            next(words, None)
        elif not (options and a.startswith("-") and len(a) > 1):
            out.append(a)
    return out


def _covers(target: str, path: str) -> bool:
    """Whether removing ``target`` (a path or glob as typed) removes ``path``."""
    t = posixpath.normpath(target) if target not in ("", ".") else target
    p = posixpath.normpath(path)
    if not t or t == "/":
        return bool(t)
    if t == p or p.startswith(t.rstrip("/") + "/"):
        return True
    parts = p.split("/")
    return any(fnmatch.fnmatchcase("/".join(parts[:k]), t) for k in range(1, len(parts) + 1))


def _commands(step: Step):
    for s in [step, *nested_steps(step)]:
        yield from s.commands


def removed_inputs(chain: Chain, recipe: Recipe) -> Iterator[tuple[Step, str]]:
    """Steps that delete a path the launch needs (LAUNCH_INPUTS), before or while it runs."""
    needed = [(what, find(recipe), why) for what, find, why in LAUNCH_INPUTS]
    for step in chain.steps:
        for cmd in _commands(step):
            inner, _ = cmd.unwrapped()
            for target in _removed(inner):
                for what, path, why in needed:
                    if path and _covers(target, path):
                        yield step, f"`{target}` removes {what} ({path}): {why}."


# Data shared beyond one launch, which a chain should never delete: (what it is, its paths as
# typed or normalised by _shared_form: `~` for a home, `$VAR` for a variable, globs allowed,
# what deleting it does). A target is caught when it is one of them, or a folder above one.
# Compile caches (~/.triton, flashinfer's) are no rows: deleting one is a known fix for
# stale kernels, rebuilt at the next start.
SHARED_DATA: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "the system or a shared disk",
        (
            "/",
            "/usr",
            "/etc",
            "/var",
            "/opt",
            "/boot",
            "/lib",
            "/lib64",
            "/bin",
            "/sbin",
            "/srv",
            "/data",
            "/mnt",
            "/scratch",
            "/shared",
            "/nfs",
            "/home",
        ),  # fmt: skip
        "the host itself, or a disk every user of the host keeps work on",
    ),
    ("a home folder", ("~",), "every file of that user: code, keys, caches, results"),
    (
        "the Hugging Face cache",
        (
            "~/.cache/huggingface",
            "~/.cache/huggingface/hub",
            "$HF_HOME",
            "$HF_HOME/hub",
            "$HF_HUB_CACHE",
            "$HUGGINGFACE_HUB_CACHE",
            "$TRANSFORMERS_CACHE",
            "$HF_DATASETS_CACHE",
        ),  # fmt: skip
        "every model and dataset downloaded on this host (hundreds of GB to fetch again), "
        "deleted under other runs that are loading them",
    ),
    (
        "a model hub cache",
        (
            "~/.cache/modelscope",
            "$MODELSCOPE_CACHE",
            "~/.cache/torch",
            "$TORCH_HOME",
            "~/.ollama/models",
            "$OLLAMA_MODELS",
        ),  # fmt: skip
        "every model downloaded through it, deleted under other runs that are loading them",
    ),
    (
        "a folder of models",
        ("models", "*/models", "checkpoints", "*/checkpoints", "hf_models", "*/hf_models"),
        "every model (or checkpoint) in it, not only the one this launch replaces",
    ),
    (
        "model weights",
        ("*.safetensors", "*.gguf"),
        "weights no log can bring back (a download or a training run each)",
    ),
)
_HOME = re.compile(r"^(?:\$\{?HOME\}?|/root|/home/[^/]+)(?=/|$)")


def _shared_form(target: str) -> str:
    """A removal target as SHARED_DATA writes paths: `${X}` as `$X`, a home as `~`, without
    the `/*` that empties a folder (`rm -rf ~/.cache/huggingface/hub/*` removes the hub)."""
    t = re.sub(r"\$\{(\w+)\}", r"$\1", target.strip())
    t = _HOME.sub("~", t)
    while t.endswith(("/*", "/.*", "/")) and len(t) > 1:
        t = t[:-2] if t.endswith("/*") else t[:-3] if t.endswith("/.*") else t[:-1]
    return posixpath.normpath(t) if t not in ("", "~") else t


def _hits(target: str, path: str) -> bool:
    """Whether removing ``target`` removes ``path`` (a glob matches it; a folder above it)."""
    if fnmatch.fnmatchcase(target, path):
        return True
    return "*" not in path and (target == "/" or path.startswith(target.rstrip("/") + "/"))


def removed_shared(chain: Chain) -> Iterator[tuple[Step, str]]:
    """Steps that delete data shared beyond this launch (SHARED_DATA)."""
    for step in chain.steps:
        seen = set()
        for cmd in _commands(step):
            for target in _removed(cmd.unwrapped()[0]):
                t = _shared_form(target)
                row = next((r for r in SHARED_DATA if any(_hits(t, p) for p in r[1])), None)
                if row and target not in seen:
                    seen.add(target)
                    yield step, f"`{target}` removes {row[0]}: {row[2]}."


def exec_ends_chain(chain: Chain) -> Iterator[tuple[Step, str]]:
    """``exec CMD`` before other steps: the shell is replaced by CMD, the steps after it never
    run (``exec`` with only redirections keeps the shell)."""
    for step in chain.steps:
        cmd = step.command
        if cmd is None or cmd.argv[:1] != ["exec"] or step.background:
            continue
        later = [s for s in chain.steps if s.index > step.index]
        if not later:
            continue
        if cmd.unwrapped()[0]:
            yield (
                step,
                (
                    f"`exec` replaces the shell that runs the chain with `{' '.join(cmd.argv[1:])}`: "
                    f"the {len(later)} step(s) after it never run"
                ),
            )


def ignored_signals(chain: Chain) -> Iterator[tuple[Step, str]]:
    """``trap '' SIG…`` (an empty action): the signals stay ignored in every program the shell
    starts afterwards, the server included, across exec."""
    for step in chain.steps:
        for cmd in _commands(step):
            argv = cmd.argv
            if argv[:1] == ["trap"] and len(argv) > 2 and argv[1] == "":
                sigs = " ".join(argv[2:])
                yield (
                    step,
                    (
                        f"`trap ''` ignores {sigs}, and an ignored signal stays ignored in the "
                        "server it starts: `forensics stop` (TERM) and Ctrl-C do nothing, only "
                        "KILL after the grace ends it, with no clean shutdown of its schedulers"
                    ),
                )


def fetched_runs(chain: Chain) -> Iterator[tuple[Step, str]]:
    """Downloaded code that the chain runs (``shell_fetch.fetched_code``: a script read as it
    arrives, ``python -c "$(curl …)"``, a file a download wrote run later). What it runs is
    not in the chain."""
    seen: set[tuple[int, str]] = set()
    for step, fetch, how in fetched_code(chain.steps):
        if (step.index, fetch + how) in seen:
            continue
        seen.add((step.index, fetch + how))
        yield (
            step,
            f"the script `{fetch}` downloads {how}: lint cannot read it, "
            "and a replay runs whatever the URL serves then (any kill, any removal)",
        )
