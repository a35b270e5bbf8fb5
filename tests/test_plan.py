"""Memory plan (engine/plan.py + the native dry run) against MODEL.md's byte counts."""

from __future__ import annotations

import pytest

from engine.plan import (GiB, MiB, PlanRequest, make_plan, matrix_shapes, streamed_weight_bytes,
                         uniform_recipe, weight_bytes_by_role, kv_bytes_per_token)
from engine.registry import config_27b

CFG = config_27b()
T = CFG.text


def test_matrix_params_match_model_md():
    # MODEL.md: 25.62 G matrix params read per decode token (everything but the embedding).
    params = sum(n * k for role, shapes in matrix_shapes(T).items() if role != "embed" for n, k in shapes)
    assert abs(params - 25.62e9) / 25.62e9 < 0.001
    # text parameter count: matrices + embedding + norms/conv/A/dt (26,895,998,464 in MODEL.md)
    emb = T.vocab_size * T.hidden_size
    assert params + emb < 26_895_998_464 < params + emb + 20e6


def test_weight_bytes_at_4_125_bits_is_13_2_gb():
    # A format with 4.125 bits/weight (4-bit codes + one fp16 scale per 128) is MODEL.md's 13.2 GB;
    # our groups are 64 or 32, so check the formula by its bits/weight instead.
    b = streamed_weight_bytes(T, uniform_recipe(4, 64))
    params = sum(n * k for role, shapes in matrix_shapes(T).items() if role != "embed" for n, k in shapes)
    assert b == params * 4.25 / 8
    assert abs(params * 4.125 / 8 - 13.2e9) / 13.2e9 < 0.005


# MODEL.md's table: 16 layers x 2 (K, V) x 4 kv heads x 256 dims = 32,768 elements per token; int4 group 64
# is 0.5 + 2/64 bytes per element (the table's int4/int4 row: 17,408 B, 4.25 GiB at 262,144 tokens).
@pytest.mark.parametrize("kv, per_token, total_gib", [("bf16", 65_536, 16.0), ("int8", 33_792, 8.25),
                                                       ("int4", 17_408, 4.25)])
def test_kv_pool_bytes(kv, per_token, total_gib):
    assert kv_bytes_per_token(T, kv) == per_token
    plan = make_plan(CFG, PlanRequest(max_context=262_144, kv_dtype=kv, vram_budget=1 << 50))
    assert plan.line("KV pool").bytes == per_token * 262_144
    assert plan.line("KV pool").bytes / GiB == total_gib


def test_int4_kv_lines_are_codes_and_scales():
    """Per attention layer: K and V codes (capacity x 4 heads x 128 bytes) and their fp16 scales
    (capacity x 4 heads x 4 groups x 2 bytes), the scales exactly int8's."""
    cap = 4096
    p4 = make_plan(CFG, PlanRequest(max_context=cap, kv_dtype="int4", vram_budget=1 << 50))
    p8 = make_plan(CFG, PlanRequest(max_context=cap, kv_dtype="int8", vram_budget=1 << 50))
    kv4 = {a.name: a.bytes for a in p4.allocations if a.category == "kv"}
    kv8 = {a.name: a.bytes for a in p8.allocations if a.category == "kv"}
    assert kv4.keys() == kv8.keys() and len(kv4) == 16 * 4
    for name, nbytes in kv4.items():
        if name.endswith("_scales"):
            assert nbytes == kv8[name] == cap * 4 * 4 * 2
        else:
            assert nbytes == cap * 4 * 128 == kv8[name] // 2
    assert p8.total - p4.total == 16 * 2 * cap * 4 * 128


def test_unknown_kv_dtype_is_refused():
    with pytest.raises(ValueError, match="int4"):
        make_plan(CFG, PlanRequest(max_context=1024, kv_dtype="int2", vram_budget=1 << 50))


