"""Start the desktop app: `monorail` with no arguments lands here."""

from __future__ import annotations

import sys

from app.i18n import set_language
from app.settings import load_settings


def _app_icon():
    from PySide6.QtGui import QIcon

    from engine.paths import resources_dir

    try:
        return QIcon(str(resources_dir() / "icons" / "monorail.svg"))
    except FileNotFoundError:
        return QIcon()


def build(factory: str | None = None, nvml_source=None, argv: list[str] | None = None):
    """Create the application objects (used by run() and by tests). Returns (qapp, window)."""
    from PySide6.QtWidgets import QApplication

    from app.chat_controller import ChatController
    from app.main_window import MainWindow
    from app.store import Store
    from app.telemetry import Telemetry
    from app.theme import apply_theme
    from app.worker_client import WorkerClient
    from engine.worker import DEFAULT_FACTORY

    qapp = QApplication.instance() or QApplication(argv or sys.argv[:1])
    qapp.setApplicationName("Monorail")
    qapp.setDesktopFileName("io.github.monorail.Monorail")
    qapp.setWindowIcon(_app_icon())
    settings = load_settings()
    set_language(settings.language)
    dark = apply_theme(qapp, settings.theme)
    store = Store()
    client = WorkerClient(factory or DEFAULT_FACTORY)
    controller = ChatController(store, settings, client)
    telemetry = Telemetry(store, source=nvml_source)
    window = MainWindow(controller, settings, telemetry, dark=dark)
    return qapp, window


def no_display_reason() -> str:
    """Why a window cannot open here ('' when it can): Qt would otherwise abort with a core dump."""
    import os

    if os.environ.get("QT_QPA_PLATFORM") or os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return ""
    if sys.platform.startswith("linux"):
        return ("No graphical display found (neither DISPLAY nor WAYLAND_DISPLAY is set). Run `monorail` from a "
                "desktop session, or chat in the terminal with `monorail chat`.")
    return ""


def run(argv: list[str] | None = None) -> int:
    import multiprocessing

    reason = no_display_reason()
    if reason:
        print(reason, file=sys.stderr)
        return 1

    multiprocessing.freeze_support()   # a frozen bundle re-enters here to become the engine worker
    qapp, window = build(argv=argv)
    window.show()
    window.telemetry.start()
    window.controller.start()
    return qapp.exec()


if __name__ == "__main__":
    sys.exit(run())
