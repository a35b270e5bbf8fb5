"""The desktop entry, AppStream file and icon agree with the installed command."""

from __future__ import annotations

import configparser
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP_ID = "io.github.monorail.Monorail"


def test_desktop_entry_runs_the_console_script_and_has_an_icon():
    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str
    entry.read(ROOT / "packaging" / f"{APP_ID}.desktop", encoding="utf-8")
    d = entry["Desktop Entry"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert d["Exec"] in scripts and d["Type"] == "Application" and d["Icon"] == APP_ID
    assert (ROOT / "resources" / "icons" / "monorail.svg").exists()
    ET.parse(ROOT / "resources" / "icons" / "monorail.svg")


def test_appstream_metadata_names_the_desktop_file_and_binary():
    root = ET.parse(ROOT / "packaging" / f"{APP_ID}.metainfo.xml").getroot()
    assert root.findtext("id") == APP_ID
    assert root.find("launchable").text == f"{APP_ID}.desktop"
    assert root.find("provides/binary").text == "monorail"
    for shot in root.iter("image"):
        assert (ROOT / "docs" / "screenshots" / shot.text.rsplit("/", 1)[-1]).exists()