def test_262k_q4_27b_vision_int4_fits_24_gib(capsys):
    """The product promise, planned as `monorail plan --recipe q4-27b --vision --kv int4` plans it: the
    default converter recipe, the vision tower and 262,144 tokens of int4 KV in 24 GiB. With int8 KV the
    same plan does not fit (the recipe was sized for a 4-bit cache); int4 saves 16 x 2 x 262,144 x 4 x 128
    bytes = 4.0 GiB of KV codes."""
    from engine.cli import main
    rc = main(["plan", "--recipe", "q4-27b", "--vision", "--kv", "int4", "--context", "262144",
               "--vram-budget", "24GiB"])
    out = capsys.readouterr().out
    assert rc == 0 and "DOES NOT FIT" not in out, out
    rc = main(["plan", "--recipe", "q4-27b", "--vision", "--kv", "int8", "--context", "262144",
               "--vram-budget", "24GiB"])
    assert rc == 2 and "DOES NOT FIT" in capsys.readouterr().out

    from engine.native_recipe import recipe_for_converter_recipe
    from engine.plan import fit_prefill_chunk
    from engine.registry import config_27b
    cfg = config_27b()
    base = PlanRequest(max_context=262_144, kv_dtype="int4", vision=True, vram_budget=24 * GiB,
                       recipe=recipe_for_converter_recipe("q4-27b", cfg))
    plan = make_plan(cfg, fit_prefill_chunk(cfg, base))
    assert plan.fits and plan.total <= 24 * GiB
    assert plan.line("KV pool").bytes == 17_408 * 262_144
    from dataclasses import replace
    assert not make_plan(cfg, fit_prefill_chunk(cfg, replace(base, kv_dtype="int8"))).fits


def test_gdn_state_is_144_mib_per_lane():
    for lanes in (1, 3):
        plan = make_plan(CFG, PlanRequest(max_context=4096, max_concurrency=lanes, vram_budget=1 << 50))
        assert plan.line("GDN recurrent state").bytes == lanes * 144 * MiB
        # conv state kept in fp32 as a ring of 4 slots per channel (gdn.cu): 4 / 3 of twice MODEL.md's bf16 2.95 MB
        assert plan.line("GDN conv state").bytes == lanes * 2 * 48 * 10240 * 4 * 2


@pytest.mark.parametrize("bits, group", [(4, 64), (5, 32), (6, 64), (8, 32)])
def test_dry_run_weights_equal_independent_formula(bits, group):
    recipe = uniform_recipe(bits, group)
    plan = make_plan(CFG, PlanRequest(max_context=1024, recipe=recipe, vram_budget=1 << 50))
    expected = weight_bytes_by_role(T, recipe)
    for role, nbytes in expected.items():
        assert plan.line(f"weights {role}").bytes == nbytes, role


def test_lines_add_up_and_offsets_do_not_overlap():
    plan = make_plan(CFG, PlanRequest(max_context=8192, speculative_window=3, vision=True, prefill_chunk=512))
    assert sum(ln.bytes for ln in plan.lines) == plan.total
    spans = sorted((a.offset, a.offset + a.bytes) for a in plan.allocations)
    for (s0, e0), (s1, _) in zip(spans, spans[1:]):
        assert e0 <= s1
    for a in plan.allocations:
        assert a.offset % a.align == 0


def test_workspace_is_the_max_of_its_phases():
    from engine.native import load_native
    from engine.plan import model_dims
    n = load_native()
    dims = model_dims(CFG)
    dec = n.step_workspace_bytes(dims, 4, 4)
    pre = n.prefill_workspace_bytes(dims, 2048)
    # prefill: the step workspace for the chunk, the GEMM's dequant slice and cuBLAS workspace, GDN scratch
    assert pre > n.step_workspace_bytes(dims, 2048, 1) + (96 << 20)
    vis = n.vision_workspace_bytes(dims, 4096)
    plan = make_plan(CFG, PlanRequest(max_context=8192, speculative_window=3, vision=True, prefill_chunk=2048))
    ws = [a for a in plan.allocations if a.category == "workspace"]
    assert len(ws) == 1 and ws[0].bytes == max(dec, pre, vis)
    # logits for 16 verify rows dominate a T=16 workspace: rows x vocab x fp32
    assert n.step_workspace_bytes(dims, 16, 16) - n.step_workspace_bytes(dims, 16, 1) >= 15 * T.vocab_size * 4


