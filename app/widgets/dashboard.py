"""The dashboard: planned VRAM beside live VRAM, power and energy, engine speed, clocks, plots."""

from __future__ import annotations

from PySide6.QtWidgets import QFrame, QGridLayout, QLabel, QScrollArea, QVBoxLayout, QWidget

from app.i18n import tr
from app.settings import Settings
from app.telemetry import EngineStats, GpuSample, Telemetry
from app.widgets.sparkline import Sparkline, StackedBar

NA = "n/a"


def gib(n: float | None) -> str:
    return NA if n is None else f"{n / 2**30:.2f} GiB"


def fmt(value, spec: str, unit: str = "") -> str:
    return NA if value is None else f"{value:{spec}}{unit}"


# The engine's plan lines, grouped into the categories a user reasons about (first match wins).
PLAN_GROUPS = [("weights vision", "vision"), ("workspace (vision)", "vision"), ("weights", "weights"),
               ("kv", "KV pool"), ("gdn", "state"), ("lane state", "state"), ("mtp", "speculative"),
               ("spec", "speculative"), ("workspace", "workspaces"), ("decode-graph", "graphs + margin"),
               ("margin", "graphs + margin"), ("alignment", "graphs + margin")]


def group_plan_rows(rows: list[tuple[str, float]]) -> list[tuple[str, float]]:
    grouped: dict[str, float] = {}
    for name, b in rows:
        group = next((g for prefix, g in PLAN_GROUPS if name.lower().startswith(prefix)), name)
        grouped[group] = grouped.get(group, 0.0) + b
    return list(grouped.items())


def plan_rows(plan: dict | None) -> tuple[list[tuple[str, float]], float | None]:
    """(group, bytes) rows and the budget from the engine's plan (engine.plan.Plan.as_dict(), as the
    worker sends it in ModelLoaded and PlanResult); no rows when the backend has no plan."""
    if not plan:
        return [], None
    rows = [(str(line["label"]), float(line["bytes"])) for line in plan.get("lines", ())]
    return group_plan_rows([r for r in rows if r[1] > 0]), plan.get("budget")


def format_plan(plan: dict | None) -> str:
    """The plan as a plain-text table (used when the engine sends a plan without its own text)."""
    rows, budget = plan_rows(plan)
    if not rows:
        return tr("No memory plan for this backend.")
    width = max(len(name) for name, _ in rows) + 2
    lines = [f"{name:<{width}}{gib(b):>12}" for name, b in rows]
    total = sum(b for _, b in rows)
    lines.append("-" * (width + 12))
    lines.append(f"{tr('total'):<{width}}{gib(total):>12}")
    if budget:
        verdict = tr("fits") if total <= budget else tr("over budget by {d}").format(d=gib(total - budget))
        lines.append(f"{tr('budget'):<{width}}{gib(budget):>12}  {verdict}")
    return "\n".join(lines)


