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
opened ahead is a stat and ``HEAD_BYTES``: nothing is held open, nothing is written.

With two remote inputs or more, the logs of each input are handed over as soon as its host is
connected and its paths looked up (``add``, from forensics/ingest/inputs.py's lookup threads),
before the other inputs are: a host that connects slowly holds back no other host's openings
(docs/performance.md, "A slow host, twelfth stop"); while the inputs are listed, a log opened
is taken out of turn (``ready``, ``take``) and fed to a worker (forensics/ingest/early.py)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

JOIN_SECONDS = 5.0  # an opening stuck on its host at the ingest's end (bounded there by its
# op timeout) is not waited for longer: its thread only reads


class OpenAhead:
    """A parallel ingest's logs opened by a thread per host, ``window`` (the batch's jobs)
    ahead of the last one taken. The logs come as each input's are looked up (``add``: a
    host that connects late holds back no other host's openings), then in their final order
    (``place``: (host, path) in input order, and the ingest's ``_Batch``, whose pool starts
    a worker for each log opened that one will parse)."""

    def __init__(self, window: int):
        self.batch: Any = None
        self._window = max(1, window)
        self._groups: dict[int, list[tuple[Any, str]]] = {}  # input -> its logs, until placed
        # (host, path) -> its place among the logs: the least it can be until they are
        # placed (an input not looked up yet counts none), then its place
        self._rank: dict[tuple[str, str], int] = {}
        self._todo: dict[str, list[tuple[Any, str]]] = {}  # host -> its logs not opened
        self._done: dict[tuple[str, str], tuple[bool, Any]] = {}  # (opened, (src, hasher) or error)
        self._taken = 0  # the next log to take: those before it were taken
        self._placed = self._stop = False
        self.cond = threading.Condition()
        self.version = 0  # counts the changes a waiter wakes for (``poke``): logs added, opened
        self._threads: dict[str, threading.Thread] = {}  # host -> its opening thread

    def add(self, k: int, files: list[tuple[Any, str]]) -> None:
        """(any thread) Input ``k``'s logs, looked up: opened from now on, within the window."""
        with self.cond:
            if self._placed or self._stop:
                return
            self._groups[k] = files
            order = [f for _, group in sorted(self._groups.items()) for f in group]
            self._queue(order)

    def poke(self) -> None:
        """(any thread) Wake whoever waits for a change (forensics/ingest/early.py: an input
        looked up, or failed)."""
        with self.cond:
            self._changed()

    def known(self) -> int:
        """How many logs are known so far (each once)."""
        with self.cond:
            return len(self._rank)

    def place_of(self, host: Any, path: str) -> tuple[int, int]:
        """(the least place of ``path`` so far, how many logs are known)."""
        with self.cond:
            return self._rank.get((host.name, path), 0), len(self._rank)

    def ready(self) -> list[tuple[Any, str]]:
        """(host, path) of the logs opened without error and not taken yet, in their order."""
        with self.cond:
            done = [(self._rank[k], got[0].host, k[1]) for k, (ok, got) in self._done.items() if ok]
        return [(host, path) for _, host, path in sorted(done, key=lambda d: d[0])]

    def place(self, files: list[tuple[Any, str]], batch: Any) -> None:
        """The logs, all of them, in input order (deduplicated): each is taken in its turn."""
        with self.cond:
            if self._stop:
                return
            self.batch, self._placed = batch, True
            self._queue(files)

    def _queue(self, order: list[tuple[Any, str]]) -> None:
        """(under the lock) ``order`` ranked; its logs not seen yet handed to their host's
        thread (started with the host's first log), each host's in their order."""
        rank: dict[tuple[str, str], int] = {}
        for host, path in order:
            key = (host.name, path)
            if key not in rank:
                rank[key] = len(rank)
                if key not in self._rank:
                    self._todo.setdefault(host.name, []).append((host, path))
        self._rank = rank
        for name, todo in self._todo.items():  # placed: only the logs of the ingest
            todo[:] = sorted((hp for hp in todo if (name, hp[1]) in rank), key=self._order)
        for key in [key for key in self._done if key not in rank]:
            del self._done[key]
        self._changed()
        for name in self._todo.keys() - self._threads.keys():
            thread = threading.Thread(
                target=self._open_in_turn, args=(name,), name="forensics-open", daemon=True
            )
            self._threads[name] = thread  # listed first: a Ctrl-C in start leaves none out
            thread.start()

    def _order(self, hp: tuple[Any, str]) -> int:
        return self._rank[(hp[0].name, hp[1])]

    def _next(self, name: str) -> tuple[Any, str] | None:
        """(under the lock) The next log of host ``name`` to open, once it is within the
        window; None when there is none, nor will be."""
        todo = self._todo[name]
        while not self._stop:
            if todo and self._order(todo[0]) < self._taken + self._window:
                return todo.pop(0)
            if not todo and self._placed:
                return None
            self.cond.wait()
        return None

    def _open_in_turn(self, name: str) -> None:
        """(thread) Open host ``name``'s logs, each once it is within the window."""
        from forensics.ingest.file import _log_source

        while True:
            with self.cond:
                nxt = self._next(name)
            if nxt is None:
                return
            host, path = nxt
            try:
                got: tuple[bool, Any] = (True, _log_source(host, path))
            except BaseException as exc:  # noqa: BLE001 - raised where it is taken, in turn
                got = (False, exc)
            with self.cond:
                if (name, path) in self._rank:  # else: none of the logs placed
                    self._done[(name, path)] = got
                self._changed()

    def _changed(self) -> None:
        """(under the lock) Something a waiter waits for changed."""
        self.version += 1
        self.cond.notify_all()

    def take(self, host: Any, path: str, like: str | None = None) -> tuple[Any, Any]:
        """(the log source, its hasher) of ``path``, opened ahead (or now, if it is none of
        the logs placed, or if the store's digest ``like`` is in an algorithm its hasher
        does not compute: an older store's record), its error raised here; meanwhile, a
        worker starts for each log opened that one will parse (``start_workers``). Before
        the logs are placed, one opened (``ready``) is taken out of turn (forensics/ingest/
        early.py), any other opened now."""
        from forensics.ingest.file import _log_source

        key = (host.name, path)
        i = self._rank.get(key) if self._placed else None
        if i is None:
            got = self._out_of_turn(key)
            if got is None or not got[1].computes(like):
                return _log_source(host, path, like)
            return got
        with self.cond:
            self._taken = max(self._taken, i + 1)
            self.cond.notify_all()
        while True:
            start_workers(self)
            with self.cond:
                if key in self._done:
                    opened, got = self._done[key]
                    for gone in [
                        k for k in self._done if self._rank.get(k, -1) < i
                    ]:  # taken, unused
                        del self._done[gone]
                    break
                self.cond.wait(0.5)
        if not opened:
            raise got
        if not got[1].computes(like):  # what is opened ahead holds nothing open: again
            return _log_source(host, path, like)
        return got

    def _out_of_turn(self, key: tuple[str, str]) -> Any:
        """A log opened without error before the logs are placed, taken: (source, hasher),
        or None. Those within the window past it may open now."""
        with self.cond:
            if self._placed or not self._done.get(key, (False,))[0]:
                return None
            self._taken = max(self._taken, self._rank[key] + 1)
            self._changed()
            return self._done.pop(key)[1]

    def opened(self) -> list[Any]:
        """The log sources opened and not taken yet, and the one taken last, in input order."""
        with self.cond:
            done = sorted(self._done.items(), key=lambda kv: self._rank[kv[0]])
            return [got[0] for _, (ok, got) in done if ok]

    def close(self) -> None:
        """No more is opened; the threads end (joined, each at most JOIN_SECONDS)."""
        with self.cond:
            self._stop = True
            self._done.clear()
            self.cond.notify_all()
            threads = list(self._threads.values())
        for thread in threads:
            if thread.is_alive() or thread.ident is not None:
                thread.join(JOIN_SECONDS)


def close_ahead(ahead: OpenAhead | None) -> None:
    """An ``OpenAhead`` of an ingest that will take nothing from it: closed."""
    if ahead is not None:
        ahead.close()


def start_workers(ahead: OpenAhead) -> None:
    """(the main process, while a log is taken) A worker started for each log opened that a
    worker is likely to parse (``wanted``): it imports the parser meanwhile."""
    from forensics.ingest.pool import Pool

    batch = ahead.batch
    n = wanted(ahead, batch.tx.man.sources) if batch is not None else 0
    if n and batch.pool is None:
        batch.pool = Pool.of_store(batch.store.root, batch.jobs)
    if n:
        batch.pool.prestart(n)


def early_pool(root: Path, inputs: list[str], jobs: int | None) -> Any:
    """Two remote inputs or more (a parallel ingest, unless one names no file): the pool of
    the ingest (forensics.ingest.pool.Pool), a worker per remote input started now (``jobs``
    at most), so that they import the parser while the hosts connect and their logs are
    opened (~0.3 s: they waited for it after). None otherwise. One never given a file is
    killed at the end (it only imported)."""
    n = remote_inputs(inputs, jobs)
    if not n:
        return None
    from forensics.ingest.heap import default_jobs
    from forensics.ingest.pool import Pool

    pool = Pool.of_store(root, jobs or default_jobs(), expected=n)
    try:
        pool.prestart_beside(min(n, pool.jobs))  # in a thread: the hosts connect meanwhile
    except BaseException:
        drop_pool(pool)
        raise
    return pool


def remote_inputs(inputs: list[str], jobs: int | None) -> int:
    """How many of ``inputs`` are remote where that makes an early pool (two or more, and
    ``jobs`` not 1), else 0: ``early_pool``'s test, and the entry point's for the pool's
    zygote (forensics/ingest/zygote.py ``early``)."""
    from forensics.hosts import is_remote

    n = sum(1 for text in inputs if is_remote(text))
    return n if n >= 2 and jobs != 1 else 0


def drop_pool(pool: Any) -> None:
    """A pool of ``early_pool`` no file was given to: its workers stopped, its folder gone."""
    if pool is not None:
        from forensics.store.staging import remove_staging

        pool.close()
        remove_staging(pool.staging)


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