def test_262k_int8_fits_24_gib_and_deficit_reported():
    ok = make_plan(CFG, PlanRequest(max_context=262_144, kv_dtype="int8", vision=True, vram_budget=24 * GiB))
    assert ok.fits and ok.deficit == 0
    bad = make_plan(CFG, PlanRequest(max_context=262_144, kv_dtype="bf16", vision=True, vram_budget=24 * GiB))
    assert not bad.fits
    assert bad.deficit == bad.total - 24 * GiB
    # the largest fitting context fits, and 256 tokens more does not
    ctx = bad.largest_context
    assert ctx is not None and 0 < ctx < 262_144
    from dataclasses import replace
    assert make_plan(CFG, replace(bad.request, max_context=ctx)).fits
    assert not make_plan(CFG, replace(bad.request, max_context=ctx + 256)).fits
    assert "DOES NOT FIT" in bad.format_table()
    # the one sentence an error message leads with (the app's banner shows it above the table)
    assert bad.shortfall() == (f"The memory plan needs {bad.total / GiB:.2f} GiB, {bad.deficit / GiB:.2f} GiB more "
                               f"than the VRAM budget of 24.00 GiB; the largest context that fits is {ctx:,} tokens.")
    assert make_plan(CFG, replace(bad.request, max_context=ctx)).shortfall() == ""
    hopeless = make_plan(CFG, replace(bad.request, vram_budget=4 * GiB))
    assert hopeless.largest_context is None and "even a 256-token context does not fit" in hopeless.shortfall()


def test_impossible_request_is_refused_with_reason():
    with pytest.raises(ValueError, match="kv_dtype"):
        make_plan(CFG, PlanRequest(kv_dtype="fp8"))
    with pytest.raises(ValueError, match="bits"):
        make_plan(CFG, PlanRequest(recipe=uniform_recipe(3, 64)))


def test_cli_plan_prints_table(capsys):
    from engine.cli import main
    rc = main(["plan", "--context", "262144", "--kv", "bf16", "--vram-budget", "24GiB"])
    out = capsys.readouterr().out
    assert rc == 2 and "DOES NOT FIT" in out and "largest context that fits" in out
    rc = main(["plan", "--context", "32768", "--kv", "int8"])
    assert rc == 0 and "KV pool" in capsys.readouterr().out


@pytest.mark.parametrize("args, says", [
    (["--vram-budget", "banana"], "argument --vram-budget: not a size: 'banana'"),
    (["--vram-budget", "0"], "argument --vram-budget: a budget must be positive"),
    (["--vram-budget", "inf"], "argument --vram-budget: not a size: 'inf'"),
    (["--context", "-5"], "argument --context: must be at least 1"),
    (["--concurrency", "0"], "argument --concurrency: must be at least 1"),
    (["--spec", "-1"], "speculative_window must be in 0..15"),
    (["--kv", "fp8"], "--kv must be one of bf16, int8, int4"),
    (["--prefill-chunk", "x"], "--prefill-chunk must be 'auto' or a token count"),
    (["/nonexistent-monorail-model"], "no config.json at /nonexistent-monorail-model"),
])
def test_cli_plan_refuses_bad_input_in_one_line(capsys, args, says):
    """Bad settings or a missing folder: one 'error:' line naming the problem, exit status 2, no traceback."""
    from engine.cli import main
    try:
        rc = main(["plan", *args])
    except SystemExit as exc:  # argparse's usage errors
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2 and "monorail plan: error: " in err and says in err, err
    assert "Traceback" not in err


def test_plan_sizes_take_binary_units():
    import argparse

    from engine.commands.plan import parse_bytes
    assert parse_bytes("24GiB") == parse_bytes("24G") == parse_bytes("24 gb") == 24 << 30
    assert parse_bytes("22.5G") == int(22.5 * 2**30) and parse_bytes("512MiB") == 512 << 20
    assert parse_bytes("25769803776") == 25769803776
    with pytest.raises(argparse.ArgumentTypeError, match="did you mean 16GiB"):   # a bare 16 is not 16 bytes' plan
        parse_bytes("16")


# ---- split roles: a fused role's tail rows (GDN b|a, attention k|v) in a format of their own ----

def _q4_27b_native():
    """The native recipe of a q4-27b artifact: 8-bit b|a beside 4-bit qkv|z, 6-bit k|v beside 4-bit q."""
    from engine.plan import Recipe
    roles = dict(embed=(6, 64), lm_head=(6, 64), gdn_in=(4, 64), gdn_out=(5, 64), attn_qkv=(4, 64),
                 attn_o=(5, 64), mlp_gate_up=(4, 64), mlp_down=(5, 64))
    return Recipe("q4-27b-native", roles, {"gdn_in": (8, 64), "attn_qkv": (6, 64)})


