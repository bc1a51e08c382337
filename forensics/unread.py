"""Modules a library imports at its own import but uses only in rare calls: created when
imported, their code run when an attribute of theirs is first read (``RUN_WHEN_READ``).

polars' own import runs ``import importlib.metadata`` (polars/io/iceberg/_plugin.py, for one
version lookup of an Iceberg scan): ~12 ms of email, zipfile, csv, importlib.resources...
before the parse of every ingest, which never reads it (docs/performance.md, "The start of
one ingest, twelfth stop"). ``install`` puts the finder first in ``sys.meta_path``: the entry
point (forensics/entry.py) and an ingest worker (forensics/ingest/pool.py) do, before polars
is imported. Only the standard library, nothing else imported.
"""

RUN_WHEN_READ = frozenset({"importlib.metadata"})


def wrapped_spec(me: object, name: str, path: object, target: object, wrap: type) -> object:
    """(a ``sys.meta_path`` finder ``me``) The spec of ``name`` as the finders after it give
    it, its loader wrapped by ``wrap`` (a ``Wrapping``), or None. Also used by the entry
    point's finder of the imports an interrupt must wait for (forensics/entry.py)."""
    import sys

    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if isinstance(finder, type(me)) or find is None:
            continue
        spec = find(name, path, target)
        if spec is not None:
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = wrap(spec.loader, name)
            return spec
    return None


class Wrapping:
    """A module's loader, its ``exec_module`` a subclass's; everything else the real one's."""

    def __init__(self, loader: object, name: str):
        self._loader = loader
        self._name = name

    def __getattr__(self, attr: str) -> object:  # resources, is_package, ...: the real loader's
        return getattr(self._loader, attr)

    def create_module(self, spec: object) -> object:
        return self._loader.create_module(spec)  # type: ignore[attr-defined]


class _Unread:
    """A ``sys.meta_path`` finder: the spec of a RUN_WHEN_READ module, as the other finders
    give it, with a loader that leaves it empty (its name, spec, path set: submodules import)
    until an attribute it lacks is read (a module ``__getattr__``, PEP 562); then, once, in
    whichever thread reads first (the others wait), its code runs in it, as an import would."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        if name not in RUN_WHEN_READ:
            return None
        return wrapped_spec(self, name, path, target, _RunWhenRead)


class _RunWhenRead(Wrapping):
    def exec_module(self, module: object) -> None:
        import _thread

        lock, loader, ran = _thread.RLock(), self._loader, []

        def __getattr__(attr: str) -> object:  # noqa: N807 - the module's (PEP 562)
            with lock:  # the others wait; its own code, reading itself, finds what ran so far
                if not ran:
                    ran.append(True)
                    loader.exec_module(module)  # type: ignore[attr-defined]
                    if vars(module).get("__getattr__") is __getattr__:
                        del vars(module)["__getattr__"]
            try:
                return vars(module)[attr]
            except KeyError:
                raise AttributeError(
                    f"module {module.__name__!r} has no attribute {attr!r}"  # type: ignore[attr-defined]
                ) from None

        vars(module)["__getattr__"] = __getattr__


def install() -> None:
    import sys

    if not any(isinstance(f, _Unread) for f in sys.meta_path):
        sys.meta_path.insert(0, _Unread())
