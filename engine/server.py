"""`monorail serve`: the OpenAI chat-completions protocol over one engine, on loopback (DESIGN.md, Serving).

    GET  /v1/models               the model, with max_model_len (engine.remote reads it)
    POST /v1/chat/completions     messages (text, image_url data URLs, tool calls and results), tools, sampling
                                  (temperature, top_p, top_k, min_p, penalties, seed, stop, max_tokens),
                                  chat_template_kwargs.enable_thinking; stream or not

Replies carry the reasoning as ``reasoning_content`` (as vLLM and SGLang do), parsed tool calls as ``tool_calls`` (with
finish_reason "tool_calls"), and usage with ``prompt_tokens_details.cached_tokens`` (the prompt tokens prefix reuse
resumed instead of recomputing: an agent's next turn). One reply is generated at a time (engine.api.Engine holds a
lock); other requests wait their turn. A client that disconnects mid-stream cancels its reply.

The standard library's ThreadingHTTPServer carries it: the server is for one user on one machine, not the internet;
a host other than loopback needs an API key.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

MAX_BODY_BYTES = 64 << 20    # a request over this (images included) is refused before it is read
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
                 "repetition_penalty", "seed")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


class ApiError(Exception):
    """A request the server refuses: the HTTP status and OpenAI's error object."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": None}}


# ---------------------------------------------------------------------------------------------------- requests
def _image_bytes(part: dict) -> bytes:
    url = (part.get("image_url") or {}).get("url") if isinstance(part.get("image_url"), dict) else part.get("image_url")
    if not isinstance(url, str) or not url.startswith("data:") or ";base64," not in url:
        raise ApiError(400, "Images must be sent inline as base64 data URLs (data:image/png;base64,...): this server "
                            "fetches nothing from the network.", param="messages")
    try:
        return base64.b64decode(url.split(";base64,", 1)[1], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ApiError(400, f"An image data URL is not valid base64: {exc}", param="messages") from exc


def engine_messages(messages: Any) -> list[dict]:
    """The OpenAI messages as engine.api takes them: image_url parts become image parts holding the bytes."""
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list.", param="messages")
    out = []
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ("system", "developer", "user", "assistant", "tool"):
            raise ApiError(400, "Each message needs a role: system, user, assistant or tool.", param="messages")
        m = dict(m)
        if m["role"] == "developer":
            m["role"] = "system"
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for p in content:
                kind = p.get("type") if isinstance(p, dict) else None
                if kind == "text":
                    parts.append({"type": "text", "text": str(p.get("text", ""))})
                elif kind == "image_url":
                    parts.append({"type": "image", "image": _image_bytes(p)})
                else:
                    raise ApiError(400, f"Unsupported content part {kind!r}: use text or image_url.", param="messages")
            m["content"] = parts
        elif content is None:
            m["content"] = ""
        out.append(m)
    return out


def sampling_params(body: dict):
    """engine.sampling.SamplingParams from the request's fields (OpenAI's, plus top_k, min_p and
    repetition_penalty as vLLM takes them)."""
    from engine.sampling import SamplingParams, SamplingParamsError

    kw: dict[str, Any] = {k: body[k] for k in SAMPLING_KEYS if body.get(k) is not None}
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None:
        kw["max_tokens"] = max_tokens
    stop = body.get("stop")
    if stop is not None:
        kw["stop"] = (stop,) if isinstance(stop, str) else tuple(stop)
    try:
        return SamplingParams(**kw).validate()
    except (SamplingParamsError, TypeError, ValueError) as exc:
        raise ApiError(400, str(exc)) from exc


def parse_chat_request(body: Any) -> dict:
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    if body.get("n", 1) != 1:
        raise ApiError(400, "Only n = 1 is supported.", param="n")
    kwargs = body.get("chat_template_kwargs") or {}
    tools = body.get("tools") or None
    if body.get("tool_choice") == "none":
        tools = None
    return {"messages": engine_messages(body.get("messages")), "sampling": sampling_params(body),
            "enable_thinking": bool(kwargs.get("enable_thinking", True)), "tools": tools,
            "stream": bool(body.get("stream", False)),
            "include_usage": bool((body.get("stream_options") or {}).get("include_usage", False))}


# --------------------------------------------------------------------------------------------------- replies
def _tool_calls(calls: list[dict]) -> list[dict]:
    """Finished.tool_calls ({"name", "arguments" dict}) in OpenAI's shape, each with an id and its index."""
    from engine.output_parser import ToolCall

    return [{"index": i, **ToolCall(c["name"], c["arguments"]).to_openai(f"call_{uuid.uuid4().hex[:24]}")}
            for i, c in enumerate(calls)]


def _finish_reason(fin) -> str:
    if getattr(fin, "tool_calls", None):
        return "tool_calls"
    return "length" if fin.reason == "length" else "stop"


def _usage(fin) -> dict:
    prompt, completion = int(fin.prompt_tokens or 0), int(fin.completion_tokens or 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": int(getattr(fin, "cached_tokens", 0) or 0)}}


def collect_completion(events, model_id: str) -> dict:
    """A non-streamed chat.completion from the engine's events."""
    texts = {"reasoning": [], "content": []}
    fin = None
    for ev in events:
        if hasattr(ev, "channel"):
            if ev.channel in texts:
                texts[ev.channel].append(ev.text)
        else:
            fin = ev
    _raise_if_failed(fin)
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts["content"])}
    if texts["reasoning"]:
        message["reasoning_content"] = "".join(texts["reasoning"])
    if fin.tool_calls:
        message["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in _tool_calls(fin.tool_calls)]
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": model_id, "choices": [{"index": 0, "message": message, "finish_reason": _finish_reason(fin)}],
            "usage": _usage(fin)}


