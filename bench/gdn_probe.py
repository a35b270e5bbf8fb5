"""Launch the GDN decode step (gdn_step, T = 1) on the 27B shapes a few times, for `ncu` to profile:

    ncu --clock-control none -k regex:gdn_kernel --launch-skip 3 --launch-count 1 --section ... \
        python3 bench/gdn_probe.py

16 key heads, 48 value heads of 128 x 128, fp32 state (3 MB per layer). Each call synchronises (op_gdn);
the state of 48 layers is rotated so that successive launches read different state from DRAM, as in a
decode step."""

from __future__ import annotations

import torch

from engine.native import load_native

KH, VH, D = 16, 48, 128
LAYERS = 48


def main() -> None:
    nat = load_native()
    conv_dim = 2 * KH * D + VH * D
    ldp = conv_dim + VH * D + 2 * VH  # the fused projection row: qkv | z | b | a
    proj = torch.randn(1, ldp, device="cuda") * 0.1
    conv_out = torch.randn(1, conv_dim, device="cuda")
    states = torch.randn(LAYERS, VH, D, D, device="cuda") * 0.01
    a_log = torch.randn(VH, device="cuda") * 0.1
    dt_bias = torch.randn(VH, device="cuda") * 0.1
    norm_w = torch.ones(D, device="cuda")
    out = torch.empty(1, VH * D, device="cuda", dtype=torch.half)
    z = proj[:, conv_dim:]
    b = proj[:, conv_dim + VH * D:]
    a = proj[:, conv_dim + VH * D + VH:]
    for i in range(2 * LAYERS):
        nat.op_gdn(conv_out.data_ptr(), z.data_ptr(), b.data_ptr(), a.data_ptr(), ldp, 1, KH, VH, 1e-6,
                   a_log.data_ptr(), dt_bias.data_ptr(), norm_w.data_ptr(), states[i % LAYERS].data_ptr(),
                   out.data_ptr())
    torch.cuda.synchronize()
    print("gdn_probe: ok")


if __name__ == "__main__":
    main()
