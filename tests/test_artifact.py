"""engine.artifact: safetensors compatibility, streaming with progress, and corruption detection."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from engine.artifact import Artifact, ArtifactError
from engine.artifact_format import read_header
from engine.convert import convert


@pytest.fixture(scope="module")
def artifact_path(tiny_checkpoint, tmp_path_factory):
    """The tiny checkpoint with every bit width and both group sizes (RTN: fast)."""
    path = tmp_path_factory.mktemp("art") / "mixed.monorail"
    convert(tiny_checkpoint, path, recipe="test-mixed", method="rtn", allow_test_shapes=True, threads=1)
    return path


def test_readable_by_the_safetensors_library(artifact_path):
    art = Artifact.open(artifact_path, allow_test_shapes=True)
    with safe_open(artifact_path, framework="pt") as f:
        names = set(f.keys())
        assert names == set(art.header.entries)
        assert f.metadata()["monorail.family"] == "test-tiny"
        for name in list(names)[::7]:
            assert torch.equal(f.get_tensor(name), art.stored(name)), name


def test_every_format_present_and_alignment(artifact_path):
    art = Artifact.open(artifact_path, allow_test_shapes=True)
    formats = {w.format for w in art.weights.values()}
    assert {"q4g32", "q4g64", "q5g32", "q5g64", "q6g32", "q6g64", "q8g32", "q8g64", "bf16", "f32"} <= formats
    for e in art.header.entries.values():  # each tensor aligned to its element size
        assert (art.header.data_start + e.begin) % torch.empty(0, dtype=art.stored(e.name).dtype).element_size() == 0
    key = "model.language_model.layers.0.linear_attn.in_proj_z.weight"  # q5g32 in test-mixed
    qt = art.quantized(key)
    assert (qt.bits, qt.group, qt.shape) == (5, 32, (192, 64)) and qt.high.shape == (192, 8)
    assert torch.equal(qt.dequantize(), art.checkpoint().get(key))
    with pytest.raises(ArtifactError, match="stored unquantized"):
        art.quantized("model.language_model.norm.weight")
    with pytest.raises(KeyError, match="not in the artifact"):
        art.checkpoint().get("model.language_model.layers.99.mlp.up_proj.weight")


def test_stream_checks_every_tensor_and_reports_progress(artifact_path):
    art = Artifact.open(artifact_path, allow_test_shapes=True)
    seen, events = [], []
    art.stream(lambda name, t: seen.append((name, t.numel())), events.append)
    assert [n for n, _ in seen] == art.stored_names() and len(seen) == len(art.header.entries)
    assert [e.done_bytes for e in events] == sorted(e.done_bytes for e in events)
    assert events[-1].done_bytes == art.total_bytes and events[-1].percent == 100.0
    assert len(art._verified) == len(seen)


def _copy(src, tmp_path, name="c.monorail"):
    dst = tmp_path / name
    shutil.copy(src, dst)
    return dst


def test_truncated_file_is_refused_at_open(artifact_path, tmp_path):
    p = _copy(artifact_path, tmp_path)
    data = p.read_bytes()
    p.write_bytes(data[:-100])
    with pytest.raises(ArtifactError, match="truncated"):
        Artifact.open(p, allow_test_shapes=True)
    p.write_bytes(data[:5])
    with pytest.raises(ArtifactError, match="too short"):
        Artifact.open(p, allow_test_shapes=True)


def test_flipped_data_byte_fails_the_tensor_checksum(artifact_path, tmp_path):
    p = _copy(artifact_path, tmp_path)
    h = read_header(p)
    victim = max(h.entries.values(), key=lambda e: e.nbytes)
    data = bytearray(p.read_bytes())
    data[h.data_start + victim.begin + victim.nbytes // 2] ^= 0x10
    p.write_bytes(bytes(data))
    art = Artifact.open(p, allow_test_shapes=True)  # the header is intact: open succeeds quickly
    with pytest.raises(ArtifactError, match=rf"tensor '{victim.name}' fails its checksum"):
        art.verify()
    with pytest.raises(ArtifactError, match="fails its checksum"):
        Artifact.open(p, allow_test_shapes=True).stream()
    # without verification the bytes are served as they are (the caller opted out)
    Artifact.open(p, verify=False, allow_test_shapes=True).stored(victim.name)


@pytest.mark.parametrize("old,new", [
    (b'\\"mlp.down\\":\\"q5g64\\"', b'\\"mlp.down\\":\\"q8g64\\"'),  # recipe edited in place
    (b'"shape":[64,128]', b'"shape":[128,64]'),          # a shape edited, same length
])
def test_edited_header_is_refused(artifact_path, tmp_path, old, new):
    p = _copy(artifact_path, tmp_path)
    data = p.read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = data[8:8 + n]
    assert old in header
    p.write_bytes(data[:8] + header.replace(old, new, 1) + data[8 + n:])
    with pytest.raises(ArtifactError, match="header checksum does not match"):
        Artifact.open(p, allow_test_shapes=True)


def test_not_an_artifact(tmp_path):
    with pytest.raises(ArtifactError, match="no artifact at"):
        Artifact.open(tmp_path / "missing.monorail")
    plain = tmp_path / "plain.safetensors"
    save_file({"w": torch.zeros(2, 2)}, plain)
    with pytest.raises(ArtifactError, match="not a Monorail artifact"):
        Artifact.open(plain)
    junk = tmp_path / "junk.monorail"
    junk.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}" + b"\x00" * 64)
    with pytest.raises(ArtifactError, match="not valid JSON"):
        Artifact.open(junk)


def test_test_shapes_need_the_switch_to_load(artifact_path, monkeypatch, capsys):
    """Refused as a model-load error (what the app and `monorail chat` report in one line), not a bare ValueError
    that `monorail chat` printed as a traceback."""
    from engine.cli import main
    from engine.errors import ModelLoadError

    monkeypatch.delenv("MONORAIL_ALLOW_TEST_SHAPES", raising=False)
    with pytest.raises(ModelLoadError, match="unsupported model size"):
        Artifact.open(artifact_path)
    assert main(["chat", "--model", str(artifact_path), "--prompt", "hi"]) == 2
    err = capsys.readouterr().err
    assert "error: " in err and "MONORAIL_ALLOW_TEST_SHAPES" in err and "Traceback" not in err


def test_cli_inspect_and_convert(tiny_checkpoint, artifact_path, tmp_path, capsys):
    from engine.cli import main
    assert main(["inspect", str(artifact_path), "--allow-test-shapes", "--verify", "--tensors"]) == 0
    out = capsys.readouterr().out
    assert "recipe     test-mixed@v1/rtn" in out and "| " not in out
    assert "mlp.down" in out and "all " in out and "match their checksums" in out
    assert main(["convert", str(tiny_checkpoint), "-o", str(tmp_path / "x.monorail"), "--recipe", "q4",
                 "--quantizer", "rtn", "-q"]) == 2  # tiny shapes need the switch
    assert "MONORAIL_ALLOW_TEST_SHAPES" in capsys.readouterr().err
    assert main(["convert", str(tiny_checkpoint), "-o", str(tmp_path / "x.monorail"), "--recipe", "q4",
                 "--quantizer", "rtn", "--allow-test-shapes", "--threads", "1"]) == 0
    cap = capsys.readouterr()
    assert "wrote" in cap.out and "[104/104]" in cap.err and "ETA" in cap.err
    assert json.loads(read_header(tmp_path / "x.monorail").metadata["monorail.recipe"])["method"] == "rtn"