def stream_chunks(events, model_id: str, include_usage: bool) -> Iterator[dict]:
    """chat.completion.chunk objects: the role, the reasoning and content deltas, the tool calls, the finish reason
    (and usage when asked). Tool calls' raw text (channel "tool_call") is not content: they come parsed, at the end."""
    cid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())

    def chunk(delta: dict, finish: str | None = None) -> dict:
        return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model_id,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    events = iter(events)
    head = next(events, None)   # the engine checks the prompt first: a refusal comes before any byte is sent
    yield chunk({"role": "assistant", "content": ""})
    fin = None
    for ev in itertools.chain([head] if head is not None else [], events):
        if hasattr(ev, "channel"):
            if ev.channel == "reasoning":
                yield chunk({"reasoning_content": ev.text})
            elif ev.channel == "content":
                yield chunk({"content": ev.text})
        else:
            fin = ev
    _raise_if_failed(fin)
    if fin.tool_calls:
        yield chunk({"tool_calls": _tool_calls(fin.tool_calls)})
    yield chunk({}, _finish_reason(fin))
    if include_usage:
        yield {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model_id, "choices": [],
               "usage": _usage(fin)}


def _raise_if_failed(fin) -> None:
    if fin is None:
        raise ApiError(500, "The engine ended the reply without finishing it.", kind="server_error")
    if fin.reason == "error":
        raise ApiError(500, fin.error or "The engine failed.", kind="server_error")


# ------------------------------------------------------------------------------------------------------ server
class MonorailServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, engine, model_id: str, api_key: str | None = None):
        super().__init__(address, ChatHandler)
        self.engine, self.model_id, self.api_key = engine, model_id, api_key
        self.replies: set[threading.Event] = set()   # the cancel events of the replies in flight
        self._replies_lock = threading.Lock()

    def track(self, cancel: threading.Event, on: bool) -> None:
        with self._replies_lock:
            (self.replies.add if on else self.replies.discard)(cancel)

    def stop(self) -> None:
        """Stop serving: the replies in flight are cancelled (they end at their next token), no request is taken."""
        with self._replies_lock:
            for cancel in self.replies:
                cancel.set()
        self.shutdown()
        self.server_close()


