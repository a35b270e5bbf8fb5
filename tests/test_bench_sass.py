"""bench/sass_prewait.py's and bench/sass_load_order.py's reading of SASS text and bench/ncu_source_top.py's reading of
ncu's source page (no GPU, no cuobjdump: hand-written listings)."""

import importlib.util
import pathlib
import sys

import pytest

_ROOT = pathlib.Path(__file__).resolve().parents[1]


def _bench(name: str):
    """bench/NAME.py as a module; bench/ on sys.path while it loads, as for the script (sass_load_order imports
    sass_prewait)."""
    spec = importlib.util.spec_from_file_location(name, _ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(_ROOT / "bench"))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(_ROOT / "bench"))
    return mod


def _tool():
    return _bench("sass_prewait")


LISTING = """
        Function : stalls
        /*0000*/                   LDG.E.U16 R38, desc[UR10][R38.64] ;
        /*0010*/                   LDG.E.128.CONSTANT R4, desc[UR6][R4.64] ;
        /*0020*/                   IADD3 R9, R10, 0x1, RZ ;
        /*0030*/                   HADD2.F32 R50, -RZ, R38.H0_H0 ;
        /*0040*/                   IMAD.MOV.U32 R20, RZ, RZ, R7 ;
        /*0050*/                   ACQBULK ;
        /*0060*/                   FFMA R1, R4, R5, R1 ;
        Function : clean
        /*0000*/                   LDG.E.U16 R14, desc[UR8][R14.64] ;
        /*0010*/                   IADD3 R14, R2, 0x4, RZ ;
        /*0020*/                   LEA R12, P2, R14, R6, 0x1 ;
        /*0030*/                   STG.E desc[UR4][R12.64], R3 ;
        /*0040*/                   ACQBULK ;
        /*0050*/                   HADD2.F32 R50, -RZ, R14.H0_H0 ;
        Function : no_wait
        /*0000*/                   LDG.E.U16 R38, desc[UR10][R38.64] ;
        /*0010*/                   HADD2.F32 R50, -RZ, R38.H0_H0 ;
        /*0020*/                   EXIT ;
"""


def test_reads_of_loaded_registers_before_the_wait_are_reported():
    found = _tool().pre_wait_stalls(LISTING)
    # the conversion of the 16-bit load and the copy of the 128-bit load's last register wait before ACQBULK
    assert found["stalls"] == ["HADD2.F32 R50, -RZ, R38.H0_H0", "IMAD.MOV.U32 R20, RZ, RZ, R7"]


def test_overwritten_registers_and_reads_after_the_wait_are_not():
    # R14 is rewritten by IADD3 before LEA reads it; the HADD2.F32 after ACQBULK waits after the wait, as it should
    assert "clean" not in _tool().pre_wait_stalls(LISTING)


def test_kernels_without_a_pdl_wait_are_not_reported():
    # a plainly launched kernel has no ACQBULK: its loads' uses stand before no wait
    assert "no_wait" not in _tool().pre_wait_stalls(LISTING)


def _source_top():
    return _bench("ncu_source_top")


# ncu's source page as CSV: a message, a source row that happens to say "Sampling", then the real header
SOURCE_CSV = '''"Kernel Name","finish"
"1","// SamplingParams: read on the device"
"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","Instructions Executed"
"0x10","      LDG.E R2, desc[UR4][R2.64]","7","5","1,024"
"0x20","@!P0  BRA 0x40","0","0","32"
"0x30","      SHFL.BFLY PT, R3, R2, 0x4, 0x1f","3","3","64"
'''


def test_source_page_header_is_found_past_a_source_row_that_says_sampling(tmp_path):
    path = tmp_path / "page.csv"
    path.write_text(SOURCE_CSV)
    tool = _source_top()
    cols, rows = tool.read_rows(str(path))
    assert cols[2] == "Warp Stall Sampling (All Samples)"
    assert [r[0] for r in rows] == ["0x10", "0x20", "0x30"]
    assert tool.number(rows[0][4]) == 1024.0
    assert [tool.opcode(r[1]) for r in rows] == ["LDG.E", "BRA", "SHFL.BFLY"]


