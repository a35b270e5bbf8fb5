"""Finding the CUDA binary tools the bench scripts read SASS with (cuobjdump, nvdisasm): on PATH, else in an NVIDIA
wheel installed into this Python (`pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`), whose binaries sit under
site-packages/nvidia/cu*/bin."""

from __future__ import annotations

import glob
import os
import shutil
import sys


def find_cuda_tool(name: str) -> str:
    exe = shutil.which(name)
    if exe:
        return exe
    for base in sys.path:
        for cand in glob.glob(os.path.join(base, "nvidia", "cu*", "bin", name)):
            return cand
    raise SystemExit(f"{name} not found: put it on PATH or `pip install nvidia-cuda-{name}`")
