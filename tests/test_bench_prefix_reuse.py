"""bench/prefix_reuse.py, the script that times a long conversation's next turn with and without prefix reuse, run
on the demo model (reference backend, CPU) so its turns and its record are checked without a GPU: the second turn
and the regenerated reply resume, the comparison does not, and the history is about the length asked for."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_the_script_records_resumed_and_recomputed_turns(tmp_path, monkeypatch):
    monkeypatch.setenv("MONORAIL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.syspath_prepend(str(BENCH))   # the script imports provenance from its own folder
    spec = importlib.util.spec_from_file_location("prefix_reuse_bench", BENCH / "prefix_reuse.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "r.json"
    assert mod.main(["--demo", "--histories", "900", "--out", str(out), "--states-dir", str(tmp_path / "st")]) == 0
    result = json.loads(out.read_text())
    (row,) = result["rows"]
    assert abs(row["turn1_prompt_tokens"] - 900) < 300                 # within a message of the length asked
    assert row["snapshot_s"] is not None and row["turn2_snapshot_s"] is not None
    # turn 2 resumes where turn 1's history ended (before its generation prompt) and prefills the rest
    assert 0 < row["turn2_cached_tokens"] < row["turn1_prompt_tokens"] <= row["turn2_cached_tokens"] + 10
    assert row["turn2_prefilled_tokens"] == row["turn2_prompt_tokens"] - row["turn2_cached_tokens"]
    # regenerating resumes from turn 2's own history end; with reuse off nothing is resumed
    assert row["turn2_cached_tokens"] < row["regenerate_cached_tokens"] < row["turn2_prompt_tokens"]
    assert row["turn2_without_reuse_cached_tokens"] == 0
    # after another conversation, the third turn resumes from the snapshot set aside (regenerate's history end)
    assert row["switch_back_cached_tokens"] == row["regenerate_cached_tokens"]
    assert row["set_aside_detach_s"] is not None and row["switch_back_resume_s"] is not None
    # the edited third turn resumes where turn 2's history ended, as the switch back did
    assert row["edit_cached_tokens"] == row["switch_back_cached_tokens"] and row["edit_resume_s"] is not None
    # after a restart (nothing in memory), the next turn resumes from the state saved to disk: the edited turn's
    # history end
    assert row["restart_cached_tokens"] > row["edit_cached_tokens"] and row["restart_state_gb"] > 0
    assert row["restart_save_s"] is not None and not (tmp_path / "st").exists()
    assert row["ttft_speedup"] == round(row["turn2_without_reuse_ttft_s"] / row["turn2_ttft_s"], 1)
    assert result["gpu"] == "cpu" and result["median_speedup"] == row["ttft_speedup"]
