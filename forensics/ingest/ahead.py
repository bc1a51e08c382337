"""A parallel ingest's logs opened ahead of their turn (issue 15, eight hosts).

Opening a log (``forensics.logsource.open_log``: its stat and its first bytes) is a few round
trips over SSH. The main process opened one log after the other, and gave each to a worker
started only then, which imported the parser (~0.3 s of CPU) before it read a byte: the Nth
host's bytes were parsed last by the sum of N openings, N spawns and its worker's import.

Here a thread per host opens that host's logs in input order, at most ``window`` (the
ingest's ``--jobs``) past the one the main process took last, so the logs of N hosts are
opened at once; the main process takes each (``take``) in its turn, as ``_open`` would have
opened it, and, while it waits, starts a worker for every log opened that a worker will
parse (``big``), which then imports the parser while the others are opened and fed. What is
opened ahead is a stat and ``HEAD_BYTES``: nothing is held open, nothing is written."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

JOIN_SECONDS = 5.0  # an opening stuck on its host at the ingest's end (bounded there by its
# op timeout) is not waited for longer: its thread only reads


class OpenAhead:
    """The logs ``files`` ((host, path), in input order) opened by a thread per host,
    ``window`` ahead of the last one taken."""

    def __init__(self, files: list[tuple[Any, str]], window: int):
        self.files = files
        self._at = {(h.name, p): i for i, (h, p) in enumerate(files)}
        self._window = max(1, window)
        self._done: dict[int, tuple[bool, Any]] = {}  # i -> (opened, (src, hasher) or error)
        self._taken = 0  # the next log to take: those before it were taken
        self._stop = False
        self._cond = threading.Condition()
        per_host: dict[str, list[int]] = {}
        for i, (host, _) in enumerate(files):
            per_host.setdefault(host.name, []).append(i)
        self._threads: list[threading.Thread] = []
        try:
            for order in per_host.values():
                thread = threading.Thread(
                    target=self._open_in_turn, args=(order,), name="forensics-open", daemon=True
                )
                self._threads.append(thread)  # listed first: a Ctrl-C in start leaves none out
                thread.start()
        except BaseException:
            self.close()
            raise

    def _open_in_turn(self, order: list[int]) -> None:
        """(thread) Open this host's logs, each once it is within the window."""
        from forensics.ingest.file import _log_source

        for i in order:
            with self._cond:
                while not self._stop and i >= self._taken + self._window:
                    self._cond.wait()
                if self._stop:
                    return
            host, path = self.files[i]
            try:
                got: tuple[bool, Any] = (True, _log_source(host, path))
            except BaseException as exc:  # noqa: BLE001 - raised where it is taken, in turn
                got = (False, exc)
            with self._cond:
                self._done[i] = got
                self._cond.notify_all()

    def take(self, host: Any, path: str, waiting: Callable[[], None]) -> tuple[Any, Any]:
        """(the log source, its hasher) of ``path``, opened ahead (or now, if it is none of
        ``files``), its error raised here; ``waiting()`` is called while it is not opened
        yet, and once it is."""
        from forensics.ingest.file import _log_source

        i = self._at.get((host.name, path))
        if i is None:
            return _log_source(host, path)
        with self._cond:
            self._taken = max(self._taken, i + 1)
            self._cond.notify_all()
        while True:
            waiting()
            with self._cond:
                if i in self._done:
                    opened, got = self._done[i]
                    for gone in [k for k in self._done if k < i]:  # taken, or left unused
                        del self._done[gone]
                    break
                self._cond.wait(0.5)
        if not opened:
            raise got
        return got

    def opened(self) -> list[Any]:
        """The log sources opened and not taken yet, and the one taken last, in input order."""
        with self._cond:
            return [got[0] for i, (ok, got) in sorted(self._done.items()) if ok]

    def close(self) -> None:
        """No more is opened; the threads end (joined, each at most JOIN_SECONDS)."""
        with self._cond:
            self._stop = True
            self._done.clear()
            self._cond.notify_all()
        for thread in self._threads:
            if thread.is_alive() or thread.ident is not None:
                thread.join(JOIN_SECONDS)


def wanted(ahead: OpenAhead, records: dict[str, Any]) -> int:
    """How many of the logs ``ahead.opened()`` a worker is likely to parse: POOL_MIN_BYTES or
    more past what the store holds of it (``records``: the source records). A guess (what
    is parsed is ``_compare``'s to decide, in turn): an unchanged log starts no worker."""
    from forensics.ingest.identity import source_id
    from forensics.ingest.pool import POOL_MIN_BYTES

    n = 0
    for src in ahead.opened():
        st, prev = src.stat, records.get(source_id(src.host.name, src.path)) or {}
        if prev.get("size") == st.size and prev.get("mtime") == st.mtime:
            continue
        grown = prev.get("resume") and st.size >= (prev.get("size") or 0)
        start = (prev.get("offset") or 0) if grown else 0
        n += int(st.size - start >= POOL_MIN_BYTES)
    return n
