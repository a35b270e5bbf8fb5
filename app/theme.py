"""Light and dark themes: Fusion style, a palette, and one small style sheet for chat elements."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

LIGHT = {"window": "#f4f5f7", "base": "#ffffff", "alt": "#eef0f3", "text": "#1f2328", "muted": "#656d76",
         "accent": "#2f6feb", "user": "#e8f0fe", "assistant": "#ffffff", "border": "#d0d7de",
         "warn_bg": "#fff4d6", "warn_fg": "#6b4e00", "err_bg": "#fde2e1", "err_fg": "#8a1c1c", "info_bg": "#e3f0ff"}
DARK = {"window": "#1e2024", "base": "#26292e", "alt": "#2d3036", "text": "#e6e6e6", "muted": "#9aa0a6",
        "accent": "#5b9bff", "user": "#2b3a55", "assistant": "#26292e", "border": "#3b3f46",
        "warn_bg": "#4a3b10", "warn_fg": "#ffe08a", "err_bg": "#5a1f1f", "err_fg": "#ffb4b4", "info_bg": "#1f3552"}


def resolve_dark(theme: str) -> bool:
    if theme == "dark":
        return True
    if theme == "light":
        return False
    app = QGuiApplication.instance()
    return bool(app) and app.styleHints().colorScheme() == Qt.ColorScheme.Dark


def _palette(c: dict) -> QPalette:
    p = QPalette()
    roles = {QPalette.ColorRole.Window: c["window"], QPalette.ColorRole.WindowText: c["text"],
             QPalette.ColorRole.Base: c["base"], QPalette.ColorRole.AlternateBase: c["alt"],
             QPalette.ColorRole.Text: c["text"], QPalette.ColorRole.Button: c["alt"],
             QPalette.ColorRole.ButtonText: c["text"], QPalette.ColorRole.Highlight: c["accent"],
             QPalette.ColorRole.HighlightedText: "#ffffff", QPalette.ColorRole.ToolTipBase: c["base"],
             QPalette.ColorRole.ToolTipText: c["text"], QPalette.ColorRole.PlaceholderText: c["muted"],
             QPalette.ColorRole.Link: c["accent"]}
    for role, color in roles.items():
        p.setColor(role, QColor(color))
    p.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.ButtonText, QColor(c["muted"]))
    p.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text, QColor(c["muted"]))
    return p


def _sheet(c: dict) -> str:
    return f"""
    QFrame#userMessage {{ background: {c['user']}; border: 1px solid {c['border']}; border-radius: 8px; }}
    QFrame#assistantMessage {{ background: {c['assistant']}; border: 1px solid {c['border']}; border-radius: 8px; }}
    QTextBrowser#messageBody, QTextBrowser#thinkingView {{ background: transparent; }}
    QTextBrowser#thinkingView {{ color: {c['muted']}; border-left: 3px solid {c['border']}; padding-left: 6px; }}
    QLabel#roleLabel {{ font-weight: bold; color: {c['muted']}; }}
    QLabel#statsLabel, QLabel#emptyLabel, QLabel#contextLabel, QLabel#editNote {{ color: {c['muted']}; }}
    QLabel#statusLabel {{ color: {c['err_fg']}; }}
    QLabel#contextLabel[warning="true"] {{ color: {c['warn_fg']}; font-weight: bold; }}
    QProgressBar#contextBar {{ border: 1px solid {c['border']}; border-radius: 3px; background: {c['alt']}; }}
    QProgressBar#contextBar::chunk {{ background: {c['accent']}; border-radius: 3px; }}
    QProgressBar#contextBar[warning="true"]::chunk {{ background: #d29922; }}
    QToolButton#thinkingToggle {{ border: none; color: {c['muted']}; }}
    QFrame#banner {{ border-radius: 6px; background: {c['info_bg']}; }}
    QFrame#banner[kind="warning"] {{ background: {c['warn_bg']}; }}
    QFrame#banner[kind="warning"] QLabel {{ color: {c['warn_fg']}; }}
    QFrame#banner[kind="error"] {{ background: {c['err_bg']}; }}
    QFrame#banner[kind="error"] QLabel {{ color: {c['err_fg']}; }}
    QFrame#composer {{ border-top: 1px solid {c['border']}; }}
    QFrame#attachmentChip {{ border: 1px solid {c['border']}; border-radius: 6px; background: {c['alt']}; }}
    QPushButton#sendButton {{ background: {c['accent']}; color: white; padding: 4px 16px; border-radius: 4px; }}
    QPushButton#stopButton {{ background: #cf222e; color: white; padding: 4px 16px; border-radius: 4px; }}
    QLabel#bigNumber {{ font-size: 18px; font-weight: bold; }}
    QLabel#cardTitle {{ color: {c['muted']}; }}
    QFrame#card {{ border: 1px solid {c['border']}; border-radius: 8px; background: {c['base']}; }}
    """


def colors(dark: bool) -> dict:
    return DARK if dark else LIGHT


def apply_theme(app: QApplication, theme: str) -> bool:
    """Apply light, dark or the system's choice; returns whether the result is dark."""
    dark = resolve_dark(theme)
    app.setStyle("Fusion")
    c = colors(dark)
    app.setPalette(_palette(c))
    app.setStyleSheet(_sheet(c))
    return dark
