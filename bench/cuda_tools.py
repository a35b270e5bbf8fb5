"""Finding the CUDA binary tools the bench scripts read SASS with (cuobjdump, nvdisasm): on PATH, else in an NVIDIA
wheel installed into this Python (`pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`), whose binaries sit under
site-packages/nvidia/cu*/bin."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys


def find_cuda_tool(name: str) -> str:
    exe = shutil.which(name)
    if exe:
        return exe
    for base in sys.path:
        for cand in glob.glob(os.path.join(base, "nvidia", "cu*", "bin", name)):
            return cand
    raise SystemExit(f"{name} not found: put it on PATH or `pip install nvidia-cuda-{name}`")


def compile_sass(src: str, arch: str, tmp: str) -> str:
    """The SASS (cuobjdump -sass) of one source compiled here with the native build's flags that shape code, run from
    the repository root (-O3, --expt-relaxed-constexpr, csrc includes) for sm_<arch>; the cubin goes to tmp."""
    cubin = os.path.join(tmp, os.path.basename(src) + ".cubin")
    subprocess.run(["nvcc", "-std=c++17", "-O3", f"-arch=sm_{arch}", "--expt-relaxed-constexpr", "-cubin", src,
                    "-Icsrc", "-Icsrc/cuda", "-o", cubin], check=True)
    return subprocess.run([find_cuda_tool("cuobjdump"), "-sass", cubin], check=True, capture_output=True,
                          text=True).stdout