def test_split_roles_get_one_plan_line_per_segment_with_its_formats_bytes():
    from engine.plan import quantized_bytes, weight_bytes_by_line
    recipe = _q4_27b_native()
    plan = make_plan(CFG, PlanRequest(max_context=1024, recipe=recipe, vram_budget=1 << 50))
    expected = weight_bytes_by_line(T, recipe)
    assert {"gdn_in qkv|z", "gdn_in b|a", "attn_qkv q", "attn_qkv k|v"} <= set(expected)
    for key, nbytes in expected.items():
        assert plan.line(f"weights {key}").bytes == nbytes, key
    for gone in ("weights gdn_in", "weights attn_qkv"):
        with pytest.raises(KeyError):
            plan.line(gone)
    # one tail matrix per layer of its kind, each exactly its rows in its format
    n_full = len(T.full_attention_layers)
    kv = [a for a in plan.allocations if a.category == "weights:attn_qkv k|v"]
    ba = [a for a in plan.allocations if a.category == "weights:gdn_in b|a"]
    assert len(kv) == 3 * n_full  # codes, high bits (6-bit), scales
    assert len(ba) == 2 * (T.num_hidden_layers - n_full)  # codes, scales (8-bit has no high bits)
    kv_rows, ba_rows = 2 * T.num_key_value_heads * T.head_dim, 2 * T.linear_num_value_heads
    assert sum(a.bytes for a in kv) == n_full * quantized_bytes(kv_rows, T.hidden_size, 6, 64)
    assert sum(a.bytes for a in ba) == (T.num_hidden_layers - n_full) * quantized_bytes(ba_rows, T.hidden_size, 8, 64)
    assert {a.name.rsplit(".", 1)[0] for a in kv if a.name.startswith("layers.3.")} == {"layers.3.self_attn.kv_proj"}


def test_split_plan_holds_the_converter_recipes_bytes():
    """Every text matrix of a q4-27b artifact is held in the bytes it is stored in (nothing re-quantized)."""
    from engine.recipe import get_recipe, recipe_bytes_by_role
    stored = recipe_bytes_by_role(get_recipe("q4-27b"), CFG)
    plan = make_plan(CFG, PlanRequest(max_context=1024, recipe=_q4_27b_native(), vram_budget=1 << 50))
    held = {ln.label: ln.bytes for ln in plan.lines}
    assert held["weights gdn_in qkv|z"] == stored["gdn.qkv"] + stored["gdn.z"]
    assert held["weights gdn_in b|a"] == stored["gdn.ab"]
    assert held["weights attn_qkv q"] == stored["attn.q"]
    assert held["weights attn_qkv k|v"] == stored["attn.kv"]
    assert held["weights mlp_gate_up"] == stored["mlp.gate_up"] and held["weights mlp_down"] == stored["mlp.down"]


def test_tail_in_the_heads_format_is_the_unsplit_sequence():
    """A tail given its head's format changes nothing: same allocations, names, sizes and offsets."""
    from engine.plan import Recipe
    plain = uniform_recipe(4, 64)
    same = Recipe("same", dict(plain.roles), {"gdn_in": (4, 64), "attn_qkv": (4, 64)})
    req = PlanRequest(max_context=2048, vision=True, vram_budget=1 << 50)
    a = make_plan(CFG, req).allocations
    b = make_plan(CFG, PlanRequest(**{**req.__dict__, "recipe": same})).allocations
    assert a == b


def test_split_sequence_is_deterministic_and_aligned():
    """The engine replays this sequence over its device block: two runs of it must be identical, and
    every segment must start on its alignment, with nothing overlapping."""
    req = PlanRequest(max_context=4096, vision=True, prefill_chunk=512, recipe=_q4_27b_native(), vram_budget=1 << 50)
    a, b = make_plan(CFG, req), make_plan(CFG, req)
    assert a.allocations == b.allocations and a.total == b.total
    assert sum(ln.bytes for ln in a.lines) == a.total
    spans = sorted((x.offset, x.offset + x.bytes) for x in a.allocations)
    assert all(e0 <= s1 for (_, e0), (s1, _) in zip(spans, spans[1:]))
    assert all(x.offset % x.align == 0 for x in a.allocations)


def test_only_gdn_in_and_attn_qkv_may_split():
    from engine.native import load_native
    from engine.plan import Recipe, model_dims
    with pytest.raises(ValueError, match="mlp_gate_up"):
        Recipe("bad", uniform_recipe(4, 64).roles, {"mlp_gate_up": (8, 64)})
    # the allocation sequence refuses it too (a shape dict written by hand)
    shape = PlanRequest(max_context=1024).shape_dict()
    shape["recipe_tail"] = {"mlp_gate_up": (8, 64)}
    with pytest.raises(ValueError, match="mlp_gate_up"):
        load_native().dry_run(model_dims(CFG), shape)
    shape["recipe_tail"] = {"gdn_inn": (8, 64)}
    with pytest.raises(ValueError, match="gdn_inn"):
        load_native().dry_run(model_dims(CFG), shape)
    with pytest.raises(ValueError, match="bits"):
        make_plan(CFG, PlanRequest(recipe=Recipe("b", uniform_recipe(4, 64).roles, {"gdn_in": (3, 64)})))


