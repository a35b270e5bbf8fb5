"""Variant 49's choice of idle warps (qgemv.cu spread_idle_warps): a pure function of the occupancy calculator's
answers, so it is checked here without a GPU; test_native_ops.py checks the launch it makes on one."""

import pytest

from engine.native import load_native


@pytest.fixture(scope="module")
def choose():
    mod = load_native()
    if not hasattr(mod, "spread_idle_warps"):
        pytest.skip("a CPU-only build (MONORAIL_WITH_CUDA=OFF) has no GEMV launches")
    return mod.spread_idle_warps


@pytest.mark.parametrize("per_sm_by_idle, fair, idle", [
    ([6, 5, 4, 4], 5, 1),  # H200 / RTX 4090, 80 registers: one idle warp holds an SM to 5 of down's 640 blocks
    ([5, 4, 4, 3], 5, 0),  # 95 registers: 5 already, no idle warps
    ([6, 5, 4, 4], 4, 2),  # RTX 5090 (170 SMs): a share of 4
    ([6, 5, 4, 4], 8, 0),  # RTX 3090 (82 SMs): the share is above what fits, nothing to even out
    ([7, 7, 7, 7], 5, 0),  # idle warps that cannot reach the share are not added
    ([6], 5, 0),  # the calculator answered only for the plain block
    ([], 5, 0),  # nor for that: the plain block
])
def test_spread_takes_the_least_idle_warps_that_reach_the_fair_share(choose, per_sm_by_idle, fair, idle):
    assert choose(per_sm_by_idle, fair) == idle
