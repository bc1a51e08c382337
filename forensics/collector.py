"""Python's garbage collector through the start of a command (issue 15; docs/performance.md,
"The tail of one ingest, thirteenth stop").

The start of an ingest imports the CLI, the ingest's modules and the parser (polars): tens of
thousands of objects that live as long as the process, and almost no garbage. The collector
still ran over them, 78 times before the parse of the 100 MB busy mix (~8 ms of the one core
the start runs on), to free 365 objects. The entry point pauses it (``pause``) before it
imports anything else, an ingest worker through its imports; the command resumes it
(``resume``) as it begins: the CLI's group for every command but ingest, which resumes it
once the parser is imported (forensics.ingest.file._freeze_long_lived), else once its first
file is in (unchanged, given to a worker) or as it returns. What is alive then is frozen: the
cycles already garbage are never freed, a few hundred objects, once. Only the standard library
is imported here."""

from __future__ import annotations

import gc

_paused: list[bool] = []  # paused by ``pause`` and not resumed yet


def pause() -> None:
    """No collection until ``resume`` (a no-op where the collector is off already)."""
    if gc.isenabled() and not _paused:
        gc.disable()
        _paused.append(True)


def resume() -> None:
    """The collector back on, where ``pause`` turned it off (else a no-op). What is alive now
    is frozen first (``gc.freeze``: the start's objects live as long as the process): the
    collector's next pass would otherwise walk every object the start made, all of them in
    its youngest generation."""
    if _paused:
        _paused.clear()
        gc.freeze()
        gc.enable()