class Card(QFrame):
    def __init__(self, title: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("card")
        self.lay = QVBoxLayout(self)
        t = QLabel(title)
        t.setObjectName("cardTitle")
        self.lay.addWidget(t)
        self.value = QLabel(NA)
        self.value.setObjectName("bigNumber")
        self.lay.addWidget(self.value)
        self.detail = QLabel("")
        self.detail.setObjectName("cardTitle")
        self.detail.setWordWrap(True)
        self.lay.addWidget(self.detail)
        self.lay.addStretch(1)  # a card in a row of taller cards keeps its lines at the top, as they do


class PlotCard(Card):
    def __init__(self, title: str, color: str, parent: QWidget | None = None) -> None:
        super().__init__(title, parent)
        self.plot = Sparkline(color)
        self.lay.insertWidget(self.lay.count() - 1, self.plot)  # above Card's closing stretch


class Dashboard(QScrollArea):
    def __init__(self, telemetry: Telemetry, settings: Settings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.telemetry = telemetry
        self.settings = settings
        self.setWidgetResizable(True)
        inner = QWidget()
        col = QVBoxLayout(inner)
        col.setContentsMargins(12, 12, 12, 12)

        self.gpu_label = QLabel()
        self.gpu_label.setObjectName("gpuLabel")
        self.gpu_label.setWordWrap(True)
        col.addWidget(self.gpu_label)

        self.plan_card = Card(tr("Planned VRAM (engine memory plan)"))
        self.plan_bar = StackedBar()
        self.plan_card.lay.insertWidget(2, self.plan_bar)
        self.plan_legend = QLabel()
        self.plan_legend.setWordWrap(True)
        self.plan_card.lay.addWidget(self.plan_legend)
        col.addWidget(self.plan_card)

        grid = QGridLayout()
        grid.setSpacing(10)
        self.vram = PlotCard(tr("VRAM used"), "#8250df")
        self.power = PlotCard(tr("Power"), "#cf222e")
        self.temp = PlotCard(tr("Temperature"), "#bf8700")
        self.clock = PlotCard(tr("SM clock"), "#0a7ea4")
        self.speed = PlotCard(tr("Decode speed"), "#1a7f37")
        self.prefill = Card(tr("Prefill speed"))
        self.energy_reply = Card(tr("Energy per token (last reply)"))
        self.energy_today = Card(tr("Energy today"))
        self.energy_month = Card(tr("Energy this month"))
        self.engine = Card(tr("Engine process"))
        cards = [self.vram, self.power, self.temp, self.clock, self.speed, self.prefill,
                 self.energy_reply, self.energy_today, self.energy_month, self.engine]
        for i, card in enumerate(cards):
            grid.addWidget(card, i // 3, i % 3)
        col.addLayout(grid)
        col.addStretch(1)
        self.setWidget(inner)

        telemetry.sampled.connect(self.on_sample)
        telemetry.stats_changed.connect(self.on_stats)
        telemetry.energy_changed.connect(self.update_energy)
        self.on_sample(telemetry.latest)
        self.on_stats(telemetry.stats)

    def set_dark(self, dark: bool) -> None:
        for card in (self.vram, self.power, self.temp, self.clock, self.speed):
            card.plot.update()

    # -- GPU -------------------------------------------------------------------------------------
    def on_sample(self, s: GpuSample | None) -> None:
        src = self.telemetry.source
        if not src.available:
            self.gpu_label.setText(tr("No NVIDIA GPU found ({reason}). GPU readings are unavailable; engine "
                                      "statistics are still shown.").format(reason=src.reason or "NVML unavailable"))
        elif s is not None:
            every = self.telemetry.interval_s
            self.gpu_label.setText(tr("{name} · sampled every {s:g} s").format(name=s.name or "GPU", s=every))
        h = self.telemetry.history
        if s is not None:
            self.vram.value.setText(f"{gib(s.vram_used)} / {gib(s.vram_total)}")
            self.power.value.setText(fmt(s.power_w, ".0f", " W"))
            self.temp.value.setText(fmt(s.temperature_c, ".0f", " °C"))
            self.clock.value.setText(fmt(s.sm_clock_mhz, ".0f", " MHz"))
            if s.throttle_reasons is None:
                reasons = NA
            else:
                reasons = ", ".join(tr(r) for r in s.throttle_reasons) or tr("none")
            self.clock.detail.setText(tr("Throttle reasons: {r}").format(r=reasons))
            self.power.detail.setText(tr("Utilisation: {u}").format(u=fmt(s.utilization, ".0f", " %")))
        for card, name, unit in ((self.vram, "vram_gib", "GiB"), (self.power, "power_w", "W"),
                                 (self.temp, "temperature_c", "°C"), (self.clock, "sm_clock_mhz", "MHz")):
            card.plot.set_values(h.values(name), self._caption(name, unit))
        self.update_energy()

    def _caption(self, name: str, unit: str) -> str:
        series = self.telemetry.history.series.get(name)
        if not series or len(series) < 2:
            return ""
        span = series[-1][0] - series[0][0]
        lo, hi = min(v for _, v in series), max(v for _, v in series)
        digits = 1 if hi < 100 else 0
        return tr("last {m:.1f} min · {lo:.{d}f}–{hi:.{d}f} {unit}").format(m=span / 60, lo=lo, hi=hi, d=digits,
                                                                           unit=unit)

    # -- engine ------------------------------------------------------------------------------------
    def on_stats(self, st: EngineStats) -> None:
        self.speed.value.setText(fmt(st.decode_tok_s, ".1f", " tok/s"))
        accept = fmt(None if st.spec_accept_rate is None else 100 * st.spec_accept_rate, ".0f", " %")
        self.speed.detail.setText(tr("Speculative acceptance: {a} · TTFT {t}").format(
            a=accept, t=fmt(st.ttft_s, ".2f", " s")))
        speeds = self.telemetry.history.values("decode_tok_s")
        self.speed.plot.set_values(speeds, tr("1 recent reply") if len(speeds) == 1
                                   else tr("{n} recent replies").format(n=len(speeds)))
        self.prefill.value.setText(fmt(st.prefill_tok_s, ".0f", " tok/s"))
        if st.last_reply_joules is not None and st.last_reply_tokens:
            self.energy_reply.value.setText(f"{st.last_reply_joules / st.last_reply_tokens:.2f} J")
            self.energy_reply.detail.setText(tr("{j:.1f} J for {n} tokens").format(
                j=st.last_reply_joules, n=st.last_reply_tokens))
        else:
            self.energy_reply.value.setText(NA)
        wk = st.worker
        if wk is None:
            self.engine.value.setText(NA)
            self.engine.detail.setText(tr("The engine worker has not reported yet."))
        else:
            self.engine.value.setText(tr("{rss} resident").format(rss=gib(wk.rss_bytes)))
            state = tr("generating") if wk.generating else tr("idle")
            self.engine.detail.setText(tr("pid {pid} · {model} · {backend} · {state}").format(
                pid=wk.pid, model=wk.model or tr("no model"), backend=wk.backend or "-", state=state))
        rows, budget = plan_rows(st.plan)
        total = sum(b for _, b in rows)
        latest = self.telemetry.latest
        capacity = budget or (latest.vram_total if latest and latest.vram_total else None) or total
        if rows and capacity and capacity > total:
            rows_shown = rows + [(tr("free"), capacity - total)]
        else:
            rows_shown = rows
        self.plan_bar.set_segments(rows_shown, max(capacity or 0, total))
        if rows:
            self.plan_card.value.setText(tr("{used} planned of {cap}").format(used=gib(total), cap=gib(capacity)))
            legend = [f'<span style="color:{self.plan_bar.color(i)}">■</span> {name}: {gib(b)}'
                      for i, (name, b) in enumerate(rows_shown)]
            self.plan_legend.setText(" &nbsp; ".join(legend))
        else:
            self.plan_card.value.setText(NA)
            self.plan_legend.setText(tr("The loaded backend reports no memory plan (the reference backend "
                                        "allocates as it goes)."))
        self.update_energy()

    def update_energy(self) -> None:
        today, month = self.telemetry.energy_today_j(), self.telemetry.energy_month_j()
        tariff, cur = self.settings.tariff_per_kwh, self.settings.currency
        measured = self.telemetry.source.available
        for card, joules in ((self.energy_today, today), (self.energy_month, month)):
            if not measured and not joules:  # no power readings: 0 kWh would be a claim, not a measurement
                card.value.setText(NA)
                card.detail.setText(tr("Needs the GPU's power readings."))
                continue
            kwh = joules / 3.6e6
            card.value.setText(f"{kwh:.4f} kWh")
            card.detail.setText(tr("{cost} at {tariff} per kWh").format(
                cost=f"{cur}{kwh * tariff:.3f}", tariff=f"{cur}{tariff:.2f}"))
