"""A fault-injecting SGLang look-alike for the bench tests (bad-inputs.md §2.3, H01-H11).

One aiohttp server per test session, on a free 127.0.0.1 port, in a background thread.
Each scenario lives under its own path prefix, so a benchmark pointed at
``faultserver.url("h03_drop")`` talks to ``/s/h03_drop/generate`` and friends:

    ok            a correct stream: 4 chunks of 2 tokens (speculative-style), finish, [DONE]
    h01_500       HTTP 500 with a body;  h01_mixed: every 2nd request 429, the others ok
    h03_drop      3 events, then the socket is closed (no finish, no [DONE])
    h04_<variant> the ok stream in an unusual but valid SSE shape (see H04_VARIANTS),
                  or h04_bad_json: a broken event (a real protocol error)
    h05_ttft      sleeps before the first event;  h05_stall: stalls after 2 events
    h07_empty     200 with only [DONE]
    h08_nousage   OpenAI stream without the usage chunk
    slow          like ok but 0.2 s between events (for Ctrl-C tests)
    h06_<mode>    the slow stream, with a sick /health (see H06_HEALTH): ``flap`` answers
                  503, 200, 503, ... (a counter per scenario); ``slowhealth`` answers 200
                  after 1 s; ``flapslow`` both; ``hanghealth`` answers only after 30 s

Endless answers (issue 14, bounded memory), each until the client hangs up or ENDLESS_MAX:

    endless_line    a 200 event stream whose first line never ends (no newline)
    endless_event   ``data:`` lines that never reach the blank line ending the event
    endless_info    /server_info (and /get_server_info) answering a JSON body without end
    endless_health  /health answering 200 with a body without end
    hang_flush      /flush_cache answers only after FLUSH_HANG_S (a client with a 10 s grace
                    after its deadline would wait for it; one bounded by its deadline does not)

``faultserver_factory(die_after=N)`` starts a private server that stops listening (and
drops its connections) after N requests: a server that dies mid-benchmark (H02).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import uuid

import pytest

TOKENS_PER_CHUNK = 2
CHUNKS = 4
OK_TOKENS = TOKENS_PER_CHUNK * CHUNKS  # 8 tokens in 4 chunks; verify_ct 4 -> accept len 2.0
STALL_S = 30.0  # far beyond every client deadline the tests set
FLUSH_HANG_S = 4.0
ENDLESS_MAX = 1 << 30  # an "endless" body stops here if the client never hangs up

HEALTH_SLOW_S = 1.0
# H06: scenario -> (/health alternates 503/200, seconds before /health answers)
H06_HEALTH = {
    "h06_flap": (True, 0.0),
    "h06_slowhealth": (False, HEALTH_SLOW_S),
    "h06_flapslow": (True, HEALTH_SLOW_S),
    "h06_hanghealth": (False, STALL_S),
}

H04_VARIANTS = (
    "nospace",
    "comments",
    "event_id",
    "crlf",
    "cr",
    "split",
    "bom",
    "multiline",
    "noterm",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def native_events() -> list[dict]:
    out = []
    for i in range(1, CHUNKS + 1):
        n = i * TOKENS_PER_CHUNK
        meta = {"id": "r1", "finish_reason": None, "prompt_tokens": 12, "completion_tokens": n}
        if i == CHUNKS:
            meta["finish_reason"] = {"type": "length", "length": n}
            meta["spec_verify_ct"] = CHUNKS
            meta["e2e_latency"] = 0.01
        out.append({"text": "tok " * n, "meta_info": meta})
    return out


def chat_events(usage: bool = True) -> list[dict]:
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    out = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    for _ in range(CHUNKS):
        out.append(
            {
                **base,
                "choices": [{"index": 0, "delta": {"content": "tok " * TOKENS_PER_CHUNK}}],
            }
        )
    out.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    if usage:
        out.append(
            {
                **base,
                "choices": [],
                "usage": {
                    "prompt_tokens": 12,
                    "completion_tokens": OK_TOKENS,
                    "total_tokens": 12 + OK_TOKENS,
                },
            }
        )
    return out


def sse(events: list[dict], done: bool = True) -> list[bytes]:
    out = [b"data: " + json.dumps(e, separators=(",", ":")).encode() + b"\n\n" for e in events]
    if done:
        out.append(b"data: [DONE]\n\n")
    return out


def variant_bytes(variant: str, events: list[dict]) -> list[bytes]:
    """The same events as valid-but-unusual SSE byte writes (H04)."""
    enc = [json.dumps(e, separators=(",", ":")) for e in events] + ["[DONE]"]
    if variant == "nospace":
        return [f"data:{d}\n\n".encode() for d in enc]
    if variant == "comments":
        return [f": keep-alive\n\ndata: {d}\n: ping\n\n".encode() for d in enc]
    if variant == "event_id":
        return [
            f"id: {i}\nevent: message\nretry: 1000\ndata: {d}\n\n".encode()
            for i, d in enumerate(enc)
        ]
    if variant == "crlf":
        return [f"data: {d}\r\n\r\n".encode() for d in enc]
    if variant == "cr":
        return [f"data: {d}\r\r".encode() for d in enc]
    if variant == "split":
        out = []
        for d in enc:
            b = f"data: {d}\r\n\r\n".encode()
            # split inside the JSON and between CR and LF
            out += [b[: len(b) // 2], b[len(b) // 2 : -1], b[-1:]]
        return out
    if variant == "bom":
        parts = [f"data: {d}\n\n".encode() for d in enc]
        return [b"\xef\xbb", b"\xbf" + parts[0], *parts[1:]]
    if variant == "multiline":
        out = []
        for d in enc:
            if d.startswith("{"):
                # break the JSON at a comma: the joined data lines are the same JSON
                head, _, tail = d.partition(",")
                out.append(f"data: {head},\ndata: {tail}\n\n".encode())
            else:
                out.append(f"data: {d}\n\n".encode())
        return out
    if variant == "noterm":
        parts = [f"data: {d}\n\n".encode() for d in enc]
        parts[-1] = parts[-1].rstrip(b"\n")
        return parts
    raise ValueError(variant)


class FaultServer:
    def __init__(self, *, die_after: int | None = None):
        self.port = free_port()
        self.die_after = die_after
        self.counts: dict[str, int] = {}
        self.health_counts: dict[str, int] = {}  # /health probes per scenario (with its ~tag)
        self.paths: list[str] = []
        self.bodies: list[dict] = []
        self._loop = asyncio.new_event_loop()
        self._runner = None
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._ready = threading.Event()
        self.dead = False

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, scenario: str) -> str:
        """Base URL of a scenario; ``name~tag`` is ``name`` with its own request counter."""
        return f"{self.base}/s/{scenario}"

    def fresh(self, scenario: str) -> str:
        return self.url(f"{scenario}~{uuid.uuid4().hex[:8]}")

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> FaultServer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fault server did not start")
        return self

    def stop(self) -> None:
        if self._runner is not None:
            fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
            try:
                fut.result(10)
            except Exception:
                pass

        async def _cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(_cancel_all(), self._loop).result(10)
        except Exception:
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _serve(self) -> None:
        from aiohttp import web

        asyncio.set_event_loop(self._loop)
        # Cut connections are the point here; keep aiohttp's per-request tracebacks quiet.
        logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
        app = web.Application()
        app.router.add_route("*", "/s/{scenario}/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        self._loop.run_until_complete(site.start())
        self._ready.set()
        self._loop.run_forever()

    # -- handlers ----------------------------------------------------------------------
    async def _handle(self, request):
        from aiohttp import web

        if self.dead:  # a dead server: keep-alive connections are cut too
            request.transport.close()
            raise ConnectionResetError("fault server is dead")
        scen = request.match_info["scenario"]
        tail = request.match_info["tail"]
        self.paths.append(f"{request.method} /{tail}")
        base = scen.split("~")[0]
        if tail == "health" and base == "endless_health":
            return await self._endless(request, b"", b"ok " * 20000)
        if tail == "health":
            return await self._health(scen)
        if tail == "flush_cache" and base == "hang_flush":
            await asyncio.sleep(FLUSH_HANG_S)
        if tail == "flush_cache":
            return web.Response(text="Cache flushed.\n")
        if tail in ("server_info", "get_server_info") and base == "endless_info":
            return await self._endless(request, b'{"version": "', b"0" * 65536)
        if tail in ("server_info", "get_server_info"):
            return web.json_response(
                {"version": "0.5.9", "internal_states": [{"avg_spec_accept_length": 2.5}]}
            )
        if tail == "v1/models":
            return web.json_response({"data": [{"id": "fault-model"}]})
        n = self.counts[scen] = self.counts.get(scen, 0) + 1
        body = await request.json()
        self.bodies.append(body)
        api = "native" if tail == "generate" else "chat"
        try:
            # "name~tag" behaves like "name" with its own request counter
            return await self._stream(request, scen.split("~")[0], n, api, body)
        finally:
            if self.die_after is not None and n >= self.die_after and not self.dead:
                self.dead = True
                for site in list(self._runner.sites):
                    await site.stop()

    async def _endless(self, request, head: bytes, piece: bytes, ctype: str = "text/plain"):
        """A 200 whose body never ends: ``head``, then ``piece`` again and again."""
        from aiohttp import web

        resp = web.StreamResponse(headers={"Content-Type": ctype})
        await resp.prepare(request)
        sent = 0
        try:
            await resp.write(head)
            while sent < ENDLESS_MAX:
                await resp.write(piece)
                sent += len(piece)
        except (ConnectionError, RuntimeError):
            pass  # the client hung up: what it should do past its cap
        return resp

    async def _health(self, scen):
        from aiohttp import web

        k = self.health_counts[scen] = self.health_counts.get(scen, 0) + 1
        flap, delay = H06_HEALTH.get(scen.split("~")[0], (False, 0.0))
        if delay:
            await asyncio.sleep(delay)
        if flap and k % 2 == 1:
            return web.Response(status=503, text="unhealthy\n")
        return web.Response(text="")

    async def _stream(self, request, scen, n, api, body):
        from aiohttp import web

        if scen == "endless_line":
            return await self._endless(request, b"data: ", b"x" * 65536, "text/event-stream")
        if scen == "endless_event":
            return await self._endless(
                request, b"", b"data: " + b"y" * 1000 + b"\n", "text/event-stream"
            )
        if scen == "h01_500" or (scen == "h01_mixed" and n % 2 == 0):
            status = 500 if scen == "h01_500" else 429
            return web.Response(status=status, text=f"boom #{n}: server error body")
        events = native_events() if api == "native" else chat_events(usage=scen != "h08_nousage")
        if scen == "h07_empty":
            writes = [b"data: [DONE]\n\n"]
        elif scen.startswith("h04_") and scen != "h04_bad_json":
            writes = variant_bytes(scen[4:], events)
        elif scen == "h04_bad_json":
            writes = (
                sse(events[:1])[:1] + [b'data: {"text": "x", "meta_info": {\n\n'] + sse(events[1:])
            )
        else:
            writes = sse(events)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if scen == "h05_ttft":
            await asyncio.sleep(STALL_S)
        try:
            for i, w in enumerate(writes):
                if scen == "h03_drop" and i == 3:
                    request.transport.close()
                    return resp
                if scen == "h05_stall" and i == 2:
                    await asyncio.sleep(STALL_S)
                await resp.write(w)
                if scen == "slow" or scen in H06_HEALTH:
                    await asyncio.sleep(0.2)
                elif scen.startswith("h04_"):
                    await asyncio.sleep(0.005)  # separate TCP writes
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # the client went away (it timed out or was interrupted)
        return resp


@pytest.fixture(scope="session")
def faultserver():
    srv = FaultServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def faultserver_factory():
    started: list[FaultServer] = []

    def make(**kw) -> FaultServer:
        srv = FaultServer(**kw).start()
        started.append(srv)
        return srv

    yield make
    for srv in started:
        srv.stop()
