"""What a response stream said so far, per API: each event's new tokens, the finish reason,
the server's token count (meta_info / usage) and its speculative-decoding fields."""

from __future__ import annotations

import json
from typing import Any

from forensics.bench.sse import SSEError, SSEEvent


class StreamState:
    """What the stream said so far (API-specific interpretation of each event)."""

    def __init__(self, api: str):
        self.api = api
        self.tokens: int | None = None  # server-reported count (cumulative)
        self.text_len = 0
        self.content_chunks = 0
        self.done = False
        self.finish: str | None = None
        self.final_meta: dict[str, Any] | None = None
        self.usage: dict[str, Any] | None = None
        self.error: str | None = None
        self.spec: dict[str, Any] | None = None

    def event(self, ev: SSEEvent) -> int:
        """Interpret one event; return how many new tokens it carried (0 if none/unknown)."""
        data = ev.data
        if data == "[DONE]":
            self.done = True
            return 0
        if not data.strip():
            return 0
        if ev.event == "error":
            self.error = data[:500]
            return 0
        if ev.event not in ("", "message"):
            return 0
        try:
            obj = json.loads(data)
        except json.JSONDecodeError as exc:
            raise SSEError(f"event data is not JSON ({exc.msg}): {data[:120]!r}") from None
        if not isinstance(obj, dict):
            raise SSEError(f"event data is not a JSON object: {data[:120]!r}")
        if "error" in obj and obj["error"]:
            err = obj["error"]
            self.error = (err.get("message") if isinstance(err, dict) else str(err)) or str(err)
            return 0
        if self.api == "native":
            return self._native(obj)
        return self._openai(obj)

    def _native(self, obj: dict[str, Any]) -> int:
        meta = obj.get("meta_info")
        if not isinstance(meta, dict):
            raise SSEError("a /generate event without meta_info")
        text = obj.get("text")
        new_text = isinstance(text, str) and len(text) != self.text_len
        if isinstance(text, str):
            self.text_len = len(text)
        ct = meta.get("completion_tokens")
        new = 0
        if isinstance(ct, int):
            prev = self.tokens or 0
            new = max(ct - prev, 0)
            self.tokens = max(ct, prev)
        elif new_text:
            self.content_chunks += 1
            new = 1
        fr = meta.get("finish_reason")
        if fr:
            self.finish = fr.get("type", "stop") if isinstance(fr, dict) else str(fr)
            self.final_meta = meta
            if self.finish == "abort":
                msg = fr.get("message") if isinstance(fr, dict) else None
                self.error = f"request aborted by the server: {msg or 'no message'}"
        if new and isinstance(ct, int) and new_text:
            self.content_chunks += 1
        return new

    def _openai(self, obj: dict[str, Any]) -> int:
        usage = obj.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.usage = usage
        ext = obj.get("sglext")
        if isinstance(ext, dict) and isinstance(ext.get("spec_tokens_details"), dict):
            self.spec = ext["spec_tokens_details"]
        new = 0
        for ch in obj.get("choices") or ():
            if not isinstance(ch, dict):
                continue
            if self.api == "openai":
                delta = ch.get("delta") or {}
                piece = delta.get("content") or delta.get("reasoning_content") or ""
            else:
                piece = ch.get("text") or ""
            if piece:
                self.text_len += len(piece)
                self.content_chunks += 1
                new = 1  # at least one token; the count comes from usage
            if ch.get("finish_reason"):
                self.finish = str(ch["finish_reason"])
                if self.finish == "abort":
                    self.error = "request aborted by the server"
        return new

    def completion_tokens(self) -> tuple[int, bool]:
        """(tokens, estimated)."""
        if self.api == "native":
            if self.tokens is not None:
                return self.tokens, False
            return self.content_chunks, True
        if self.usage is not None:
            return int(self.usage["completion_tokens"]), False
        return self.content_chunks, True

    def accept(self, tokens: int) -> tuple[float | None, float | None]:
        """(accept length, verify rounds) from the final chunk's spec fields (§5.1)."""
        meta = self.final_meta if self.api == "native" else self.spec
        if not meta or tokens <= 0:
            return None, None
        ct = meta.get("spec_verify_ct")
        al = meta.get("spec_accept_length")
        if isinstance(ct, int | float) and ct > 0:
            # 0.4.2-0.5.3 give only the verify count; later versions define
            # spec_accept_length as exactly completion_tokens / verify_ct.
            return (float(al) if isinstance(al, int | float) and al > 0 else tokens / ct), float(ct)
        if isinstance(al, int | float) and al > 0:
            return float(al), tokens / float(al)
        return None, None