def test_auto_prefill_chunk_is_the_largest_that_fits():
    """fit_prefill_chunk: unused budget goes to the prefill workspace, never past the budget."""
    from dataclasses import replace

    from engine.plan import PREFILL_CHUNK_CHOICES, PlanRequest, fit_prefill_chunk, make_plan
    from engine.registry import config_27b
    cfg = config_27b(vision=True)
    base = PlanRequest(max_context=262144, kv_dtype="int8", vision=True, vram_budget=24 * GiB)
    got = fit_prefill_chunk(cfg, base)
    assert make_plan(cfg, got).fits
    larger = [c for c in PREFILL_CHUNK_CHOICES if c > got.prefill_chunk]
    assert all(not make_plan(cfg, replace(base, prefill_chunk=c)).fits for c in larger)
    assert got.prefill_chunk == 2048  # 4096 needs ~0.6 GiB more than 24 GiB leaves with vision at 262K
    # text only at the same context: 4096 fits
    assert fit_prefill_chunk(config_27b(vision=False), replace(base, vision=False)).prefill_chunk == 4096
    # nothing fits: the smallest choice, and the plan reports the deficit
    tiny = fit_prefill_chunk(cfg, replace(base, vram_budget=8 * GiB))
    assert tiny.prefill_chunk == PREFILL_CHUNK_CHOICES[-1] and not make_plan(cfg, tiny).fits


def test_mtp_head_lines():
    """mtp_drafts > 0 plans the MTP head: its matrices (MODEL.md: 424,699,392 parameters, less its five hidden-size
    norms and two head-size q/k norms) at the recipe's 4.25 bits, one attention layer's KV, and its hidden rows;
    every trunk line stays as it was."""
    base = PlanRequest(max_context=8192, speculative_window=3, vram_budget=1 << 50)
    plain = make_plan(CFG, base)
    from dataclasses import replace
    mtp = make_plan(CFG, replace(base, mtp_drafts=3))
    matrix_params = 424_699_392 - 5 * 5120 - 2 * 256
    assert mtp.line("weights mtp").bytes == matrix_params * 4.25 / 8
    assert mtp.line("MTP KV").bytes == 8192 * 2 * 4 * 256 * (1 + 2 / 64)   # int8 codes + fp16 group-64 scales
    assert mtp.line("MTP hidden rows").bytes == (4 + 1) * 5120 * 4          # 4 step rows per lane, 1 chained row
    small = mtp.line("weights small").bytes - plain.line("weights small").bytes
    assert small == (5 * 5120 + 2 * 256) * 4
    for ln in plain.lines:
        if ln.label not in ("alignment padding", "weights small"):
            assert mtp.line(ln.label).bytes == ln.bytes, ln.label
    with pytest.raises(KeyError):
        plain.line("weights mtp")


def test_mtp_drafts_beyond_the_verify_step_are_refused():
    with pytest.raises(ValueError, match="mtp_drafts"):
        make_plan(CFG, PlanRequest(max_context=4096, speculative_window=2, mtp_drafts=3))


def test_mtp_drafts_on_a_model_without_the_head_is_refused():
    import copy

    from engine.config import parse_config
    from engine.native_backend import NativeBackendError, NativeModel
    raw = copy.deepcopy(CFG.raw)
    raw["text_config"]["mtp_num_hidden_layers"] = 0
    with pytest.raises(NativeBackendError, match="no MTP head"):
        NativeModel._make_engine(parse_config(raw), kv_dtype="int8", max_context=4096, vram_budget_bytes=None,
                                 recipe=uniform_recipe(4, 64), lanes=1, step_tokens=4, margin=0, mtp_drafts=2)


def _state_image_bytes(t) -> int:
    """One lane's recurrent state: every GDN layer's state [v_heads, k_dim, v_dim] and conv ring [conv_dim, kernel],
    fp32 (NativeEngine.lane_state_floats x 4)."""
    n_linear = t.num_hidden_layers - len(t.full_attention_layers)
    per_layer = (t.linear_num_value_heads * t.linear_key_head_dim * t.linear_value_head_dim
                 + t.linear_conv_dim * t.linear_conv_kernel_dim)
    return n_linear * per_layer * 4


