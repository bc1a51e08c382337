"""The root of the command line: a thin click layer over the library.

Each command group lives in ``forensics/cli_<area>.py`` and exposes ``register(cli)``.
``main()`` owns the exit-code contract: library errors become one ``Error: …`` line.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import time
from collections.abc import Iterator, MutableMapping
from typing import Any

import click

from forensics import __version__
from forensics.cli_common import echo, guard_empty_values
from forensics.errors import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    ForensicsError,
    interrupt_inside,
)
from forensics.urls import redact_url

# Command-group modules and the commands each registers, in the order they appear in --help.
# A module is imported when one of its commands is first looked up (``_Commands``).
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "forensics.cli_ingest": ("ingest", "runs", "show"),
    "forensics.cli_diagnose": ("classify", "diagnose", "signatures", "label"),
    "forensics.cli_remote": ("lint", "launch", "stop", "hosts"),
    "forensics.cli_bench": ("bench", "baseline"),
    "forensics.cli_plot": ("plot", "report", "advise", "experiments"),
    "forensics.cli_sim": ("sim",),
    "forensics.cli_sweep": ("sweep",),
    "forensics.cli_store": ("store",),
}

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class CommandError(click.ClickException):
    """A library error on its way out: one line, the library's exit code."""

    def __init__(self, exc: ForensicsError):
        super().__init__(str(exc))
        self.exit_code = exc.exit_code

    def show(self, file=None) -> None:  # noqa: ANN001 - click's signature
        click.echo(f"Error: {shown(self.message)}", err=True)


class ReaderGone(Exception):  # noqa: N818 - not an error: the reader of stdout left
    """The reader of stdout went away (``| head -c 10``): the command ends quietly, exit 0."""


class _Context(click.Context):
    """--help fitted to the terminal as all prose is (forensics.terminal.prose_width): click's
    own width has a floor of 50 columns. Subcommands' contexts inherit the width."""

    def __init__(self, *args, **kwargs):  # noqa: ANN002, ANN003 - click's signature
        super().__init__(*args, **kwargs)
        if self.terminal_width is None:
            from forensics.terminal import PROSE_MIN, prose_width

            width = prose_width(sys.stdout)
            if width is not None:
                most = self.max_content_width or 80
                self.terminal_width = max(PROSE_MIN, min(width, most) - 2)


class _Commands(MutableMapping):
    """A group's commands (click's ``Group.commands``), each COMMAND_MODULES module imported and
    registered when one of its commands is first looked up: ``forensics ingest`` imports no
    other group's module (~10 ms of CPU: their imports and click objects, an unchanged
    re-ingest's ~6 %); listing them (--help, a mistyped command's suggestions) imports all."""

    def __init__(self, group: click.Group) -> None:
        self._group = group
        self._commands: dict[str, click.Command] = {}
        self._pending = dict(COMMAND_MODULES)  # the modules not imported yet
        self._order = [name for names in COMMAND_MODULES.values() for name in names]

    def _register(self, module: str) -> None:
        before = set(self._commands)
        importlib.import_module(module).register(self._group)
        added = set(self._commands) - before
        if added != set(self._pending.pop(module)):  # the table and the module disagree
            raise RuntimeError(f"{module} registers {sorted(added)}: see COMMAND_MODULES")
        for name in added:  # a text value typed '' is exit 2 (cli_common.EMPTY_MEANS_SOMETHING)
            guard_empty_values(self._commands[name])

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._commands:
            for module, names in list(self._pending.items()):
                if name in names:
                    self._register(module)
        return self._commands[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._commands[name] = command

    def __delitem__(self, name: str) -> None:
        del self._commands[name]

    def __iter__(self) -> Iterator[str]:
        for module in list(self._pending):
            self._register(module)
        rank = {name: i for i, name in enumerate(self._order)}
        return iter(sorted(self._commands, key=lambda n: rank.get(n, len(rank))))

    def __len__(self) -> int:
        return sum(1 for _ in self)


class OrderedGroup(click.Group):
    context_class = _Context

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)

    def invoke(self, ctx: click.Context):  # noqa: ANN201
        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:  # click would take it (an OSError) for exit 1
            raise ReaderGone from exc
        except ForensicsError as exc:
            if (ctx.obj or {}).get("debug"):
                raise
            raise CommandError(exc) from exc
        finally:
            _store_warnings(ctx)


