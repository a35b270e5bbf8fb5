"""The dashboard fed by a scripted NVML source; and without a GPU."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

from app.settings import Settings  # noqa: E402
from app.store import Store  # noqa: E402
from app.telemetry import Telemetry, decode_throttle  # noqa: E402
from app.widgets.dashboard import Dashboard, plan_rows  # noqa: E402
from engine import protocol as P  # noqa: E402
from test_app_support import FakeGpu, NoGpu  # noqa: E402


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "h.sqlite3")
    yield s
    s.close()


def test_dashboard_shows_live_readings_energy_and_plan(qtbot, store):
    gpu = FakeGpu()
    tel = Telemetry(store, source=gpu, flush_interval_s=0.0)
    dash = Dashboard(tel, Settings(tariff_per_kwh=0.5, currency="$"))
    qtbot.addWidget(dash)
    for _ in range(5):
        tel.ingest(gpu.read())
    assert dash.power.value.text().endswith(" W") and dash.temp.value.text().endswith(" °C")
    assert "/ 24.00 GiB" in dash.vram.value.text()
    assert dash.clock.value.text() == "2520 MHz" and "software power cap" in dash.clock.detail.text()
    assert len(dash.power.plot.values) == 5
    # energy from counter deltas: 4 deltas x 250 J (the first sample only sets the baseline)
    assert tel.energy_today_j() == pytest.approx(1000.0)
    assert store.energy_day() == pytest.approx(1000.0)         # persisted daily total
    kwh = 1000.0 / 3.6e6
    assert dash.energy_today.value.text() == f"{kwh:.4f} kWh" and "$0.50" in dash.energy_today.detail.text()

    tel.reply_started("g1")
    assert tel.interval_s == tel.busy_interval_s
    joules = tel.reply_finished(50)
    assert joules == pytest.approx(250.0) and tel.interval_s == tel.idle_interval_s
    tel.engine_event(P.Finished("g1", "stop", 10, 50, 0.1, 900.0, 42.0, 0.8))
    assert dash.energy_reply.value.text() == "5.00 J"
    assert dash.speed.value.text() == "42.0 tok/s" and "80 %" in dash.speed.detail.text()
    assert dash.prefill.value.text() == "900 tok/s"

    tel.engine_event(P.ModelLoaded("l", "m", False, 262144, True, "native",
                                   {"weights": 14 << 30, "kv_pool": 5 << 30, "gdn_state": 1 << 30,
                                    "workspaces": 512 << 20, "budget_bytes": 24 << 30}))
    names = [n for n, _ in dash.plan_bar.segments]
    assert names == ["weights", "kv pool", "gdn state", "workspaces", "free"]
    assert "20.50 GiB planned of 24.00 GiB" == dash.plan_card.value.text()


def test_dashboard_without_gpu_says_so_and_shows_engine_stats(qtbot, store):
    tel = Telemetry(store, source=NoGpu())
    dash = Dashboard(tel, Settings())
    qtbot.addWidget(dash)
    tel.start()                                  # no thread without a GPU
    assert tel._thread is None
    assert "No NVIDIA GPU" in dash.gpu_label.text()
    assert dash.power.value.text() == "n/a"
    assert dash.energy_today.value.text() == dash.energy_month.value.text() == "n/a"   # not "0.0000 kWh"
    assert "power readings" in dash.energy_today.detail.text()
    tel.engine_event(P.Finished("g", "stop", 5, 20, 0.2, 100.0, 12.5))
    assert dash.speed.value.text() == "12.5 tok/s"
    assert dash.speed.plot.caption == "1 recent reply"
    assert dash.engine.value.text() == "n/a"
    tel.engine_event(P.WorkerStats("s", 4321, 3 << 30, "demo", "reference", True))
    assert dash.engine.value.text() == "3.00 GiB resident"
    assert dash.engine.detail.text() == "pid 4321 · demo · reference · generating"
    tel.stop()


def test_unsupported_fields_show_na(qtbot, store):
    from app.telemetry import GpuSample

    tel = Telemetry(store, source=FakeGpu())
    dash = Dashboard(tel, Settings())
    qtbot.addWidget(dash)
    tel.ingest(GpuSample(t=1.0, name="Old GPU", vram_used=1 << 30, vram_total=8 << 30))
    assert dash.power.value.text() == "n/a" and dash.clock.value.text() == "n/a"
    assert "n/a" in dash.clock.detail.text()


def test_sampler_thread_reads_nvml_in_background(qtbot, store):
    gpu = FakeGpu()
    tel = Telemetry(store, source=gpu, idle_interval_s=0.05)
    tel.start()
    qtbot.waitUntil(lambda: len(tel.history.values("power_w")) >= 3, timeout=5000)
    tel.stop()
    assert tel.latest is not None and tel.latest.name == "Fake RTX 4090"


def test_plan_rows_accepts_list_form():
    rows, budget = plan_rows({"lines": [{"name": "weights embed", "bytes": 10}, {"name": "KV pool", "bytes": 5},
                                        {"name": "weights mlp_down", "bytes": 7}, {"name": "weights vision", "bytes": 2},
                                        {"name": "workspace (vision)", "bytes": 1}, {"name": "margin", "bytes": 3},
                                        {"name": "GDN recurrent state", "bytes": 4}], "budget_bytes": 40})
    assert rows == [("weights", 17.0), ("KV pool", 5.0), ("vision", 3.0), ("graphs + margin", 3.0),
                    ("state", 4.0)] and budget == 40


def test_throttle_bits_decode():
    assert decode_throttle(0x4 | 0x40) == ["software power cap", "hardware thermal"]