class ChatHandler(BaseHTTPRequestHandler):
    server: MonorailServer
    server_version = "monorail"

    def log_message(self, fmt, *args) -> None:   # one line a request on stderr, as http.server does, minus noise
        pass

    # -- routing --------------------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if not self._authorised():
            return
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            info = self.server.engine.info
            self._json(200, {"object": "list", "data": [{
                "id": self.server.model_id, "object": "model", "created": 0, "owned_by": "monorail",
                "max_model_len": int(getattr(info, "context_limit", 0) or 0)}]})
        elif self.path.rstrip("/") == "/health":
            self._json(200, {"status": "ok"})
        else:
            self._error(ApiError(404, f"No route {self.path}: use /v1/models or /v1/chat/completions.",
                                 kind="not_found_error"))

    def do_POST(self) -> None:  # noqa: N802
        if not self._authorised():
            return
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._error(ApiError(404, f"No route {self.path}: use POST /v1/chat/completions.", kind="not_found_error"))
            return
        try:
            request = parse_chat_request(self._read_json())
            self._chat(request)
        except ApiError as exc:
            self._error(exc)
        except Exception as exc:  # an engine failure ends this request, never the server
            self._error(ApiError(500, f"{type(exc).__name__}: {exc}", kind="server_error"))

    # -- the reply ------------------------------------------------------------------------------------------
    def _chat(self, req: dict) -> None:
        cancel = threading.Event()
        self.server.track(cancel, True)
        try:
            self._reply(req, cancel)
        finally:
            self.server.track(cancel, False)

    def _reply(self, req: dict, cancel: threading.Event) -> None:
        from engine.chat_template import ChatTemplateError
        from engine.errors import EngineError

        try:
            events = self.server.engine.generate(req["messages"], req["sampling"], enable_thinking=req["enable_thinking"],
                                                 tools=req["tools"], cancel=cancel)
            if not req["stream"]:
                self._json(200, collect_completion(events, self.server.model_id))
                return
            chunks = stream_chunks(events, self.server.model_id, req["include_usage"])
            first = next(chunks)   # the engine has checked the prompt (a PromptError comes before any byte is sent)
        except (EngineError, ChatTemplateError) as exc:   # the request's own fault: the prompt, the messages
            raise ApiError(400, str(exc)) from exc
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            self._event(first)
            for c in chunks:
                self._event(c)
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            cancel.set()      # the client left: stop generating for it
        except Exception as exc:  # the reply failed midway: say so in the stream (the status line is sent already)
            err = exc if isinstance(exc, ApiError) else ApiError(500, f"{type(exc).__name__}: {exc}", kind="server_error")
            try:
                self._event(err.body())
            except OSError:
                pass
        finally:
            chunks.close()
            if hasattr(events, "close"):
                events.close()   # the engine's clean-up (its decode loop, its lock) runs now, not at collection
            self.close_connection = True

    def _event(self, obj: dict) -> None:
        self.wfile.write(b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n")
        self.wfile.flush()

    # -- plumbing -------------------------------------------------------------------------------------------
    def _authorised(self) -> bool:
        key = self.server.api_key
        if key and self.headers.get("Authorization", "") != f"Bearer {key}":
            self._error(ApiError(401, "Missing or wrong API key (Authorization: Bearer ...).",
                                 kind="authentication_error"))
            return False
        return True

    def _read_json(self) -> Any:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length <= 0:
            raise ApiError(400, "The request needs a JSON body (Content-Length).")
        if length > MAX_BODY_BYTES:
            raise ApiError(413, f"The request is {length:,} bytes, over the {MAX_BODY_BYTES:,}-byte limit.")
        try:
            return json.loads(self.rfile.read(length))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"The body is not valid JSON: {exc}") from exc

    def _json(self, status: int, obj: dict) -> None:
        data = json.dumps(obj, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, exc: ApiError) -> None:
        try:
            self._json(exc.status, exc.body())
        except (BrokenPipeError, ConnectionResetError):
            pass


def make_server(engine, *, host: str = "127.0.0.1", port: int = 8000, model_id: str | None = None,
                api_key: str | None = None) -> MonorailServer:
    """The server, bound and ready for serve_forever(); port 0 picks a free one (server.server_address)."""
    if host not in LOOPBACK_HOSTS and not api_key:
        raise ValueError(f"Serving on {host} would open the model to the network without a key: pass --api-key, or "
                         "serve on 127.0.0.1 (the default).")
    return MonorailServer((host, port), engine, model_id or engine.info.name, api_key)