def _store_warnings(ctx: click.Context) -> None:
    """What the store set aside while serving the command (a quarantined part, C03)."""
    store = (ctx.obj or {}).get("store")
    for w in getattr(store, "warnings", None) or []:
        echo(f"Warning: {w}", err=True)


@click.group(cls=OrderedGroup, context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, "-V", "--version", prog_name="forensics")
@click.option(
    "--store",
    "store_path",
    type=click.Path(file_okay=False),
    default=None,
    help="Store folder (default: $FORENSICS_HOME, else ./.forensics).",
)
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def cli(ctx: click.Context, store_path: str | None, debug: bool) -> None:
    """forensics: the runs, failures and speed of your LLM-serving experiments.

    Ingest SGLang server logs (local or ssh://), see every run in one table, find in which
    phase a launch died and why, relaunch it with evidence, benchmark a server, plot trends.
    """
    if ctx.invoked_subcommand != "ingest":  # ingest resumes it after its parser's import
        from forensics.collector import resume

        resume()  # paused by the entry point through the start (forensics/collector.py)
    ctx.ensure_object(dict)
    ctx.obj["store_path"] = store_path
    if store_path is not None:  # the one home: every file this command writes goes under it
        from forensics.home import using

        ctx.with_resource(using(store_path))
    ctx.obj["debug"] = debug or debug_from_env()


cli.commands = _Commands(cli)


