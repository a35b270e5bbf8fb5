"""Start the desktop app: `monorail` with no arguments lands here."""

from __future__ import annotations

import sys

from app.i18n import set_language, tr
from app.settings import load_settings_report


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
    loaded = load_settings_report()
    settings = loaded.settings
    set_language(settings.language)
    dark = apply_theme(qapp, settings.theme)
    store = Store()
    client = WorkerClient(factory or DEFAULT_FACTORY)
    controller = ChatController(store, settings, client)
    telemetry = Telemetry(store, source=nvml_source)
    window = MainWindow(controller, settings, telemetry, dark=dark)
    notes = start_notes(loaded, store)
    if notes:
        window.tell_at_start(notes)
    return qapp, window


def start_notes(loaded, store) -> list[str]:
    """What the user must hear about at start: files that could not be read (kept under another name) and
    settings that were reset. Nothing is ever dropped silently."""
    notes = []
    if store.set_aside is not None:
        notes.append(tr("Your chat history file could not be read ({reason}). It was kept, unchanged, as {path}, "
                        "and a new history was started.").format(reason=store.set_aside_reason, path=store.set_aside))
    if loaded.set_aside is not None:
        notes.append(tr("Your settings file could not be read ({reason}). It was kept as {path}; the defaults are "
                        "in use.").format(reason=loaded.reason, path=loaded.set_aside))
    if loaded.reset:
        notes.append(tr("Some saved settings were not valid and are back at their defaults: {names}.").format(
            names=", ".join(loaded.reset)))
    return notes


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
    from app.store import StoreError
    try:
        qapp, window = build(argv=argv)
    except StoreError as exc:          # a history from a newer Monorail: refuse, and leave it untouched
        from PySide6.QtWidgets import QMessageBox
        print(f"monorail: {exc}", file=sys.stderr)
        QMessageBox.critical(None, "Monorail", str(exc))
        return 1
    window.show()
    window.telemetry.start()
    window.controller.start()
    return qapp.exec()


if __name__ == "__main__":
    sys.exit(run())
