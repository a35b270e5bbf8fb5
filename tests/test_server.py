"""`monorail serve` (engine/server.py): the OpenAI chat-completions protocol over the demo model (reference backend,
CPU). Replies equal the engine's own, streamed or not; engine.remote (the app's client for OpenAI-compatible servers)
reads them; tool calls, reasoning and usage take OpenAI's shapes; bad requests get OpenAI error objects; a client
that leaves mid-stream cancels its reply; a key is required off loopback."""

from __future__ import annotations

import base64
import http.client
import json
import threading
import time

import pytest

from engine.api import Finished, TextDelta
from engine.sampling import SamplingParams
from engine.server import make_server

GREEDY = {"temperature": 0.0, "max_tokens": 12}
MESSAGES = [{"role": "user", "content": "List three colours."}]


@pytest.fixture(scope="module")
def engine(demo_engine):
    return demo_engine


def _serve(engine, **kw):
    server = make_server(engine, port=0, **kw)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def server(engine):
    s = _serve(engine, model_id="demo")
    yield s
    s.shutdown()
    s.server_close()


def _request(server, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=120)
    conn.request(method, path, body=None if body is None else json.dumps(body),
                 headers={"Content-Type": "application/json", **(headers or {})})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


def _direct(engine, messages, sampling, enable_thinking=True):
    texts = {"reasoning": "", "content": ""}
    fin = None
    for ev in engine.generate(messages, SamplingParams(**sampling), enable_thinking=enable_thinking):
        if isinstance(ev, TextDelta):
            texts[ev.channel] = texts.get(ev.channel, "") + ev.text
        else:
            fin = ev
    return texts, fin


def test_models_lists_the_model_with_its_context(server):
    status, data = _request(server, "GET", "/v1/models")
    entry = json.loads(data)["data"][0]
    assert status == 200 and entry["id"] == "demo" and entry["max_model_len"] == 4096


def test_a_completion_is_the_engines_own_reply(server, engine):
    status, data = _request(server, "POST", "/v1/chat/completions",
                            {"model": "demo", "messages": MESSAGES, **GREEDY})
    assert status == 200, data
    reply = json.loads(data)
    texts, fin = _direct(engine, MESSAGES, GREEDY)
    msg = reply["choices"][0]["message"]
    assert msg["content"] == texts["content"] and msg.get("reasoning_content", "") == texts["reasoning"]
    assert reply["choices"][0]["finish_reason"] == "length" and reply["object"] == "chat.completion"
    assert reply["usage"]["completion_tokens"] == fin.completion_tokens == 12
    assert reply["usage"]["prompt_tokens"] == fin.prompt_tokens
    assert reply["usage"]["total_tokens"] == fin.prompt_tokens + 12


def test_the_apps_remote_client_streams_the_same_reply(server, engine):
    from engine.remote import RemoteEngine

    host, port = server.server_address[:2]
    remote = RemoteEngine(f"http://{host}:{port}/v1", None, "demo")
    assert remote.info.context_limit == 4096
    got = {"reasoning": "", "content": ""}
    fin = None
    for ev in remote.generate(MESSAGES, dict(GREEDY), enable_thinking=False):
        if hasattr(ev, "channel"):
            got[ev.channel] += ev.text
        else:
            fin = ev
    texts, direct_fin = _direct(engine, MESSAGES, GREEDY, enable_thinking=False)
    assert got["content"] == texts["content"] and got["reasoning"] == texts["reasoning"]
    assert fin.completion_tokens == direct_fin.completion_tokens and fin.prompt_tokens == direct_fin.prompt_tokens


def test_a_stream_ends_with_the_finish_reason_usage_and_done(server):
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=120)
    conn.request("POST", "/v1/chat/completions", json.dumps({
        "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}, **GREEDY}))
    resp = conn.getresponse()
    lines = [ln.decode().strip() for ln in resp if ln.strip()]
    conn.close()
    assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream"
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(ln[5:]) for ln in lines[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == 12 and chunks[-1]["choices"] == []


def test_an_agents_next_turn_reports_the_tokens_resumed(server):
    """Prefix reuse through the server: the conversation's second request resumes from the first one's history."""
    system = {"role": "system", "content": "You are a careful assistant. " * 100}   # over 512 tokens: reused
    first = [system, {"role": "user", "content": "Step one?"}]
    _, data = _request(server, "POST", "/v1/chat/completions", {"messages": first, **GREEDY})
    reply = json.loads(data)["choices"][0]["message"]["content"]
    second = first + [{"role": "assistant", "content": reply}, {"role": "user", "content": "Step two?"}]
    _, data = _request(server, "POST", "/v1/chat/completions", {"messages": second, **GREEDY})
    usage = json.loads(data)["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] > 200


@pytest.mark.parametrize("body, status, says", [
    ({"messages": []}, 400, "non-empty list"),
    ({"messages": MESSAGES, "n": 2}, 400, "n = 1"),
    ({"messages": MESSAGES, "temperature": -1}, 400, "temperature"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, 400, "role"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url",
                                                 "image_url": {"url": "http://example.com/a.png"}}]}]}, 400, "data URL"),
    ({"messages": [{"role": "user", "content": "word " * 5000}]}, 400, "over the context limit"),
])
def test_bad_requests_get_an_openai_error_object(server, body, status, says):
    got, data = _request(server, "POST", "/v1/chat/completions", body)
    err = json.loads(data)["error"]
    assert got == status and says in err["message"] and err["type"] == "invalid_request_error"