def main(argv: list[str] | None = None) -> None:
    global INTERRUPTED_SAID
    INTERRUPTED_SAID = False  # per call: tests call main in one process
    debug = "--debug" in (argv if argv is not None else sys.argv[1:]) or debug_from_env()
    from forensics.output import EXIT_AT_ONCE, ExitAtOnce, guard_stdout

    _tolerant_streams()
    call: dict = {}  # this call's ctx.obj: what its command asks of the end (EXIT_AT_ONCE)
    threads_hook = threading.excepthook
    threading.excepthook = _thread_failed_hook(debug)
    try:
        with guard_stdout():  # a write to stdout that fails: one Error line, exit 2
            rv = cli.main(args=argv, prog_name="forensics", standalone_mode=False, obj=call)
    except ForensicsError as exc:
        if debug:
            raise
        click.echo(f"Error: {shown(str(exc))}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort as exc:
        if isinstance(exc.__cause__, EOFError) and not debug:  # click takes any EOFError for
            _unexpected(exc.__cause__)  # Ctrl-D: one that reached it is not a Ctrl-C
        _say_interrupted()
    except KeyboardInterrupt:
        try:  # the same Ctrl-C's second KeyboardInterrupt, if pending (see forensics.errors)
            time.sleep(0)
        except KeyboardInterrupt:
            pass
        _say_interrupted()
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show(file=_VisibleStream(sys.stderr))
        sys.exit(exc.exit_code if exc.exit_code else EXIT_USAGE)
    except (BrokenPipeError, ReaderGone):
        sys.exit(0)
    except Exception as exc:  # noqa: BLE001 - the contract: never a raw traceback
        if debug:
            raise
        if interrupt_inside(exc):  # a Ctrl-C / SIGTERM that Python wrapped (an import)
            _say_interrupted()
        _unexpected(exc)
    finally:
        _close_hosts()
        threading.excepthook = threads_hook
    code = rv if isinstance(rv, int) else 0
    if call.get(EXIT_AT_ONCE):
        raise ExitAtOnce(code)
    sys.exit(code)


class _VisibleStream:
    """A stream for click's own messages (a usage error quotes the argument as typed: ``No
    such command '\\x1b[2J'``): what is written goes through forensics.terminal.visible."""

    def __init__(self, stream):  # noqa: ANN001
        self._stream = stream

    def write(self, text: str) -> int:
        from forensics.terminal import visible

        return self._stream.write(visible(text, lines=True))

    def __getattr__(self, name: str):  # noqa: ANN204 - flush, encoding, isatty, ... as the stream's
        return getattr(self._stream, name)


def debug_from_env() -> bool:
    """``FORENSICS_DEBUG=1`` (or true, yes, on) shows tracebacks; 0, false, no, off, empty or
    anything else do not (``FORENSICS_DEBUG=0`` used to turn them on)."""
    return os.environ.get("FORENSICS_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")


def _tolerant_streams() -> None:
    """A terminal whose encoding cannot write a character (``LC_ALL=C`` with
    ``PYTHONUTF8=0``, ``PYTHONIOENCODING=ascii``) gets ``?`` for it, never a
    UnicodeEncodeError; ``--json`` escapes it instead (``cli_common.json_text``)."""
    from forensics.cli_common import writes_unicode

    for stream in (sys.stdout, sys.stderr):
        if not writes_unicode(stream) and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")


# exceptions of library threads that are no error of the command: (the end of the thread's
# file name, its function, the exception's type). paramiko's SFTP read-ahead thread still
# sending a window's requests when the connection is lost (the read says so) fails then.
QUIET_THREAD_FAILURES = (("paramiko/sftp_file.py", "_prefetch_thread", OSError),)


def _thread_failed_hook(debug: bool) -> Any:
    """``threading.excepthook`` for one command: an exception no thread of a command caught is
    one line on stderr, never Python's traceback (with --debug, the traceback); those of
    QUIET_THREAD_FAILURES nothing."""

    def hook(args: Any) -> None:
        if debug or args.exc_type is SystemExit:
            threading.__excepthook__(args)
            return
        tb = args.exc_traceback
        while tb is not None:
            code = tb.tb_frame.f_code
            for file, func, kind in QUIET_THREAD_FAILURES:
                if issubclass(args.exc_type, kind) and code.co_name == func:
                    if code.co_filename.replace(os.sep, "/").endswith(file):
                        return
            tb = tb.tb_next
        name = getattr(args.thread, "name", None) or "?"
        echo(  # one line for people: made visible, secrets hidden
            f"Warning: internal error in a background thread ({name}): "
            f"{args.exc_type.__name__}: {args.exc_value} "
            "(this is a bug; rerun with --debug for the traceback)",
            err=True,
            wrap=False,
        )

    return hook


def _unexpected(exc: BaseException) -> None:
    """One line for an exception no command turned into a ForensicsError, and its exit."""
    known = _path_error(exc) if isinstance(exc, Exception) else None
    if known is not None:  # a path error no command caught: the one errno table says it
        click.echo(f"Error: {shown(str(known))}", err=True)
        sys.exit(known.exit_code)
    click.echo(
        f"Error: internal error: {type(exc).__name__}: {shown(str(exc))} "
        "(this is a bug; rerun with --debug for the traceback)",
        err=True,
    )
    sys.exit(EXIT_INTERNAL)


def shown(message: str) -> str:
    """An error line as printed: URL passwords hidden (forensics.urls), every other secret
    through the parser's one redaction (a message may quote a chain's `--api-key X`), and what
    a terminal would obey made visible (a file name holding ``\\r`` or U+202E, a line break:
    the error stays one line, forensics.terminal.visible)."""
    from forensics.terminal import visible
    from forensics_parsers.secrets import redact

    return visible(redact_url(redact(message)))


def _say_interrupted() -> None:
    """The one line of a Ctrl-C, once (forensics.entry says it only when this did not)."""
    global INTERRUPTED_SAID
    if not INTERRUPTED_SAID:
        INTERRUPTED_SAID = True
        click.echo("Interrupted.", err=True)
    sys.exit(EXIT_INTERRUPTED)


INTERRUPTED_SAID = False


def _path_error(exc: Exception) -> ForensicsError | None:
    """The typed error of ``hosts.base.PATH_ERRORS`` for an OSError on a named path (a name
    over NAME_MAX, a symlink loop, a file where a folder should be, ...), else None."""
    from forensics.hosts.base import PATH_ERRORS, path_error

    if not isinstance(exc, OSError) or exc.filename is None or exc.errno not in PATH_ERRORS:
        return None
    err = path_error(os.fsdecode(exc.filename), exc)
    return err if isinstance(err, ForensicsError) else None


def _close_hosts() -> None:
    """Close cached SSH connections (only if any host module was used)."""
    mod = sys.modules.get("forensics.hosts")
    if mod is not None:
        try:
            mod.close_all()
        except Exception:  # noqa: BLE001 - closing must never mask the command's outcome
            pass


if __name__ == "__main__":
    main()
