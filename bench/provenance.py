"""What a benchmark result records about where it came from."""

from __future__ import annotations

import os
import subprocess


def commit() -> str:
    """MONORAIL_COMMIT (device calls run on a copy of the tree without .git), else the checkout's HEAD."""
    return os.environ.get("MONORAIL_COMMIT") or subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                                                               text=True).stdout.strip()
