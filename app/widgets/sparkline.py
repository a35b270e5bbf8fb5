"""A small line plot drawn with QPainter (QtCharts is not part of PySide6-Essentials)."""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget


class Sparkline(QWidget):
    def __init__(self, color: str = "#2f6feb", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.values: list[float] = []
        self.caption = ""            # e.g. "last 5 min · 120-410 W", drawn under the line
        self.color = QColor(color)
        self.grid = QColor("#888888")
        self.setMinimumHeight(58)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def sizeHint(self) -> QSize:
        return QSize(220, 58)

    def set_values(self, values: list[float], caption: str = "") -> None:
        self.values = list(values)
        self.caption = caption
        self.update()

    def paintEvent(self, _event) -> None:  # noqa: N802 (Qt override)
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        r = QRectF(self.rect()).adjusted(2, 4, -2, -16)
        if self.caption:
            font = p.font()
            font.setPointSizeF(max(6.0, font.pointSizeF() * 0.8))
            p.setFont(font)
            p.setPen(self.palette().color(self.foregroundRole()))
            p.drawText(QRectF(self.rect()).adjusted(2, 0, -2, 0), Qt.AlignmentFlag.AlignBottom | Qt.AlignmentFlag.AlignLeft,
                       self.caption)
        grid = QColor(self.grid)
        grid.setAlpha(70)
        p.setPen(QPen(grid, 1, Qt.PenStyle.DotLine))
        p.drawLine(r.bottomLeft(), r.bottomRight())
        if len(self.values) < 2:
            p.end()
            return
        lo, hi = min(self.values), max(self.values)
        if hi - lo < 1e-9:
            lo, hi = lo - 1.0, hi + 1.0
        n = len(self.values)
        pts = [QPointF(r.left() + r.width() * i / (n - 1), r.bottom() - r.height() * (v - lo) / (hi - lo))
               for i, v in enumerate(self.values)]
        path = QPainterPath(pts[0])
        for pt in pts[1:]:
            path.lineTo(pt)
        fill = QPainterPath(path)
        fill.lineTo(pts[-1].x(), r.bottom())
        fill.lineTo(pts[0].x(), r.bottom())
        fill.closeSubpath()
        shade = QColor(self.color)
        shade.setAlpha(50)
        p.fillPath(fill, shade)
        p.setPen(QPen(self.color, 1.6))
        p.drawPath(path)
        p.end()


class StackedBar(QWidget):
    """One horizontal bar split into coloured segments (the planned VRAM breakdown)."""

    PALETTE = ["#2f6feb", "#8250df", "#1a7f37", "#bf8700", "#cf222e", "#0a7ea4", "#a475f9", "#6e7781"]

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.segments: list[tuple[str, float]] = []
        self.total = 0.0
        self.setMinimumHeight(26)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def set_segments(self, segments: list[tuple[str, float]], total: float) -> None:
        self.segments, self.total = segments, total
        self.update()

    def color(self, i: int) -> str:
        return self.PALETTE[i % len(self.PALETTE)]

    def paintEvent(self, _event) -> None:  # noqa: N802
        p = QPainter(self)
        r = QRectF(self.rect()).adjusted(1, 1, -1, -1)
        p.setPen(QPen(QColor("#888888"), 1))
        p.drawRoundedRect(r, 4, 4)
        if self.total > 0:
            x = r.left()
            for i, (_name, value) in enumerate(self.segments):
                w = r.width() * min(value, self.total) / self.total
                p.fillRect(QRectF(x, r.top() + 1, max(w, 0.0), r.height() - 2), QColor(self.color(i)))
                x += w
        p.end()
