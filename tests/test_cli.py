"""The `monorail` command line, run as a user runs it (a subprocess of the installed entry point)."""

import os
import subprocess
import sys

import pytest


def _monorail(*args, data_dir, timeout=240):
    env = {**os.environ, "MONORAIL_DATA_DIR": str(data_dir)}
    return subprocess.run([sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


def test_help_lists_every_command(tmp_path):
    r = _monorail("--help", data_dir=tmp_path)
    assert r.returncode == 0
    for cmd in ("info", "chat", "plan", "convert", "inspect"):
        assert cmd in r.stdout


def test_info_reports_build_backend_and_model(tmp_path):
    r = _monorail("info", data_dir=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "monorail 0." in r.stdout and "native build:" in r.stdout
    assert "backend:" in r.stdout and "RANDOM WEIGHTS" in r.stdout


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cli-data")


def test_chat_streams_a_reply_from_the_demo_model(data_dir):
    r = _monorail("chat", "--prompt", "Hello!", "--max-tokens", "6", "--no-think", data_dir=data_dir)
    assert r.returncode == 0, r.stderr
    assert "RANDOM WEIGHTS" in r.stderr
    assert "backend: " in r.stderr and "chosen automatically" in r.stderr   # --backend auto, the default
    assert "prompt + 6 output tokens" in r.stderr or "finish: stop" in r.stderr
    assert r.stdout.strip()  # some (meaningless) text was streamed


def test_chat_says_when_max_context_is_above_the_models_limit(data_dir):
    r = _monorail("chat", "--prompt", "Hi", "--max-tokens", "2", "--no-think", "--max-context", "300000",
                  data_dir=data_dir)
    assert r.returncode == 0, r.stderr
    assert "--max-context 300,000 is above this model's limit; using 262,144 tokens" in r.stderr
    assert "context 262,144 tokens" in r.stderr


def test_chat_refuses_an_empty_prompt_and_a_missing_model(data_dir, tmp_path):
    r = _monorail("chat", "--prompt", "   ", data_dir=data_dir)
    assert r.returncode == 2 and "empty" in r.stderr
    r = _monorail("chat", "--model", str(tmp_path / "nowhere"), "--prompt", "hi", data_dir=data_dir)
    assert r.returncode == 2 and "No model at" in r.stderr


@pytest.mark.parametrize("args, says", [
    (["--temperature", "-1"], "temperature must be a number in [0, 100]"),
    (["--top-p", "2"], "top_p must be a number in (0, 1]"),
    (["--top-k", "-3"], "top_k must be an integer >= 0"),
    (["--max-tokens", "0"], "max_tokens must be an integer >= 1"),
    (["--seed", "-1"], "seed must be an integer in [0, 2^64)"),
])
def test_chat_refuses_bad_sampling_settings_before_loading_a_model(capsys, args, says):
    """One 'error:' line and exit status 2, before any model opens (no progress lines), not a traceback
    after the load."""
    from engine.cli import main

    rc = main(["chat", "--model", "/nonexistent-monorail-model", "--prompt", "hi", *args])
    err = capsys.readouterr().err
    assert rc == 2 and f"monorail chat: error: {says}" in err, err
    assert "Opening" not in err and "Traceback" not in err


def test_chat_says_when_mtp_cannot_draft(capsys, monkeypatch):
    """--mtp drafts on the reference backend for every reply; on the native one for every reply too,
    and only where its verify steps pay (engine.native.verify_steps_pay: the tensor-core GEMV). Where it
    cannot draft, the terminal says so up front."""
    from engine import native
    from engine.cli import main

    def note(backend: str, temperature: str) -> str:
        assert main(["chat", "--mtp", "--backend", backend, "--temperature", temperature, "--model",
                     "/nonexistent-monorail-model", "--prompt", "hi"]) == 2
        return capsys.readouterr().err

    monkeypatch.setattr(native, "verify_steps_pay", lambda: False)
    assert "once its verify steps run on the tensor-core GEMV" in note("native", "0")
    monkeypatch.setattr(native, "verify_steps_pay", lambda: True)
    for temperature in ("0", "0.7"):
        assert "--mtp drafts" not in note("native", temperature)
    for temperature in ("0", "0.7"):
        assert "--mtp drafts" not in note("reference", temperature)


def test_ctrl_c_stops_a_reply_and_keeps_the_chat_going(data_dir):
    """Ctrl+C while a reply streams stops that reply (the session and its history stay); at the prompt it leaves."""
    import signal
    import threading
    import time

    env = {**os.environ, "MONORAIL_DATA_DIR": str(data_dir)}
    p = subprocess.Popen([sys.executable, "-m", "engine.cli", "chat", "--max-tokens", "100000", "--temperature", "0",
                          "--no-think", "--max-context", "200000"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(iter(lambda: p.stdout.read(1), "")), daemon=True)
    reader.start()
    try:
        def stop_after_80_more_chars():
            start = len("".join(out))
            deadline = time.monotonic() + 180
            while len("".join(out)) - start < 80 and time.monotonic() < deadline:   # the reply is streaming
                time.sleep(0.05)
            assert len("".join(out)) - start >= 80, "".join(out)
            p.send_signal(signal.SIGINT)

        p.stdin.write("Tell me a very long story.\n")
        p.stdin.flush()
        stop_after_80_more_chars()
        deadline = time.monotonic() + 60                 # back at the prompt: the session survived the first stop
        while "".join(out).count("you> ") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "".join(out).count("you> ") >= 2, "".join(out)
        p.stdin.write("And another one.\n")
        p.stdin.flush()
        stop_after_80_more_chars()                       # the second reply streams and stops the same way
        deadline = time.monotonic() + 60
        while "".join(out).count("you> ") < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        p.stdin.close()                                  # EOF at the prompt: a normal exit
        rc = p.wait(timeout=120)
        err = p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
    assert rc == 0, err[-2000:]
    assert "finish: cancelled" in err and "stopped with Ctrl+C" in err and "Traceback" not in err
    assert err.count("finish: cancelled") == 2           # the second message was answered in the same session
