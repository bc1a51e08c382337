"""The console entry point (``forensics`` and ``python -m forensics``), kept light.

Importing the CLI takes a noticeable moment (click, polars' neighbours, every command group). A
Ctrl-C in that moment, before ``forensics.cli.main`` and its handling of KeyboardInterrupt run,
showed Python's traceback. So this module imports only ``signal`` (built in) and, first thing,
makes SIGINT end the process with one line, ``Interrupted.``, and exit 130 (docs/exit-codes.md):
nothing has been done yet that a Ctrl-C could leave half-done. Once the CLI is imported, Python's
own handler is back and ``forensics.cli.main`` handles the interrupt as it always did (commit
the files finished, say so); whatever escapes it is one line too. Only the interpreter's own
start-up, before this module runs, is outside forensics' reach.

SIGTERM (``kill``, a job scheduler's cancel, ``timeout``) and SIGHUP (the terminal closed) are
handled exactly as a Ctrl-C (``INTERRUPT_SIGNALS``): the command commits what it finished,
leaves the store consistent, says ``Interrupted.`` and exits 130. Python's default for them
ended the process on the spot, mid-write (issue 14, round three).

A few libraries must not be interrupted while they initialise (``UNINTERRUPTIBLE_IMPORTS``):
polars' start-up calls back into Python from Rust and unwraps the result, so a Ctrl-C landing
there was a Rust panic and a traceback (exit 1), not an interrupt. Their import runs with the
interrupt deferred (``_Deferring``, a finder in ``sys.meta_path``): the signal is delivered
again the moment the import ends, and the command is interrupted there as anywhere else.

Importing this module takes over these signals: only the entry point imports it
(forensics/__main__.py and the ``forensics`` script); code and tests call ``forensics.cli.main``.
"""

import os
import signal

# polars' allocator (jemalloc) keeps freed pages for 0.5 s (dirty) and 1 s (muzzy) by
# default: an ingest that frees a chunk's rows every few milliseconds held ~70 MB it had
# freed (a 150 MB log of one stage line: 312 MB peak, 245 MB with these; ~+5 % system CPU).
# polars appends this to its own setting, so it wins; a user's own value is kept.
os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:100,muzzy_decay_ms:0")

EXIT_INTERRUPTED = 130  # forensics.errors.EXIT_INTERRUPTED (a test checks they agree)
_SAID = b"Interrupted.\n"


def _while_importing(signum: int, frame: object) -> None:
    import os

    os.write(2, _SAID)
    os._exit(EXIT_INTERRUPTED)


# the signals that interrupt a command the way Ctrl-C does (docs/exit-codes.md)
INTERRUPT_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


def _handle_interrupts(handler: object) -> None:
    for sig in INTERRUPT_SIGNALS:
        signal.signal(sig, handler)


_handle_interrupts(_while_importing)

# no garbage collection through the imports of the start: the command resumes it as it begins
# (forensics/collector.py)
from forensics.collector import pause as _pause_collector  # noqa: E402 - after the handlers

_pause_collector()

# the import finders' plumbing (standard library only), and modules polars imports and an
# ingest never reads (importlib.metadata) run when first read (forensics/unread.py; the ingest
# workers install it too)
from forensics.unread import Wrapping, wrapped_spec  # noqa: E402 - after the handlers
from forensics.unread import install as _run_when_read  # noqa: E402

# modules whose initialisation an interrupt must not land in: it is delivered when they are
# imported (polars: a KeyboardInterrupt inside its Rust start-up, on_startup.rs, is a panic)
UNINTERRUPTIBLE_IMPORTS = frozenset({"polars"})
_importing: list[str] = []  # the uninterruptible imports running now
_deferred: list[int] = []  # the interrupts that landed during one


