"""Render the app's screenshots offscreen into docs/screenshots/ (light and dark).

    QT_QPA_PLATFORM=offscreen python scripts/screenshots.py

No worker and no GPU are needed: the window is fed the same protocol events a worker sends
(a model load, a finished reply, a reply streaming its thinking), and the dashboard gets a
scripted GPU source. What is drawn is the real widgets' output.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from PySide6.QtWidgets import QApplication  # noqa: E402

from engine import protocol as P  # noqa: E402

OUT = ROOT / "docs" / "screenshots"


class ScriptedGpu:
    """A plausible RTX 4090 under a decode load, deterministic."""
    available, reason = True, ""

    def __init__(self) -> None:
        self.i = 0
        self.mj = 5_000_000_000

    def energy_mj(self) -> int:
        return self.mj

    def read(self):
        from app.telemetry import GpuSample
        self.i += 1
        # a decode-like load: busy stretches with short idle gaps, plus deterministic jitter
        phase = (self.i % 40) / 40
        load = (0.92 if phase < 0.7 else 0.25) + 0.05 * math.sin(self.i * 2.3) * math.cos(self.i * 0.7)
        power = 90 + 330 * load
        self.mj += int(power * 1000)
        return GpuSample(t=1_700_000_000 + self.i, name="NVIDIA GeForce RTX 4090", vram_used=int((21.4 + 0.3 * load) * 2**30),
                         vram_total=24 * 2**30, power_w=power, energy_mj=self.mj, temperature_c=52 + 18 * load,
                         sm_clock_mhz=2520 - 150 * load, utilization=60 + 38 * load,
                         throttle_reasons=["software power cap"] if load > 0.9 else [])


def real_plan():
    """The memory plan a native load of the 27B computes at 262,144 tokens of int8 KV with a 24 GiB budget
    (engine.native_backend.launch_plan, the function a load and Settings' "Show memory plan" use; a pure
    function, no GPU): the one figure in these screenshots that is not illustrative."""
    from engine.native_backend import launch_plan
    from engine.registry import config_27b

    _, plan = launch_plan(config_27b(), kv_dtype="int8", max_context=262_144, vram_budget_bytes=24 << 30,
                          free_bytes=None, prefill_chunk=None)
    return plan


ANSWER = """Decode speed falls as the context grows because every token reads the whole KV cache.
A quick fit of your figures:

```python
import numpy as np

ctx = np.array([8, 32, 64, 128, 256]) * 1024
tok_s = np.array([77.6, 70.1, 63.4, 58.8, 54.8])
slope, base = np.polyfit(ctx, 1 / tok_s, 1)
print(f"{slope * 1e9:.2f} ns per cached token")
```

