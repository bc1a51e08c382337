"""The library's exceptions and the exit-code contract.

The library raises these; the CLI turns them into one line, ``Error: <message>``, and the
exit code below. Messages name the thing, the cause and the fix. See docs/exit-codes.md.

One Ctrl-C, two KeyboardInterrupts: when SIGINT arrives while polars runs a query, polars
aborts it and raises its own KeyboardInterrupt, and Python's handler, tripped by the same
signal, raises a second one at the next check (polars 2.1: in 165 of 200 tries). A handler
that records what the interrupt left behind (``launcher``: the process group; ``ingest``: what
was committed) therefore begins with ``try: time.sleep(0) / except KeyboardInterrupt: pass``:
no check runs before that ``try`` is set up, and the pending second one fires inside it
(``signal.signal(SIGINT, SIG_IGN)`` does not help: it runs the pending handler first). It
stays four inline lines, not a helper: a call's first instruction is itself a check, so the
second interrupt would fire before the helper's own ``try``.
tests/test_bad_inputs.py reproduces it with real signals during real polars writes.

What an interrupt cut loose: a Ctrl-C that lands inside a context manager's ``__enter__`` after
it acquired (the store lock's generator has yielded, contextlib has not returned yet) or in its
``__exit__`` before it released, skips the ``with``'s own exit, so nothing releases it while the
exception lives: the frames of its traceback still hold the manager. A handler that writes to
the store after the interrupt (the launcher's `interrupted` record) then waited out the lock's
30 s and gave up, leaving the launch `registered`, with no process group for `forensics stop`
(a CI flake of tests/test_bad_inputs.py). Such a handler first calls ``release_interrupted``.
"""

from __future__ import annotations

# The exit-code contract (documented in docs/exit-codes.md and tested one by one).
EXIT_OK = 0
EXIT_INTERNAL = 1  # a bug, or a runtime failure with no better code
EXIT_USAGE = 2  # bad flags, a directory where a file was expected
EXIT_NOT_FOUND = 3  # input missing or unreadable, glob matched nothing, no run matched
EXIT_PARTIAL = 4  # some inputs or requests failed; summary printed
EXIT_REMOTE = 5  # SSH: unreachable, auth, host key
EXIT_DEADLINE = 6  # a deadline passed (SSH command, health wait, bench)
EXIT_STORE = 7  # the local store is locked, corrupt or the disk is full
EXIT_INTERRUPTED = 130  # Ctrl-C; partial results committed and marked


class ForensicsError(Exception):
    """Base class. ``exit_code`` is the CLI's exit status for this error."""

    exit_code = EXIT_INTERNAL

    def __init__(self, message: str, *, hint: str | None = None):
        self.message = message
        self.hint = hint
        super().__init__(message)

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} (try: {self.hint})"
        return self.message


class UsageError(ForensicsError):
    exit_code = EXIT_USAGE


class InputNotFound(ForensicsError):
    exit_code = EXIT_NOT_FOUND


class FileMissing(InputNotFound):
    """The path names nothing (ENOENT), locally or on a remote host."""


class PermissionDenied(InputNotFound):
    """The path exists but may not be read (EACCES, EPERM)."""


class NotRegularFile(UsageError):
    """A FIFO, socket, device or directory given where a log file was expected."""


class BadPath(UsageError):
    """The path cannot name a file: a symlink loop, a name over NAME_MAX, ``file.log/``."""


class NotALog(UsageError):
    """A regular file that holds no log text: an archive, an executable, binary data."""


class RunNotFound(ForensicsError):
    exit_code = EXIT_NOT_FOUND


class ParseError(ForensicsError):
    exit_code = EXIT_USAGE


class PartialFailure(ForensicsError):
    exit_code = EXIT_PARTIAL


class HostUnreachable(ForensicsError):
    exit_code = EXIT_REMOTE


class HostKeyError(ForensicsError):
    exit_code = EXIT_REMOTE


class AuthFailed(ForensicsError):
    exit_code = EXIT_REMOTE


class RemoteError(ForensicsError):
    exit_code = EXIT_REMOTE


class DeadlineExceeded(ForensicsError):
    exit_code = EXIT_DEADLINE


class StoreError(ForensicsError):
    exit_code = EXIT_STORE


class StoreLocked(StoreError):
    pass


class LaunchFailed(ForensicsError):
    exit_code = EXIT_INTERNAL


class ConfigError(ForensicsError):
    exit_code = EXIT_USAGE


class StreamDamaged(PartialFailure):
    """A compressed log cut short or damaged: what decoded before the damage was kept.

    ``truncated`` tells a stream that simply ends early from one with bad bytes inside.
    Never an EOFError: click reads that as Ctrl-D and prints "Interrupted." (exit 130).
    """

    def __init__(self, message: str, *, truncated: bool, kept: int, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.truncated = truncated
        self.kept = kept  # bytes of text decoded before the damage
        if not kept:
            self.exit_code = EXIT_NOT_FOUND  # nothing could be read: unreadable, not partial


class BodyTooLarge(ForensicsError):
    """A network answer (HTTP body, SSE event) past its byte cap."""

    exit_code = EXIT_INTERNAL


def release_interrupted(exc: BaseException) -> None:
    """Release what the frames ``exc`` passed through still hold (a store lock whose context
    manager the interrupt stopped half-way; see the module doc): their locals are cleared, the
    generators they held closed, which runs their ``finally`` now. The traceback's lines stay
    (``--debug`` still shows where it landed); the running frame is left alone."""
    import traceback

    traceback.clear_frames(exc.__traceback__)


def interrupt_inside(exc: BaseException | None) -> bool:
    """Is ``exc`` an interrupt (Ctrl-C, SIGTERM, SIGHUP: a KeyboardInterrupt, forensics.entry)
    in disguise? One that lands in a class body's ``__set_name__`` while a module is imported
    comes out as ``RuntimeError: Error calling __set_name__`` (Python 3.11), its cause the
    KeyboardInterrupt; an error raised while one was handled has it as its context."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False