def test_bad_json_and_unknown_routes(server):
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=30)
    conn.request("POST", "/v1/chat/completions", b"{not json", {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 400 and "not valid JSON" in json.loads(resp.read())["error"]["message"]
    conn.close()
    assert _request(server, "GET", "/v1/nothing")[0] == 404
    assert _request(server, "POST", "/v1/completions", {"prompt": "x"})[0] == 404


def test_images_arrive_as_bytes_and_the_demo_reads_them(server):
    """A data URL image reaches the engine as bytes (the demo model has a vision tower on the reference backend)."""
    import io

    from PIL import Image
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 30, 30)).save(buf, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    status, data = _request(server, "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "What colour?"}]}], **GREEDY})
    assert status == 200, data
    assert json.loads(data)["usage"]["completion_tokens"] == 12


class _ScriptedEngine:
    """An engine whose reply is scripted: reasoning, a content piece, a tool call; or a slow reply that waits for
    its cancel."""

    class info:
        name, context_limit = "scripted", 1024

    def __init__(self):
        self.stopped = threading.Event()   # the slow reply was closed or cancelled before its end

    def generate(self, messages, sampling, *, enable_thinking=True, tools=None, cancel=None):
        if messages[-1]["content"] == "slow":
            try:
                for _ in range(2000):
                    if cancel.is_set():
                        self.stopped.set()
                        yield Finished("cancelled", 3, 1, 0.1, None, None)
                        return
                    yield TextDelta("content", "tick ")
                    time.sleep(0.005)
            except GeneratorExit:
                self.stopped.set()
                raise
            yield Finished("length", 3, 2000, 0.1, None, None)
            return
        yield TextDelta("reasoning", "I should look it up.")
        yield TextDelta("content", "Checking.")
        yield TextDelta("tool_call", "<tool_call>...</tool_call>")
        yield Finished("stop", 5, 9, 0.1, None, None,
                       tool_calls=[{"name": "get_weather", "arguments": {"city": "Zürich"}}], cached_tokens=2)


@pytest.fixture()
def scripted():
    eng = _ScriptedEngine()
    s = _serve(eng)
    yield s, eng
    s.shutdown()
    s.server_close()


def test_tool_calls_take_openais_shape(scripted):
    server, _ = scripted
    status, data = _request(server, "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                                      "tools": [{"type": "function"}]})
    choice = json.loads(data)["choices"][0]
    call = choice["message"]["tool_calls"][0]
    assert status == 200 and choice["finish_reason"] == "tool_calls"
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"] == {"name": "get_weather", "arguments": json.dumps({"city": "Zürich"}, ensure_ascii=False)}
    assert choice["message"]["content"] == "Checking." and choice["message"]["reasoning_content"] == "I should look it up."
    assert json.loads(data)["usage"]["prompt_tokens_details"]["cached_tokens"] == 2
    # streamed: the raw tool-call text is not content; the parsed call comes as a tool_calls delta
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=30)
    conn.request("POST", "/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "x"}],
                                                             "stream": True}))
    chunks = [json.loads(ln[5:]) for ln in (x.decode().strip() for x in conn.getresponse())
              if ln.startswith("data: {")]
    conn.close()
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert "".join(d.get("content", "") for d in deltas) == "Checking."
    assert [d["tool_calls"][0]["function"]["name"] for d in deltas if "tool_calls" in d] == ["get_weather"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_a_client_that_leaves_mid_stream_cancels_its_reply(scripted):
    import socket

    server, eng = scripted
    body = json.dumps({"messages": [{"role": "user", "content": "slow"}], "stream": True}).encode()
    sock = socket.create_connection(server.server_address[:2], timeout=30)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    assert b"200" in sock.recv(4096)      # the stream has started
    sock.close()                          # the client goes away
    assert eng.stopped.wait(5)            # long before the reply's 10 s


def test_an_api_key_is_required_when_set_and_off_loopback():
    eng = _ScriptedEngine()
    with pytest.raises(ValueError, match="api-key"):
        make_server(eng, host="0.0.0.0", port=0)
    server = _serve(eng, api_key="sekrit")
    try:
        assert _request(server, "GET", "/v1/models")[0] == 401
        assert _request(server, "GET", "/v1/models", headers={"Authorization": "Bearer wrong"})[0] == 401
        assert _request(server, "GET", "/v1/models", headers={"Authorization": "Bearer sekrit"})[0] == 200
    finally:
        server.shutdown()
        server.server_close()


def test_the_command_refuses_an_open_host_without_a_key_before_loading(capsys):
    from engine.cli import main

    assert main(["serve", "--host", "0.0.0.0", "--model", "/nonexistent-monorail-model"]) == 2
    err = capsys.readouterr().err
    assert "--api-key" in err and "Opening" not in err


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_apps_worker_serves_its_model_and_stops_with_it(tmp_path, monkeypatch):
    """Settings → Local API server port reaches the worker as LoadModel's api_port: the loaded model is served from
    the worker process (the same engine the app uses), the URL comes back in ModelLoaded, and unloading stops it; a
    port already taken is reported, and the model is loaded all the same."""
    import queue
    import socket

    from engine import protocol as P
    from engine.worker import _Worker, load_engine

    monkeypatch.setenv("MONORAIL_DATA_DIR", str(tmp_path))
    events = queue.Queue()
    worker = _Worker(events, load_engine)
    port = _free_port()
    worker.handle(P.LoadModel("load", "demo", {"backend": "reference", "max_context": 4096, "api_port": port}))
    loaded = [e for e in list(events.queue) if isinstance(e, P.ModelLoaded)][-1]
    assert loaded.api_url == f"http://127.0.0.1:{port}/v1" and loaded.api_error == ""

    class _Served:
        server_address = ("127.0.0.1", port)
    status, data = _request(_Served, "POST", "/v1/chat/completions", {"messages": MESSAGES, **GREEDY})
    assert status == 200 and json.loads(data)["usage"]["completion_tokens"] == 12
    # a second load on the same port while it is taken by another socket: reported, the model still loads
    worker.handle(P.Unload("unload"))
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # the closed server's port may be in TIME_WAIT
        taken.bind(("127.0.0.1", port))
        taken.listen()
        worker.handle(P.LoadModel("load2", "demo", {"backend": "reference", "max_context": 4096, "api_port": port}))
        again = [e for e in list(events.queue) if isinstance(e, P.ModelLoaded) and e.request_id == "load2"][-1]
        assert again.api_url == "" and f"port {port}" in again.api_error and again.context_limit == 4096
    worker.handle(P.Shutdown())


def test_a_reply_that_fails_midway_ends_its_stream_with_an_error_event():
    class Failing(_ScriptedEngine):
        def generate(self, messages, sampling, *, enable_thinking=True, tools=None, cancel=None):
            yield TextDelta("content", "Half")
            raise RuntimeError("the GPU fell off the bus")

    server = _serve(Failing())
    try:
        conn = http.client.HTTPConnection(*server.server_address[:2], timeout=30)
        conn.request("POST", "/v1/chat/completions", json.dumps({"messages": MESSAGES, "stream": True}))
        lines = [x.decode().strip() for x in conn.getresponse() if x.strip()]
        conn.close()
        assert json.loads(lines[1][5:])["choices"][0]["delta"]["content"] == "Half"
        err = json.loads(lines[-1][5:])["error"]
        assert err["type"] == "server_error" and "fell off the bus" in err["message"]
        status, data = _request(server, "POST", "/v1/chat/completions", {"messages": MESSAGES})
        assert status == 500 and "fell off the bus" in json.loads(data)["error"]["message"]
    finally:
        server.shutdown()
        server.server_close()


def test_an_agents_tool_round_trip_is_accepted(server):
    """An agent sends back the assistant's tool call (arguments as a JSON string, as OpenAI gives them) and the
    tool's result: the template takes both; arguments that are not JSON are the request's fault (400)."""
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Bern"}'}}
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                               "parameters": {"type": "object",
                                                              "properties": {"city": {"type": "string"}}}}}]
    msgs = [{"role": "user", "content": "Weather in Bern?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 4}'}]
    status, data = _request(server, "POST", "/v1/chat/completions", {"messages": msgs, "tools": tools, **GREEDY})
    assert status == 200, data
    bad = [dict(msgs[0]), {"role": "assistant", "content": "", "tool_calls": [
        {**call, "function": {"name": "get_weather", "arguments": "{not json"}}]}, dict(msgs[2])]
    status, data = _request(server, "POST", "/v1/chat/completions", {"messages": bad, "tools": tools, **GREEDY})
    assert status == 400 and "not valid JSON" in json.loads(data)["error"]["message"]
