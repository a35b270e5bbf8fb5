"""engine._native always imports and says how it was built; a CPU-only build works too."""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from engine.native import load_native, native_status

ROOT = Path(__file__).resolve().parents[1]


def test_native_module_reports_build_and_device():
    mod = load_native()
    build = mod.build_info()
    assert set(build) >= {"cuda", "cuda_version", "cuda_archs", "compiler"}
    dev = mod.device_info()
    assert set(dev) >= {"usable", "device_count", "name", "compute_capability", "total_memory", "reason"}
    st = native_status()
    assert st.importable and st.cuda_built == build["cuda"]
    if not st.gpu_usable:
        assert st.reason  # says why, e.g. no driver / no device / CPU-only build
    assert "native build:" in st.summary()


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not available")
def test_cpu_only_build_imports_and_says_so(tmp_path):
    """MONORAIL_WITH_CUDA=OFF: the wheel builds without nvcc and its module reports a CPU-only build."""
    env = {**os.environ, "MONORAIL_WITH_CUDA": "OFF"}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
                    "-w", str(tmp_path / "dist"), str(ROOT)], check=True, env=env, timeout=600,
                   capture_output=True)
    wheel = next((tmp_path / "dist").glob("monorail-*.whl"))
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    assert (site / "engine" / "resources" / "chat_template.jinja").exists()
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import engine._native as n, engine.native as s; "
            "assert n.__file__.startswith(sys.argv[1]), n.__file__; b = n.build_info(); assert b['cuda'] is False, b; "
            "st = s.native_status(); assert not st.gpu_usable and 'CPU-only' in st.summary(); print(st.summary())")
    # -S: keep the editable install's import hook (which maps `engine` to the source tree) out.
    r = subprocess.run([sys.executable, "-S", "-c", code, str(site)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "CPU-only" in r.stdout


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("ninja") is None or shutil.which("nvcc") is None,
                    reason="needs cmake, ninja and nvcc")
def test_a_build_for_several_architectures_passes_them_as_one_definition(tmp_path):
    """MONORAIL_CUDA_ARCHS="86;89" (the default without a visible GPU is four of them): the list reaches the module as
    one comma-separated string. A semicolon inside the definition used to split it in two, so every C++ file of a
    multi-architecture build failed to compile. Configures, then compiles the one file that reads the definition."""
    import pybind11

    build = tmp_path / "build"
    subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), "-G", "Ninja", "-DMONORAIL_CUDA_ARCHS=86;89",
                    f"-DPython_EXECUTABLE={sys.executable}", f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
                    "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"], check=True, capture_output=True, timeout=300)
    module_cpp = next(c["command"] for c in json.loads((build / "compile_commands.json").read_text())
                      if c["file"].endswith("csrc/module.cpp"))
    assert r'-DMONORAIL_CUDA_ARCHS_STR=\"86,89\"' in module_cpp, module_cpp
    r = subprocess.run(["ninja", "-C", str(build), "CMakeFiles/_native.dir/csrc/module.cpp.o"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


def test_status_names_every_built_architecture():
    from engine.native import NativeStatus

    def status(archs):
        return NativeStatus(importable=True, cuda_built=True, cuda_version="13.0", cuda_archs=archs, gpu_usable=False,
                            gpu_name="", compute_capability=0, total_memory=0, reason="no driver")

    assert "CUDA 13.0 for sm_86,sm_89,sm_90,sm_120;" in status("86,89,90,120").summary()
    assert "CUDA 13.0 for sm_86;" in status("86").summary()


def test_step_carveout_takes_a_percent_or_minus_one():
    """The measurement knob of bench/step_probe.py --carveouts: -1 (each kernel's own split) or 0..100 percent;
    anything else is refused with the range in the message."""
    mod = load_native()
    if not hasattr(mod, "set_step_smem_carveout"):
        pytest.skip("a build without the CUDA engine")
    for bad in (-2, 101):
        with pytest.raises(ValueError, match="0..100"):
            mod.set_step_smem_carveout(bad)
    for ok in (0, 100, -1):  # ends on the default
        mod.set_step_smem_carveout(ok)