@pytest.mark.parametrize("drafts", [1, 3, 15])
def test_mtp_drafts_add_the_verify_checkpoints_and_nothing_else(drafts):
    """mtp_drafts = k: one line of k images of a lane's recurrent state (the state after each draft position of a
    verify step), 158,859,264 bytes each for the 27B; every other allocation as without drafts. No drafts: no line."""
    from dataclasses import replace
    base = PlanRequest(max_context=4096, speculative_window=15, vram_budget=1 << 50)
    plain = make_plan(CFG, base)
    assert "GDN state checkpoints (verify)" not in [ln.label for ln in plain.lines]
    assert not [a for a in plain.allocations if a.category == "spec_ckpt"]
    plan = make_plan(CFG, replace(base, mtp_drafts=drafts))
    assert _state_image_bytes(T) == 158_859_264
    assert plan.line("GDN state checkpoints (verify)").bytes == drafts * _state_image_bytes(T)
    # images of one lane whatever the lanes: the verify step of one lane is committed before the next step
    lanes3 = make_plan(CFG, replace(base, mtp_drafts=drafts, max_concurrency=3))
    assert lanes3.line("GDN state checkpoints (verify)").bytes == drafts * _state_image_bytes(T)
    # every other allocation as before, besides the MTP head's own (test_mtp_head_lines)
    head = ("weights:mtp", "mtp_kv", "mtp_hidden")
    others = [(a.name, a.category, a.bytes) for a in plan.allocations
              if a.category != "spec_ckpt" and a.category not in head and not a.name.startswith("mtp.")]
    assert others == [(a.name, a.category, a.bytes) for a in plain.allocations]


def test_mtp_drafts_beyond_the_speculative_window_are_refused():
    with pytest.raises(ValueError, match="mtp_drafts"):
        make_plan(CFG, PlanRequest(max_context=1024, speculative_window=3, mtp_drafts=4))
    with pytest.raises(ValueError, match="mtp_drafts"):
        make_plan(CFG, PlanRequest(max_context=1024, speculative_window=3, mtp_drafts=-1))
    # the allocation sequence itself refuses what PlanRequest would: drafts beyond the step's tokens - 1
    from engine.native import load_native
    from engine.plan import model_dims
    shape = PlanRequest(max_context=1024, speculative_window=3, mtp_drafts=3).shape_dict()
    load_native().dry_run(model_dims(CFG), shape)
    with pytest.raises(ValueError, match="mtp_drafts"):
        load_native().dry_run(model_dims(CFG), dict(shape, mtp_drafts=4))


def test_the_app_shows_the_plan_with_the_mtp_head_when_replies_draft(tmp_path, monkeypatch):
    """The worker's "Show memory plan" (engine.worker._compute_plan) is the plan a load uses: with speculation on (and
    verify steps that pay) it holds the MTP head and the verify checkpoints, without it neither."""
    from engine import native
    from engine.worker import _compute_plan
    monkeypatch.setenv("MONORAIL_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(native, "verify_steps_pay", lambda: True)   # else no head is planned (engine.native)
    on, text = _compute_plan("demo", {"mtp_speculation": True, "mtp_draft_tokens": 2, "max_context": 1024})
    off, _ = _compute_plan("demo", {"max_context": 1024})
    labels_on = {ln["label"] for ln in on["lines"]}
    labels_off = {ln["label"] for ln in off["lines"]}
    assert {"weights mtp", "MTP KV", "GDN state checkpoints (verify)"} <= labels_on
    assert not {"weights mtp", "MTP KV", "GDN state checkpoints (verify)"} & labels_off
    assert "MTP drafts 2" in text


def test_cli_plan_with_three_drafts_holds_the_head_and_still_fits_262k_in_24_gib(capsys):
    """`monorail plan --spec 3` on the 27B: the MTP head, its KV and three verify checkpoints are planned, and with
    int8 KV all 262,144 tokens still fit 24 GiB (the prefill chunk shrinks to make room)."""
    from engine.cli import main
    rc = main(["plan", "--spec", "3"])
    out = capsys.readouterr().out
    assert rc == 0, out
    for line in ("weights mtp", "MTP KV", "GDN state checkpoints (verify)", "MTP drafts 3", "context 262,144"):
        assert line in out, line
