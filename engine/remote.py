"""Streaming client for a remote OpenAI-compatible chat-completions server (vLLM, SGLang, Monorail).

Pure standard library (http.client), so it runs in the worker without torch. It offers the same
surface as engine.api.Engine (``info``, ``generate``, ``unload``) and yields objects with the
same fields as engine.api.TextDelta / Finished, so the worker treats both backends alike.

Reasoning arrives as ``delta.reasoning_content`` (vLLM, SGLang) or ``delta.reasoning``; both map
to the "reasoning" channel. Images are sent as base64 data URLs in ``image_url`` parts.
"""

from __future__ import annotations

import base64
import http.client
import json
import mimetypes
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit


class RemoteError(RuntimeError):
    """The remote endpoint refused or failed a request; the message names the server's reason."""


@dataclass
class RemoteInfo:
    name: str
    context_limit: int = 0          # 0: unknown (the server did not say)
    random_weights: bool = False
    has_vision: bool = True         # unknown up front: the server refuses images itself if needed
    backend: str = "remote"
    plan: dict | None = None


@dataclass
class RemoteDelta:
    channel: str
    text: str


@dataclass
class RemoteFinished:
    reason: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft_s: float | None = None
    prefill_tok_s: float | None = None
    decode_tok_s: float | None = None
    tool_calls: list[dict] = field(default_factory=list)
    spec_accept_rate: float | None = None


def _image_part(image: Any) -> dict:
    if isinstance(image, (bytes, bytearray)):
        data, mime = bytes(image), _sniff_mime(bytes(image))
    else:
        path = Path(image)
        data, mime = path.read_bytes(), mimetypes.guess_type(path.name)[0] or "image/png"
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{base64.b64encode(data).decode()}"}}


def _sniff_mime(data: bytes) -> str:
    if data.startswith(b"\x89PNG"):
        return "image/png"
    if data.startswith(b"\xff\xd8"):
        return "image/jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[:3] == b"GIF":
        return "image/gif"
    return "application/octet-stream"


def to_openai_messages(messages: list[dict]) -> list[dict]:
    """Our messages (image parts with raw bytes or paths) -> the OpenAI wire format."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            parts = [_image_part(p["image"]) if p.get("type") == "image" else p for p in content]
            out.append({**m, "content": parts})
        else:
            out.append(dict(m))
    return out


class RemoteEngine:
    def __init__(self, base_url: str, api_key: str | None, model: str, timeout_s: float = 600.0) -> None:
        parts = urlsplit(base_url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise RemoteError(f"Remote endpoint {base_url!r} is not an http(s) URL, e.g. http://localhost:8000/v1")
        self._scheme, self._netloc = parts.scheme, parts.netloc
        self._prefix = parts.path or ""
        self._api_key = api_key
        self._timeout = timeout_s
        self.info = RemoteInfo(name=model or "remote", context_limit=self._probe_context(model))

    # -- http ---------------------------------------------------------------
    def _connection(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
        return cls(self._netloc, timeout=self._timeout)

    def _headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self._api_key:
            h["Authorization"] = f"Bearer {self._api_key}"
        return h

    def _probe_context(self, model: str) -> int:
        """vLLM and Monorail list ``max_model_len`` under /models; anything else leaves it unknown."""
        try:
            conn = self._connection()
            conn.request("GET", f"{self._prefix}/models", headers=self._headers())
            resp = conn.getresponse()
            body = resp.read()
            conn.close()
        except OSError as exc:
            raise RemoteError(f"Cannot reach {self._scheme}://{self._netloc}: {exc}") from exc
        if resp.status in (401, 403):
            raise RemoteError(f"The endpoint refused the API key (HTTP {resp.status}). Check it in Settings.")
        if resp.status != 200:
            return 0
        try:
            for entry in json.loads(body).get("data", []):
                if not model or entry.get("id") == model:
                    return int(entry.get("max_model_len") or 0)
        except (ValueError, AttributeError, TypeError):
            pass
        return 0

    # -- engine surface -----------------------------------------------------
    def generate(self, messages: list[dict], sampling: Any = None, *, enable_thinking: bool = True,
                 tools: list | None = None, cancel: threading.Event | None = None) -> Iterator[Any]:
        params = sampling if isinstance(sampling, dict) else dict(getattr(sampling, "__dict__", {}) or {})
        body: dict[str, Any] = {"model": self.info.name, "messages": to_openai_messages(messages), "stream": True,
                                "stream_options": {"include_usage": True},
                                "chat_template_kwargs": {"enable_thinking": enable_thinking}}
        for key in ("temperature", "top_p", "top_k", "min_p", "presence_penalty", "repetition_penalty", "seed"):
            if params.get(key) is not None:
                body[key] = params[key]
        if params.get("max_tokens") or params.get("max_new_tokens"):
            body["max_tokens"] = params.get("max_tokens") or params.get("max_new_tokens")
        if tools:
            body["tools"] = tools
        t0 = time.monotonic()
        conn = self._connection()
        try:
            conn.request("POST", f"{self._prefix}/chat/completions", body=json.dumps(body), headers=self._headers())
            resp = conn.getresponse()
        except OSError as exc:
            conn.close()
            raise RemoteError(f"Cannot reach {self._scheme}://{self._netloc}: {exc}") from exc
        if resp.status != 200:
            detail = resp.read(2000).decode("utf-8", "replace")
            conn.close()
            raise RemoteError(f"The endpoint answered HTTP {resp.status}: {detail.strip()[:500]}")
        yield from self._read_stream(resp, conn, t0, cancel)

    def _read_stream(self, resp, conn, t0: float, cancel: threading.Event | None) -> Iterator[Any]:
        first: float | None = None
        usage: dict = {}
        reason = "stop"
        n_deltas = 0
        try:
            for raw in resp:
                if cancel is not None and cancel.is_set():
                    reason = "cancelled"
                    break
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    for key, channel in (("reasoning_content", "reasoning"), ("reasoning", "reasoning"),
                                         ("content", "content")):
                        text = delta.get(key)
                        if text:
                            first = first or time.monotonic()
                            n_deltas += 1
                            yield RemoteDelta(channel, text)
                    if choice.get("finish_reason"):
                        reason = {"length": "length"}.get(choice["finish_reason"], "stop")
        finally:
            conn.close()
        end = time.monotonic()
        completion = int(usage.get("completion_tokens") or n_deltas)
        prompt = int(usage.get("prompt_tokens") or 0)
        ttft = (first - t0) if first else None
        decode = completion / (end - first) if first and end > first and completion > 1 else None
        prefill = prompt / ttft if ttft and prompt else None
        yield RemoteFinished(reason, prompt, completion, ttft, prefill, decode)

    def unload(self) -> None:
        """Nothing is held locally for a remote model."""
