"""The remote OpenAI-compatible client against a loopback fake server."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from engine.remote import RemoteEngine, RemoteError

SEEN: list[dict] = []


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep test output clean
        pass

    def _authorised(self) -> bool:
        if self.headers.get("Authorization") != "Bearer sekret":
            self.send_response(401)
            self.end_headers()
            return False
        return True

    def do_GET(self):
        if not self._authorised():
            return
        body = json.dumps({"data": [{"id": "qwen", "max_model_len": 32768}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        if not self._authorised():
            return
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        SEEN.append(req)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        chunks = [{"choices": [{"delta": {"reasoning_content": "hmm "}}]},
                  {"choices": [{"delta": {"reasoning_content": "ok"}}]},
                  {"choices": [{"delta": {"content": "Hello"}}]},
                  {"choices": [{"delta": {"content": " there"}, "finish_reason": "stop"}]},
                  {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 4}}]
        for c in chunks:
            self.wfile.write(f"data: {json.dumps(c)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture(scope="module")
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()


def test_streams_reasoning_and_content_with_usage(server):
    eng = RemoteEngine(server, "sekret", "qwen")
    assert eng.info.context_limit == 32768 and eng.info.backend == "remote"
    msgs = [{"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image", "image": b"\x89PNGxx"}]}]
    events = list(eng.generate(msgs, {"temperature": 0.5, "top_k": 20}, enable_thinking=False))
    deltas = [(e.channel, e.text) for e in events[:-1]]
    assert deltas == [("reasoning", "hmm "), ("reasoning", "ok"), ("content", "Hello"), ("content", " there")]
    fin = events[-1]
    assert (fin.reason, fin.prompt_tokens, fin.completion_tokens) == ("stop", 12, 4)
    sent = SEEN[-1]
    assert sent["stream"] is True and sent["temperature"] == 0.5 and sent["top_k"] == 20
    assert sent["chat_template_kwargs"] == {"enable_thinking": False}
    image = sent["messages"][0]["content"][1]
    assert image["type"] == "image_url" and image["image_url"]["url"].startswith("data:image/png;base64,")


def test_wrong_key_is_a_clear_error(server):
    with pytest.raises(RemoteError, match="refused the API key"):
        RemoteEngine(server, "wrong", "qwen")


def test_unreachable_and_malformed_urls():
    with pytest.raises(RemoteError, match="http"):
        RemoteEngine("localhost:8000", None, "m")
    with pytest.raises(RemoteError, match="Cannot reach"):
        RemoteEngine("http://127.0.0.1:9/v1", None, "m", timeout_s=2)