def test_source_page_without_sampling_columns_is_refused(tmp_path):
    path = tmp_path / "page.csv"
    path.write_text('"Line No","Source"\n"1","// Token sampling"\n')
    with pytest.raises(SystemExit):
        _source_top().read_rows(str(path))


LOOPS = """
        Function : two_loops
        /*0000*/                   IMAD R2, R3, R4, RZ ;
        /*0010*/                   HMMA.16816.F32 R8, R12, R16, R8 ;
        /*0020*/                   LDG.E.128.CONSTANT R12, desc[UR6][R2.64] ;
        /*0030*/                   HMMA.16816.F32 R8, R12, R16, R8 ;
        /*0040*/              @!P0 BRA 0x10 ;
        /*0050*/                   IADD3 R2, R2, 0x1, RZ ;
        /*0060*/                   IADD3 R2, R2, 0x1, RZ ;
        /*0070*/                   IADD3 R2, R2, 0x1, RZ ;
        /*0080*/                   IADD3 R2, R2, 0x1, RZ ;
        /*0090*/                   IADD3 R2, R2, 0x1, RZ ;
        /*00a0*/              @!P1 BRA 0x50 ;
        /*00b0*/                   HMMA.16816.F32 R8, R12, R16, R8 ;
        /*00c0*/                   ISETP.GE.AND P0, PT, R2, R3, PT ;
        /*00d0*/                   SEL R4, R2, RZ, P0 ;
        /*00e0*/                   LDG.E.128.CONSTANT R12, desc[UR6][R4.64] ;
        /*00f0*/                   HMMA.16816.F32 R8, R12, R16, R8 ;
        /*0100*/              @!P2 BRA 0xb0 ;
        /*0110*/                   EXIT ;
"""


def test_the_main_loop_is_the_shortest_with_the_most_products():
    """Of two loops with the same products the shorter (the GEMV's unchecked passes), not a longer loop without them;
    without products, the longest loop."""
    mod = _bench("sass_load_order")
    count, ops = mod.main_loop(LOOPS)
    assert count == 4 and ops["HMMA"] == 2 and ops["LDG"] == 1 and ops["IADD3"] == 0
    first_two = LOOPS[:LOOPS.index("/*00b0*/")]
    without = "\n".join(line for line in first_two.splitlines() if "HMMA" not in line)
    count, ops = mod.main_loop(without)   # no products: the longest loop
    assert count == 6 and ops["IADD3"] == 5


def test_sass_compare_matches_kernels_across_namespaces_and_reports_changes():
    """bench/sass_compare.py: a kernel that left the anonymous namespace or whose argument type moved from monorail to
    monorail::gemv is matched with itself; an edited one or one on a single side is reported (c++filt demangles the
    names; no nvcc)."""
    tool = _bench("sass_compare")
    # _ZN12_GLOBAL__N_11kEN8monorail1AE is (anonymous namespace)::k(monorail::A), _Z1kN8monorail4gemv1AE is
    # k(monorail::gemv::A); _Z1jv is j(); _Z1hv is h()
    old = tool.kernels("""
        Function : _ZN12_GLOBAL__N_11kEN8monorail1AE
        /*0000*/                   MOV R1, c[0x0][0x28] ;           /* 0x00000a0000017a02 */
        /*0010*/                   EXIT ;                            /* 0x000000000000794d */
        Function : _Z1jv
        /*0000*/                   IADD3 R2, R2, 0x1, RZ ;
        Function : _Z1hv
        /*0000*/                   EXIT ;
""")
    new = tool.kernels("""
        Function : _Z1kN8monorail4gemv1AE
        /*0000*/                   MOV R1,   c[0x0][0x28] ;   /* 0x00000a0000017a02 */
        /*0010*/                   EXIT ;  /* 0x000000000000794d */
        Function : _Z1jv
        /*0000*/                   IADD3 R2, R2, 0x2, RZ ;
""")
    assert list(old.values())[0] == list(new.values())[0]   # whitespace collapsed
    diffs = tool.compare({tool.readable(list(old))[k]: v for k, v in old.items()},
                         {tool.readable(list(new))[k]: v for k, v in new.items()})
    assert diffs == ["only at the revision: h()", "differs: j() (1 -> 1 lines; first at line 0)"]