class _Deferring:
    """A ``sys.meta_path`` finder: the spec of an UNINTERRUPTIBLE_IMPORTS module, as the other
    finders give it, with its loader wrapped so that interrupts wait for its initialisation."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        if name not in UNINTERRUPTIBLE_IMPORTS or name in _importing:
            return None
        return wrapped_spec(self, name, path, target, _DeferringLoader)


class _DeferringLoader(Wrapping):
    def exec_module(self, module: object) -> None:
        _importing.append(self._name)
        try:
            self._loader.exec_module(module)  # type: ignore[attr-defined]
        finally:
            _importing.pop()
            if not _importing and _deferred:  # delivered again, to the main thread's handler
                signal.raise_signal(_deferred.pop())
                _deferred.clear()


def _defer_interrupts_in_imports() -> None:
    import sys

    if not any(isinstance(f, _Deferring) for f in sys.meta_path):
        sys.meta_path.insert(0, _Deferring())


_defer_interrupts_in_imports()


_run_when_read()


# One Ctrl-C is one KeyboardInterrupt: a second delivery of the same signal (polars' threads
# re-raise it at their next check; forensics.errors) or a second press while forensics commits
# what was finished and says "Interrupted." is ignored for this long, so it can never escape
# past the handling as Python's own exit by SIGINT (status -2) instead of 130.
ONE_INTERRUPT_S = 2.0
_last_interrupt: list[float] = []


def _interrupt_once(signum: int, frame: object) -> None:
    import time

    if _importing:  # inside polars' start-up: delivered again when its import ends
        _deferred.append(signum)
        return
    now = time.monotonic()
    if _last_interrupt and now - _last_interrupt[-1] < ONE_INTERRUPT_S:
        return
    _last_interrupt.append(now)
    _last_signal[:] = [signum]
    raise KeyboardInterrupt


_last_signal: list[int] = []  # the signal of the last KeyboardInterrupt raised
AGAIN_S = 0.005  # an ignored interrupt is raised again this long after (_interrupt_ignored)


def _deliver_later(signum: int, main: int) -> None:
    import time

    time.sleep(AGAIN_S)  # the main thread meanwhile leaves the hook (and, if not, comes back)
    signal.pthread_kill(main, signum)  # to the main thread: a wait of its own is cut short


def _interrupt_ignored(unraisable: object) -> None:
    """``sys.unraisablehook``: an interrupt that landed where Python ignores exceptions (a
    weakref callback, a ``__del__``, a garbage collection's callback) was lost: printed as
    "Exception ignored in ..." with its traceback, and the command went on (a SIGTERM of a
    parallel ingest ended it with status 0). It is delivered again, to the main thread's
    handler, once that code has returned; anything else goes to Python's own hook."""
    import _thread
    import sys

    if issubclass(getattr(unraisable, "exc_type", type(None)), KeyboardInterrupt):
        if _last_signal:
            _last_interrupt.clear()  # not a second press: the first one, again
            # raised here, the handler would run here, in this hook, and be ignored again; a
            # thread raises it once this has returned (a thread of ``_thread``: threading's
            # start waits in Python code, where the handler would run too)
            _thread.start_new_thread(_deliver_later, (_last_signal[0], _thread.get_ident()))
        return
    sys.__unraisablehook__(unraisable)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> None:
    if argv is None:
        _utf8_mode()
    try:
        _main(argv)
    except SystemExit as exc:
        _exit_at_once(exc)  # returns where the interpreter's own exit must run
        raise
    finally:
        _skip_exit_collections()


def _utf8_mode() -> None:
    """Python in the C locale with its UTF-8 mode turned off (``LC_ALL=C PYTHONUTF8=0``), or in
    a locale of another encoding, decodes file names and arguments with that encoding: a log
    named ``été.log`` reached forensics as surrogates the store cannot hold (ingest skipped it
    as "not valid UTF-8"). Such a process runs itself again at once in UTF-8 mode (``-X utf8``,
    the same arguments as bytes, nothing done yet), so names are UTF-8 text in every locale
    (issue 14, seventh round). A name that is not UTF-8 still reaches forensics as surrogates
    and is refused where the store would hold it."""
    import sys

    if sys.flags.utf8_mode or sys.getfilesystemencoding().lower() in ("utf-8", "utf8"):
        return
    if not getattr(sys, "orig_argv", None) or os.environ.get("FORENSICS_UTF8_REEXEC"):
        return  # never twice (an interpreter that ignores -X utf8)
    os.environ["FORENSICS_UTF8_REEXEC"] = "1"
    os.environ.pop("PYTHONUTF8", None)
    os.execv(sys.executable, [sys.executable, "-X", "utf8", *sys.orig_argv[1:]])


def _skip_exit_collections() -> None:
    """The command is done (every file forensics writes is closed by a ``with``). What is
    left is the interpreter's teardown, whose garbage collections walk every object still
    alive (polars' modules, the parser's tables, a run's frames): ~0.1 s CPU after an ingest
    of 100 MB, for memory the OS takes back anyway. ``gc.freeze`` moves them out of the
    collector's reach; the teardown itself still runs (atexit handlers, threads joined,
    streams flushed, modules cleared, objects no longer referenced freed): only cycles left
    at exit are not collected. (``os._exit`` skips all of that: ``_exit_at_once``.)"""
    import gc

    gc.freeze()


def _exit_at_once(exc: SystemExit) -> None:
    """End the process now with ``exc``'s status (``os._exit``), skipping the interpreter's
    teardown (modules cleared, objects freed one by one: ~8 ms after an ingest of 100 MB;
    docs/performance.md, "The tail of one ingest, eleventh stop"), where nothing is left for
    it to do: the command asked for it (``exc`` is ``forensics.output.ExitAtOnce``: its files
    are closed when it returns), no other thread runs (none to join), the atexit handlers are
    run here, stdout and stderr are flushed. Returns otherwise (a status Python prints, a
    stream that cannot be flushed: the interpreter's exit reports it, as before)."""
    import sys
    import threading

    at_once = getattr(sys.modules.get("forensics.output"), "ExitAtOnce", None)
    if at_once is None or not isinstance(exc, at_once) or threading.active_count() > 1:
        return
    if exc.code is not None and not isinstance(exc.code, int):
        return
    import atexit

    atexit._run_exitfuncs()
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return
    os._exit(exc.code or 0)


def _main(argv: list[str] | None) -> None:
    import sys

    try:
        args = sys.argv[1:] if argv is None else argv
        if "ingest" in args:  # of several hosts: the pool's zygote started now
            from forensics.ingest.zygote import early

            early(args)
        from forensics.cli import main as cli_main

        _handle_interrupts(_interrupt_once)
        sys.unraisablehook = _interrupt_ignored
        cli_main(argv)
    except KeyboardInterrupt:
        # before forensics.cli.main's handling, or escaping it (a second KeyboardInterrupt of
        # the same Ctrl-C, forensics.errors): one line, unless it said it already
        cli = sys.modules.get("forensics.cli")
        _interrupted(say=not getattr(cli, "INTERRUPTED_SAID", False))
    except Exception as exc:
        # an interrupt Python wrapped (it landed in an import's class body: RuntimeError
        # "Error calling __set_name__"), before forensics.cli.main's own handling
        from forensics.errors import interrupt_inside

        if not interrupt_inside(exc):
            raise
        import sys

        cli = sys.modules.get("forensics.cli")
        _interrupted(say=not getattr(cli, "INTERRUPTED_SAID", False))


def _interrupted(*, say: bool) -> None:
    import sys

    try:
        _handle_interrupts(signal.SIG_IGN)  # a further Ctrl-C (or SIGTERM) while we exit
        if say:
            sys.stderr.write(_SAID.decode())
            sys.stderr.flush()
    except KeyboardInterrupt:  # the same Ctrl-C's pending second one (forensics.errors)
        pass
    except (OSError, ValueError):  # stderr closed: the exit code still says it
        pass
    sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":
    main()
