#!/usr/bin/env bash
# Register Monorail with the desktop for the current user (menu entry, icon, AppStream data).
# Run after `pip install` (or scripts/install.sh) so that `monorail` is on PATH.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
data="${XDG_DATA_HOME:-$HOME/.local/share}"
id=io.github.monorail.Monorail
install -Dm644 "$here/$id.desktop" "$data/applications/$id.desktop"
install -Dm644 "$here/../resources/icons/monorail.svg" "$data/icons/hicolor/scalable/apps/$id.svg"
install -Dm644 "$here/$id.metainfo.xml" "$data/metainfo/$id.metainfo.xml"
if ! command -v monorail >/dev/null 2>&1; then
  bin="$(cd "$here/.." && pwd)/.venv/bin/monorail"
  [ -x "$bin" ] && sed -i "s|^Exec=monorail|Exec=$bin|" "$data/applications/$id.desktop"
fi
command -v update-desktop-database >/dev/null && update-desktop-database "$data/applications" || true
command -v gtk-update-icon-cache >/dev/null && gtk-update-icon-cache -q "$data/icons/hicolor" || true
echo "Monorail added to the application menu ($data/applications/$id.desktop)."
