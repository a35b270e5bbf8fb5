"""No kernel that waits on a PDL predecessor loads anything before the wait that its PTX loads after it
(bench/pdl_load_order.py): ptxas may schedule a read-only-path load (__ldg) above griddepcontrol.wait, which inside a
decode step reads data the previous kernel has not written yet. That is how the tensor-core GEMV went wrong inside the
engine in sessions 38-39 while its op tests (no PDL) passed. The listings below check the reading; the last test
compiles the engine's kernel sources for sm_90 and sm_120 (where nvcc is present; its SASS via the cuobjdump /
nvdisasm wheels of the test extra) and needs no GPU. The old source had such loads in 5 tensor-core GEMV variants for sm_90 and 2 for
sm_120."""

from __future__ import annotations

import importlib.util
import pathlib
import shutil
import sys

import pytest

_ROOT = pathlib.Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("pdl_load_order", _ROOT / "bench" / "pdl_load_order.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["pdl_load_order"] = mod   # its dataclass looks its module up there
    spec.loader.exec_module(mod)
    return mod


PTX = """
.visible .entry hoisted(
	.param .u64 hoisted_param_0
)
{
	ld.global.nc.v4.u32 	{%r1, %r2, %r3, %r4}, [%rd1];
	griddepcontrol.wait;
	ld.global.nc.v4.u32 	{%r5, %r6, %r7, %r8}, [%rd2];
	ret;
}
.visible .entry clean(
	.param .u64 clean_param_0
)
{
	ld.global.nc.v4.u32 	{%r1, %r2, %r3, %r4}, [%rd1];
	ld.global.u16 	%rs1, [%rd3];
	griddepcontrol.wait;
	ld.global.v4.u32 	{%r5, %r6, %r7, %r8}, [%rd2];
	ret;
}
.visible .entry no_wait(
	.param .u64 no_wait_param_0
)
{
	ld.global.nc.v4.u32 	{%r1, %r2, %r3, %r4}, [%rd1];
	ret;
}
"""

SASS = """
	code for sm_90
		Function : hoisted
        /*0000*/                   LDG.E.128.CONSTANT R4, desc[UR6][R4.64] ;
        /*0010*/               @P2 LDG.E.128.CONSTANT R8, desc[UR6][R2.64] ;
        /*0020*/                   ACQBULK ;
        /*0030*/                   HMMA.16816.F32 R12, R4, R8, R12 ;
		Function : clean
        /*0000*/                   LDG.E.128.CONSTANT R4, desc[UR6][R4.64] ;
        /*0010*/                   LDG.E.U16 R14, desc[UR8][R14.64] ;
        /*0020*/                   ACQBULK ;
        /*0030*/                   LDG.E.128 R8, desc[UR6][R2.64] ;
		Function : no_wait
        /*0000*/                   LDG.E.128.CONSTANT R4, desc[UR6][R4.64] ;
        /*0010*/                   LDG.E.128.CONSTANT R8, desc[UR6][R2.64] ;
        /*0020*/                   EXIT ;
"""


def test_a_load_moved_above_the_wait_is_found_and_only_that():
    tool = _tool()
    assert tool.ptx_pre_wait_loads(PTX) == {"hoisted": 1, "clean": 2}
    assert tool.sass_pre_wait_loads(SASS) == {"hoisted": 2, "clean": 2}
    found = tool.hoisted_loads(PTX, SASS)
    assert [(h.kernel, h.sass_loads, h.ptx_loads) for h in found] == [("hoisted", 2, 1)]


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["90", "120"])   # the H100/H200 and the RTX 50xx: both launch with PDL
def test_no_engine_kernel_loads_above_its_pdl_wait(tmp_path, arch):
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc: the kernels are not compiled on this machine")
    tool = _tool()
    sys.path.insert(0, str(_ROOT / "bench"))
    try:
        from cuda_tools import find_cuda_tool
        cuobjdump = find_cuda_tool("cuobjdump")   # the test extra installs both; SystemExit when missing
        nvdisasm = find_cuda_tool("nvdisasm")
    finally:
        sys.path.remove(str(_ROOT / "bench"))
    import os
    mp = pytest.MonkeyPatch()
    mp.setenv("PATH", os.path.dirname(nvdisasm) + os.pathsep + os.environ.get("PATH", ""))
    try:
        found = [h for src in tool.SOURCES
                 for h in tool.compile_and_check(_ROOT / "csrc" / "cuda" / src, arch, cuobjdump, str(tmp_path))]
    finally:
        mp.undo()
    assert not found, [(h.kernel, h.sass_loads, h.ptx_loads) for h in found]


def test_every_source_with_pdl_waits_is_checked():
    """The check above covers the files in the tool's SOURCES list; a kernel file that waits on its predecessor (itself
    or through a local header it includes) and is missing from that list would go unchecked (session 49 moved the
    tensor-core GEMV into qgemv_mma.cu). pdl.cuh and stamps.cuh define the wait, they call it in no kernel."""
    import re
    cuda = _ROOT / "csrc" / "cuda"
    defining = {"pdl.cuh", "stamps.cuh"}

    def waits(path: pathlib.Path, seen: set) -> bool:
        if path.name in seen or not path.exists():
            return False
        seen.add(path.name)
        text = path.read_text()
        if path.name not in defining and ("pdl_wait(" in text or "ld_after_wait(" in text):
            return True
        return any(waits(cuda / inc, seen) for inc in re.findall(r'#include "([^"]+)"', text))

    need = sorted(p.name for p in cuda.glob("*.cu") if waits(p, set()))
    assert "qgemv_mma.cu" in need and "qgemv.cu" in need   # the search itself finds what it must
    assert [n for n in need if n not in _tool().SOURCES] == []
