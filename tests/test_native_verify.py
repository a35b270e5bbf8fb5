"""Speculative verify steps on the native engine (GPU): a step of the last token and k drafts that keeps the
recurrent state after each of its tokens (forward(keep_states=True)), then commit(kept).

- after commit(kept) the sequence continues as one that consumed only the kept tokens: the next step's logits
  match such a sequence's to rounding, and are much farther from one a token longer or shorter;
- the committed state does not depend on the rejected drafts at all: bit for bit the same state and next logits
  whatever tokens followed the kept ones in the verify step;
- misuse is refused: commit with no verify step just before, a verify step wider than the plan's drafts + 1 (or of
  one token), kept outside 1..T, keep_states on an engine planned without drafts."""

from __future__ import annotations

import numpy as np
import pytest

from native_helpers import TOL_GEMV_MMA, rel_err, requires_gpu

pytestmark = [pytest.mark.gpu, requires_gpu]
torch = pytest.importorskip("torch")

# The committed sequence against one that consumed the kept tokens plainly: the same arithmetic per token, but the
# reference runs them in a step of another width (T = kept; T = 1 takes the one-token kernels), whose GEMVs may sum
# in another order, so the two agree to rounding (fp32 sums, carried further where an fp16 GEMV input or a bf16 KV
# element rounds the other way), not bit for bit. With the tensor-core GEMV on (set_qgemv_mma) the verify step's
# GEMVs also round each weight to fp16 and a kept = 1 reference's do not: TOL_GEMV_MMA per GEMV. A state one token
# off must be farther by FAR_FACTOR at least.
TOL_COMMIT = 1e-3
TOL_COMMIT_MMA = 10 * TOL_GEMV_MMA
FAR_FACTOR = 10
PROMPT = 40   # tokens: more than a step, so the prompt takes the prefill path


def _model(path, drafts: int, lanes: int = 2):
    from engine.native_backend import NativeModel
    return NativeModel.from_checkpoint(path, kv_dtype="bf16", max_context=256, vram_budget_bytes=2 << 30,
                                       lanes=lanes, prefill_chunk=64, mtp_drafts=drafts)


@pytest.fixture(scope="module", params=[1, 3], ids=lambda k: f"k{k}")
def verify_model(request, tiny_native_mtp_ckpt):
    return request.param, _model(tiny_native_mtp_ckpt, request.param)


