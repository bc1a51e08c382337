"""``ssh -L``: a local TCP port forwarded over an SSH host's transport."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import TYPE_CHECKING, Any

from forensics.hosts.base import DEFAULT_CONNECT_TIMEOUT

if TYPE_CHECKING:
    from forensics.hosts.ssh import SSHHost


class PortForward:
    """``ssh -L 127.0.0.1:<free port>:REMOTE_HOST:REMOTE_PORT`` over an ``SSHHost``'s transport.

    One thread moves bytes both ways for every connection (a selector over the accepted
    sockets and their channels). ``channels`` counts the connections forwarded; ``errors``
    holds why a channel could not be opened (the remote port closed, say), and such a client
    sees its connection closed at once, as with ``ssh -L``.
    """

    def __init__(self, host: SSHHost, remote_host: str, remote_port: int):
        self.host, self.remote = host, (remote_host, remote_port)
        self.channels = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(256)
        self._listener.setblocking(False)
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(
            target=self._loop, name=f"forensics-forward-{self.port}", daemon=True
        )

    def __enter__(self) -> PortForward:
        self.host._transport()  # connect now: a refused login fails here, not per request
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        with contextlib.suppress(OSError):
            self._listener.close()

    def _open(self, client: socket.socket) -> Any:
        try:
            chan = self.host._transport().open_channel(
                "direct-tcpip", self.remote, client.getpeername(), timeout=DEFAULT_CONNECT_TIMEOUT
            )
        except Exception as exc:  # noqa: BLE001 - refused, transport gone: this client only
            self.errors.append(f"{self.host.name}: {self.remote[0]}:{self.remote[1]}: {exc}")
            return None
        self.channels += 1
        return chan

    def _loop(self) -> None:
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ, None)
        peers: dict[Any, Any] = {}

        def drop(end: Any) -> None:
            other = peers.pop(end, None)
            for x in (end, other):
                if x is None:
                    continue
                peers.pop(x, None)
                with contextlib.suppress(Exception):
                    sel.unregister(x)
                with contextlib.suppress(Exception):
                    x.close()

        try:
            while not self._stop.is_set():
                for key, _ in sel.select(timeout=0.2):
                    if key.data is None:
                        try:
                            client, _ = self._listener.accept()
                        except (BlockingIOError, OSError):
                            continue
                        client.setblocking(True)
                        chan = self._open(client)
                        if chan is None:
                            client.close()
                            continue
                        peers[client], peers[chan] = chan, client
                        sel.register(client, selectors.EVENT_READ, "end")
                        sel.register(chan, selectors.EVENT_READ, "end")
                        continue
                    src = key.fileobj
                    dst = peers.get(src)
                    if dst is None:
                        continue
                    try:
                        data = src.recv(1 << 16)
                        if data:
                            dst.sendall(data)
                    except Exception:  # noqa: BLE001 - a reset end closes its pair
                        data = b""
                    if not data:
                        drop(src)
        finally:
            for end in list(peers):
                drop(end)
            sel.close()
