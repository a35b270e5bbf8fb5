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

    plan = {"lines": [{"label": "weights embed", "bytes": 10 << 30}, {"label": "weights mlp_down", "bytes": 4 << 30},
                      {"label": "KV pool", "bytes": 5 << 30}, {"label": "GDN recurrent state", "bytes": 1 << 30},
                      {"label": "workspace (prefill)", "bytes": 512 << 20}], "budget": 24 << 30}
    tel.engine_event(P.ModelLoaded("l", "m", False, 262144, True, "native", plan))
    names = [n for n, _ in dash.plan_bar.segments]
    assert names == ["weights", "KV pool", "state", "workspaces", "free"]
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


def test_plan_rows_group_the_engines_own_plan():
    """The shape the worker really sends (engine.plan.Plan.as_dict()): every line lands in a group, the
    groups add up to the plan's total, and the budget is the plan's."""
    from engine.plan import PlanRequest, make_plan
    from engine.registry import config_27b

    plan = make_plan(config_27b(vision=True), PlanRequest(max_context=262144, kv_dtype="int8", vision=True,
                                                          vram_budget=24 << 30))
    rows, budget = plan_rows(plan.as_dict())
    assert [name for name, _ in rows] == ["weights", "vision", "KV pool", "state", "graphs + margin"]
    assert sum(b for _, b in rows) == plan.total and budget == plan.budget == 24 << 30
    assert plan_rows(None) == ([], None)


def test_throttle_bits_decode():
    assert decode_throttle(0x4 | 0x40) == ["software power cap", "hardware thermal"]