| context | tok/s |
|---|---|
| 8K | 77.6 |
| 256K | 54.8 |
"""

THINKING = ("The user gave decode speed against context length: from 77.6 tok/s at 8K down to 54.8 at 256K. "
            "Time per token should be roughly linear in context: weights are read once, the KV "
            "cache grows. Let me check the ratio between the first and last figures")


def populate(window) -> None:
    from app.chat_controller import ActiveReply

    c = window.controller
    c.load_request = "load"
    # the native engine has no vision path yet: images are refused there (the reference backend reads them)
    c._on_event(P.ModelLoaded("load", "Qwen3.6-27B (4.1 bpw)", False, 262_144, False, "native", real_plan().as_dict(),
                              vision_tower=True, backend_note="chosen automatically: NVIDIA GeForce RTX 4090 is usable "
                                                              "by the native engine"))
    window.banner.hide()
    store = c.store
    for title in ("Rust borrow checker question", "Trip to Kyoto: 4 days", "GDN rollback notes"):
        store.create_conversation(title)
    conv = store.create_conversation("Decode speed vs context")
    c.conversation_id = conv.id
    store.add_message(conv.id, "user", "My benchmark, decode tok/s at 8K, 32K, 64K, 128K and 256K of context: 77.6, "
                      "70.1, 63.4, 58.8, 54.8. Why does decode slow down at long context?")
    a = store.add_message(conv.id, "assistant", ANSWER, model="Qwen3.6-27B (4.1 bpw)")
    store.update_message(a.id, reasoning="Bars: 77.6 at 8K down to 54.8 at 256K ...", reasoning_started_at=100.0,
                         reasoning_ended_at=104.2, finished_at=112.0, prompt_tokens=1394, completion_tokens=412,
                         ttft_s=0.41, prefill_tok_s=3150.0, decode_tok_s=55.3, energy_j=1310.0)
    store.add_message(conv.id, "user", "And with MTP speculative decoding, what should I expect?")
    reply = store.add_message(conv.id, "assistant", "", status="streaming", model="Qwen3.6-27B (4.1 bpw)")
    c.conversation_opened.emit(conv.id)
    c.active = ActiveReply("shot", reply)
    c.busy_changed.emit(True)
    import time
    reply.reasoning_started_at = time.time() - 3.4
    for word in THINKING.split(" "):
        c._on_reply_event(P.Delta("shot", "reasoning", word + " "))
    window.composer.set_text("Can you also plot")
    c.update_context()


def feed_dashboard(window) -> None:
    tel = window.telemetry
    for _ in range(150):
        tel.ingest(tel.source.read())
    for rate in (53.9, 55.3, 54.6, 55.0, 54.8):   # ~72 % of a 4090's 76 tok/s roofline at 13.2 GB a token
        tel.engine_event(P.Finished("x", "stop", 1394, 412, 0.41, 3150.0, rate, None))
    tel.engine_event(P.WorkerStats("stats", 48213, int(3.1 * 2**30), "Qwen3.6-27B (4.1 bpw)", "native", True))
    tel.reply_started("x")
    tel.source.mj += 1_310_000
    tel.reply_finished(412)


def shoot(theme: str) -> list[Path]:
    data = Path(tempfile.mkdtemp(prefix=f"monorail-shot-{theme}-"))
    os.environ["MONORAIL_DATA_DIR"] = str(data)
    from app.settings import Settings, save_settings
    save_settings(Settings(theme=theme, vram_budget_gib=24.0))
    from app.main import build
    qapp, window = build(nvml_source=ScriptedGpu())
    window.resize(1360, 1010)
    window.show()
    populate(window)
    window._flush_stream()          # show the latest streamed text now, not after the coalescing timer
    feed_dashboard(window)
    for _ in range(20):
        qapp.processEvents()
    # the first (finished) reply opens its thinking section to show it can be expanded
    paths = []
    chat = OUT / f"main-{theme}.png"
    window.chat.verticalScrollBar().setValue(window.chat.verticalScrollBar().maximum())
    qapp.processEvents()
    window.grab().save(str(chat))
    paths.append(chat)
    window.tabs.setCurrentIndex(1)
    qapp.processEvents()
    dash = OUT / f"dashboard-{theme}.png"
    window.grab().save(str(dash))
    paths.append(dash)
    window.tabs.setCurrentIndex(0)
    from app.widgets.settings_dialog import SettingsDialog
    dialog = SettingsDialog(window.settings, window.controller, window)
    dialog.show()
    dialog.tabs.setCurrentIndex(1)
    # the text the worker sends for "Show memory plan" (engine/worker.py _compute_plan) with this budget
    dialog.plan_view.setPlainText("budget: the VRAM budget set in Settings\n" + real_plan().format_table())
    qapp.processEvents()
    sett = OUT / f"settings-{theme}.png"
    dialog.grab().save(str(sett))
    paths.append(sett)
    dialog.close()
    window.controller.active = None
    window.telemetry.stop()
    window.controller.store.close()
    window.close()
    window.deleteLater()
    qapp.processEvents()
    return paths





def _ensure_fonts() -> None:
    """Offscreen Qt draws no text without fonts. Use fontconfig's when there are any; otherwise
    point Qt at the DejaVu fonts matplotlib ships (pip), or stop with a clear message."""
    import shutil
    import subprocess

    if shutil.which("fc-list") and subprocess.run(["fc-list"], capture_output=True, text=True).stdout.strip():
        return
    try:
        import matplotlib
        os.environ.setdefault("QT_QPA_FONTDIR", str(Path(matplotlib.get_data_path()) / "fonts" / "ttf"))
    except ImportError:
        raise SystemExit("No fonts found: install fonts-dejavu-core, or `pip install matplotlib` for its bundled "
                         "DejaVu fonts, so the screenshots show text.") from None


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    _ensure_fonts()
    app = QApplication.instance() or QApplication(sys.argv[:1])
    from PySide6.QtGui import QFontDatabase
    if not QFontDatabase.families():
        raise SystemExit("Qt found no fonts; the screenshots would have no text.")
    del app
    for theme in ("light", "dark"):
        for p in shoot(theme):
            print(p.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