def _tokens(n: int, seed: int) -> list[int]:
    return torch.randint(0, 1000, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _after_plain(m, prompt, consumed, nxt):
    """Next-step logits of a fresh sequence that consumed prompt + `consumed` plainly (one step), then nxt."""
    s = m.new_state(256)
    try:
        m.forward(torch.tensor(prompt), s, last_only=True)
        if consumed:
            m.forward(torch.tensor(consumed), s)
        return m.forward(torch.tensor([nxt]), s).logits[-1].clone()
    finally:
        m.release(s)


def _after_commit(m, prompt, step, kept, nxt, *, state_out=None):
    """Next-step logits after a verify step of `step` committed to `kept` tokens (and the lane's state then)."""
    s = m.new_state(256)
    try:
        m.forward(torch.tensor(prompt), s, last_only=True)
        out = m.forward(torch.tensor(step), s, keep_states=True)
        assert out.logits.shape == (len(step), m.config.text.vocab_size)
        m.commit(s, kept)
        assert s.seq_len == len(prompt) + kept
        if state_out is not None:
            state_out.append(m.engine.save_lane_state(s.lane))
        return m.forward(torch.tensor([nxt]), s).logits[-1].clone()
    finally:
        m.release(s)


def test_commit_continues_as_the_kept_tokens_alone(nat, verify_model):
    k, m = verify_model
    tol = TOL_COMMIT_MMA if nat.qgemv_mma() else TOL_COMMIT
    prompt, step, nxt = _tokens(PROMPT, 1), _tokens(k + 1, 2), _tokens(1, 3)[0]
    errs = {}
    for kept in range(1, k + 2):
        got = _after_commit(m, prompt, step, kept, nxt)
        right = rel_err(got, _after_plain(m, prompt, step[:kept], nxt))
        # one token off: the neighbouring prefix (the whole step, uncommitted, when kept = T - 1)
        off = kept - 1 if kept == k + 1 else kept + 1
        wrong = rel_err(got, _after_plain(m, prompt, step[:off], nxt))
        errs[kept] = (right, wrong)
    print(f"k = {k}: kept -> (error against the kept tokens, against one token off):",
          {kept: ("%.1e" % r, "%.1e" % w) for kept, (r, w) in errs.items()})
    for kept, (right, wrong) in errs.items():
        assert right < tol, (kept, right)
        assert wrong > FAR_FACTOR * max(right, 1e-7), (kept, right, wrong)


def test_the_committed_state_ignores_the_rejected_drafts(verify_model):
    """Rows of a step depend only on the tokens up to them (every op is causal per row), so the state after the kept
    tokens is the same bits whatever the rejected drafts were."""
    k, m = verify_model
    prompt, step, nxt = _tokens(PROMPT, 4), _tokens(k + 1, 5), _tokens(1, 6)[0]
    for kept in range(1, k + 1):
        other = step[:kept] + [(t + 1) % 1000 for t in step[kept:]]
        states = []
        a = _after_commit(m, prompt, step, kept, nxt, state_out=states)
        b = _after_commit(m, prompt, other, kept, nxt, state_out=states)
        assert np.array_equal(states[0], states[1]), kept
        assert torch.equal(a, b), kept


def test_commit_of_every_token_is_the_plain_step(verify_model):
    """kept = T: nothing to copy; the step with checkpoints leaves what the step without them does."""
    k, m = verify_model
    prompt, step, nxt = _tokens(PROMPT, 7), _tokens(k + 1, 8), _tokens(1, 9)[0]
    states = []
    got = _after_commit(m, prompt, step, k + 1, nxt, state_out=states)
    s = m.new_state(256)
    m.forward(torch.tensor(prompt), s, last_only=True)
    m.forward(torch.tensor(step), s)
    plain_state = m.engine.save_lane_state(s.lane)
    plain = m.forward(torch.tensor([nxt]), s).logits[-1]
    m.release(s)
    assert np.array_equal(states[0], plain_state)
    assert torch.equal(got, plain)


def test_verify_misuse_is_refused(verify_model):
    from engine.native_backend import NativeBackendError
    k, m = verify_model
    e = m.engine
    s = m.new_state(256)
    try:
        m.forward(torch.tensor(_tokens(PROMPT, 10)), s, last_only=True)
        n = s.seq_len
        with pytest.raises(RuntimeError, match="keep_states"):
            e.commit_states(s.lane, 1)                 # no verify step since the lane was reset
        with pytest.raises(NativeBackendError, match="keep_states"):
            m.commit(s, 1)
        for width in (1, k + 2):                       # one token, or more drafts than planned
            with pytest.raises(ValueError, match="mtp_drafts"):
                e.forward(s.lane, _tokens(width, 11), [], n, keep_states=True)
            with pytest.raises(NativeBackendError, match=f"2..{k + 1} tokens"):
                m.forward(torch.tensor(_tokens(width, 11)), s, keep_states=True)
        assert s.seq_len == n
        with pytest.raises(RuntimeError, match="keep_states"):
            e.commit_states(s.lane, 1)                 # a refused verify step keeps nothing
        m.forward(torch.tensor(_tokens(k + 1, 12)), s, keep_states=True)
        for kept in (0, k + 2):
            with pytest.raises(ValueError, match="kept"):
                e.commit_states(s.lane, kept)
        other_lane = 1 - s.lane
        with pytest.raises(ValueError, match="lane"):
            e.commit_states(other_lane, 1)
        m.forward(torch.tensor(_tokens(1, 13)), s)     # any other step in between
        with pytest.raises(RuntimeError, match="keep_states"):
            e.commit_states(s.lane, 1)
        with pytest.raises(NativeBackendError, match="keep_states"):
            m.commit(s, 1)
    finally:
        m.release(s)


def test_an_engine_planned_without_drafts_runs_no_verify_step(tiny_native_ckpt):
    m = _model(tiny_native_ckpt, 0, lanes=1)
    assert not [a for a in m.plan.allocations if a.category == "spec_ckpt"]
    s = m.new_state(64)
    with pytest.raises(ValueError, match="mtp_drafts = 0"):
        m.engine.forward(s.lane, [1, 2], [], 0, keep_states=True)
    m.forward(torch.tensor([1, 2]), s)                 # plain steps as before
    assert s.seq_len == 2
