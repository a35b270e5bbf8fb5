"""What a benchmark result records about where it came from."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile


def _git(*args: str, env: dict | None = None) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, env=env).stdout.strip()


def working_tree_id() -> str:
    """Git's tree id of the files as they are (tracked and untracked, less the ignored), through a scratch index, so
    the real index is untouched. Equal to a commit's tree id exactly when the files are that commit's."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": os.path.join(tmp, "index")}
        _git("add", "-A", ":/", env=env)  # the whole checkout, from any directory
        return _git("write-tree", env=env)


def commit() -> str:
    """MONORAIL_COMMIT if set, else the checkout's HEAD; where the files differ from HEAD, HEAD+tree:<id> (find the
    commit with `git log --format='%H %T' | grep <id>`). A device call's copy of the tree answers git with the
    session's first commit (session 32), so its HEAD alone does not say what ran."""
    if os.environ.get("MONORAIL_COMMIT"):
        return os.environ["MONORAIL_COMMIT"]
    head = _git("rev-parse", "HEAD")
    if not head:
        return ""
    tree = working_tree_id()
    return head if not tree or tree == _git("rev-parse", "HEAD^{tree}") else f"{head}+tree:{tree}"


def write_result(path: str, result: dict) -> None:
    """Write a benchmark's result as indented JSON (its folder made if need be); benchmarks call it after every row,
    so a run cut short keeps what it measured."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
