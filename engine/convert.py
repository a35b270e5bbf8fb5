"""Convert a Hugging Face Qwen3.5/3.6/3.8 checkpoint folder into a Monorail artifact.

    result = convert("Qwen3.6-27B/", "qwen3.6-27b.monorail", recipe="q4-27b", progress=print)

Steps: parse and identify the config (engine.registry refuses anything unregistered), read
every shard's header and check every tensor's name and shape, plan the artifact's tensors from
the recipe, then read the source one tensor at a time (``os.pread`` into a fresh buffer),
dequantize the official FP8 block-scaled weights if present, quantize or cast, and write each
result at its precomputed offset (engine.artifact_format). Peak memory is about the largest
source tensor plus its packed form plus a few small blocks of work space.

The source is never modified; the output appears under its final name only when complete.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from engine import __version__
from engine.artifact_format import (
    DIGEST_HEX_LEN,
    MAX_HEADER_BYTES,
    PlannedTensor,
    SafetensorsReader,
    StreamingWriter,
    canonical_json,
    digest_bytes,
    header_size_for,
)
from engine.config import ModelConfig, load_config
from engine.loader import INDEX_FILE, LM_HEAD, MTP_PREFIX, MULTIMODAL_TEXT_PREFIX, SINGLE_FILE, TEXT_ONLY_PREFIX
from engine.quant import QuantFormat, QuantizedTensor, quantize, relative_error
from engine.recipe import DEFAULT_RECIPE, Recipe, get_recipe, parse_format
from engine.registry import check_tensors, expected_tensors, identify, tensor_role

ARTIFACT_VERSION = 1
META = "monorail."
# Text files of a checkpoint folder that travel inside the artifact (tokenizer, template, configs).
EMBEDDED_FILES = (
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "vocab.json",
    "merges.txt", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja", "chat_template.json",
    "preprocessor_config.json", "video_preprocessor_config.json",
)
FP8_SCALE_SUFFIX = "_scale_inv"
FP8_DTYPES = ("F8_E4M3",)
FLOAT_STORE = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
STORE_DTYPE_NAMES = {"bf16": "BF16", "f16": "F16", "f32": "F32"}


class ConvertError(ValueError):
    """A checkpoint folder that cannot be converted, with what to do about it."""


@dataclass(frozen=True)
class ConvertProgress:
    """Reported after each source tensor; the app shows it, the CLI draws a bar from it."""

    tensor: str           # or "calibrating: layer i/n" (index 0) during the search-act calibration pass
    index: int            # 1-based
    count: int
    done_bytes: int       # source bytes processed
    total_bytes: int
    elapsed_s: float

    @property
    def percent(self) -> float:
        return 100.0 * self.done_bytes / self.total_bytes if self.total_bytes else 100.0

    @property
    def rate_bytes_s(self) -> float:
        return self.done_bytes / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float:
        r = self.rate_bytes_s
        return (self.total_bytes - self.done_bytes) / r if r > 0 else math.inf


@dataclass(frozen=True)
class TensorReport:
    name: str
    role: str
    format: str
    shape: tuple[int, ...]
    source_dtype: str
    stored_bytes: int
    rel_error: float  # ||w - w_stored|| / ||w|| against the (FP8-dequantized) source


@dataclass
class ConvertResult:
    path: Path
    family: str
    recipe: str
    source_digest: str
    source_bytes: int
    artifact_bytes: int
    elapsed_s: float
    tensors: list[TensorReport] = field(default_factory=list)

    def worst(self, n: int = 5) -> list[TensorReport]:
        return sorted(self.tensors, key=lambda r: -r.rel_error)[:n]


# ---------------------------------------------------------------------------------------------
# the source checkpoint


@dataclass
class SourceTensor:
    key: str
    shard: str
    dtype: str
    shape: tuple[int, ...]
    scale_key: str | None = None  # FP8: the block scale tensor


class SourceCheckpoint:
    """Headers of every shard of an HF checkpoint folder, and bounded-memory tensor reads."""

    def __init__(self, folder: Path, config: ModelConfig):
        self.folder, self.config = folder, config
        shards = self._shard_names()
        self.readers = {s: SafetensorsReader(folder / s) for s in shards}
        entries: dict[str, tuple[str, object]] = {}
        for shard, r in self.readers.items():
            for k, e in r.header.entries.items():
                if k in entries:
                    raise ConvertError(f"tensor '{k}' appears in both {entries[k][0]} and {shard}; the checkpoint "
                                       "is inconsistent")
                entries[k] = (shard, e)
        self.block = self._fp8_block()
        self.tensors: dict[str, SourceTensor] = {}
        scales = {k for k in entries if k.endswith(FP8_SCALE_SUFFIX)}
        for k, (shard, e) in entries.items():
            if k in scales:
                continue
            t = SourceTensor(k, shard, e.dtype, e.shape)
            if e.dtype in FP8_DTYPES:
                t.scale_key = k + FP8_SCALE_SUFFIX
                if t.scale_key not in entries:
                    raise ConvertError(f"tensor '{k}' is FP8 ({e.dtype}) but its block scale '{t.scale_key}' is "
                                       "missing; the FP8 checkpoint is incomplete")
                want = tuple(-(-d // b) for d, b in zip(e.shape, self.block))
                got = entries[t.scale_key][1].shape
                if len(e.shape) != 2 or tuple(got) != want:
                    raise ConvertError(f"tensor '{t.scale_key}' has shape {list(got)}; expected {list(want)} "
                                       f"(blocks of {list(self.block)} over {list(e.shape)})")
            self.tensors[k] = t
        for s in scales:
            base = s[: -len(FP8_SCALE_SUFFIX)]
            if base not in self.tensors or self.tensors[base].scale_key != s:
                raise ConvertError(f"tensor '{s}' is an FP8 block scale but '{base}' is not an FP8 weight")
        self.fp8 = any(t.scale_key for t in self.tensors.values())
        self.entries = entries

    def _shard_names(self) -> list[str]:
        index, single = self.folder / INDEX_FILE, self.folder / SINGLE_FILE
        if index.exists():
            try:
                wm = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise ConvertError(f"{index}: not a valid safetensors index ({exc})") from exc
            shards = sorted(set(wm.values()))
            for s in shards:
                if not (self.folder / s).is_file():
                    raise ConvertError(f"shard '{s}' listed in {INDEX_FILE} is missing from {self.folder}; "
                                       "finish the download and run convert again")
            return shards
        if single.exists():
            return [SINGLE_FILE]
        raise ConvertError(f"{self.folder}: no {SINGLE_FILE} and no {INDEX_FILE}; not a safetensors checkpoint")

    def _fp8_block(self) -> tuple[int, int]:
        qc = self.config.raw.get("quantization_config") or {}
        if not qc and "text_config" in self.config.raw:
            qc = self.config.raw["text_config"].get("quantization_config") or {}
        block = qc.get("weight_block_size") or [128, 128]
        return int(block[0]), int(block[1])

    @property
    def text_prefix(self) -> str:
        if any(k.startswith(MULTIMODAL_TEXT_PREFIX) for k in self.tensors):
            return MULTIMODAL_TEXT_PREFIX
        return TEXT_ONLY_PREFIX

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {k: t.shape for k, t in self.tensors.items()}

    def nbytes(self, key: str) -> int:
        t = self.tensors[key]
        n = self.entries[key][1].nbytes
        return n + (self.entries[t.scale_key][1].nbytes if t.scale_key else 0)

    def read(self, key: str) -> tuple[torch.Tensor, list[str]]:
        """The tensor in a float dtype (FP8 dequantized to fp32) and the digests of its raw bytes."""
        t = self.tensors[key]
        w, raw = self.readers[t.shard].read(key)
        digests = [digest_bytes(raw)]
        if t.scale_key:
            s_shard = self.entries[t.scale_key][0]
            s, sraw = self.readers[s_shard].read(t.scale_key)
            digests.append(digest_bytes(sraw))
            w = dequantize_fp8_blocks(w, s, self.block)
        elif not w.dtype.is_floating_point:
            raise ConvertError(f"tensor '{key}' has dtype {t.dtype}; expected a floating-point weight")
        return w, digests

    def full_key(self, rel_key: str) -> str:
        if rel_key == LM_HEAD or rel_key.startswith(MTP_PREFIX):
            return rel_key
        return self.text_prefix + rel_key

    def text(self, rel_key: str) -> torch.Tensor:
        """Checkpoint-like read by text-relative key (what the calibration run uses)."""
        return self.read(self.full_key(rel_key))[0]

    def ordered_keys(self) -> list[str]:
        """Keys in file order (sequential reads)."""
        return sorted(self.tensors, key=lambda k: (self.tensors[k].shard, self.entries[k][1].begin))

    def close(self) -> None:
        for r in self.readers.values():
            r.close()


def dequantize_fp8_blocks(w: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """Official FP8 layout: w_fp32 = w_fp8 * scale_inv[row // B0, col // B1]; row blocks at a time."""
    n, k = w.shape
    b0, b1 = block
    out = torch.empty(n, k, dtype=torch.float32)
    s = scale_inv.float()
    for r0 in range(0, n, b0):
        r1 = min(n, r0 + b0)
        row_scale = s[r0 // b0].repeat_interleave(b1)[:k]
        out[r0:r1] = w[r0:r1].float() * row_scale
    return out


# ---------------------------------------------------------------------------------------------
# planning


def stored_tensors(key: str, shape: tuple[int, ...], fmt: str) -> list[PlannedTensor]:
    """The artifact tensors that hold ``key`` in ``fmt``."""
    q = parse_format(fmt)
    if q is None:
        return [PlannedTensor(key, STORE_DTYPE_NAMES[fmt], tuple(shape))]
    return [PlannedTensor(f"{key}.{suffix}", "F16" if dt == torch.float16 else "U8", shp)
            for suffix, (shp, dt) in q.tensor_shapes(shape).items()]


def _fixed_error(x: float) -> str:
    return f"{x:.4e}"


def _read_embedded_files(folder: Path) -> dict[str, str]:
    files: dict[str, str] = {}
    for name in EMBEDDED_FILES:
        p = folder / name
        if p.is_file():
            try:
                files[name] = p.read_text(encoding="utf-8")
            except UnicodeDecodeError as exc:
                raise ConvertError(f"{p} is not UTF-8 text ({exc}); cannot embed it") from exc
    return files


def _tensor_table(plan: dict[str, tuple[str, tuple[int, ...], str]], source: SourceCheckpoint,
                  errors: dict[str, float], prefix: str) -> dict:
    return {k: {"format": fmt, "shape": list(shape), "role": tensor_role(k, prefix),
                "source_dtype": source.tensors[k].dtype,
                "rel_error": _fixed_error(errors.get(k, 0.0))}
            for k, (fmt, shape, _) in plan.items()}


def convert(
    hf_dir: str | Path,
    out: str | Path,
    *,
    recipe: str | Recipe = DEFAULT_RECIPE,
    method: str | None = None,
    allow_test_shapes: bool | None = None,
    progress: Callable[[ConvertProgress], None] | None = None,
    threads: int | None = None,
) -> ConvertResult:
    """Convert ``hf_dir`` into the artifact file ``out``; see the module docstring.

    ``threads`` sets torch's CPU threads for the conversion (restored afterwards). On a machine
    whose cores are busy with other work, 1 thread is several times faster than oversubscribing.
    """
    if threads is None:
        return _convert(hf_dir, out, recipe, method, allow_test_shapes, progress)
    previous = torch.get_num_threads()
    torch.set_num_threads(max(1, int(threads)))
    try:
        return _convert(hf_dir, out, recipe, method, allow_test_shapes, progress)
    finally:
        torch.set_num_threads(previous)


def _convert(hf_dir, out, recipe, method, allow_test_shapes, progress) -> ConvertResult:
    t0 = time.monotonic()
    folder, out = Path(hf_dir), Path(out)
    if not folder.is_dir():
        raise ConvertError(f"{folder} is not a folder; point convert at a downloaded Hugging Face checkpoint folder")
    if out.is_dir():
        raise ConvertError(f"output {out} is a folder; give a file name such as {out / 'model.monorail'}")
    rec = get_recipe(recipe) if isinstance(recipe, str) else recipe
    if method:
        rec = rec.with_method(method)
    config = load_config(folder)
    family = identify(config, allow_test_shapes=allow_test_shapes)
    source = SourceCheckpoint(folder, config)
    try:
        prefix = source.text_prefix
        check_tensors(config, source.shapes(), prefix)
        expected = expected_tensors(config, prefix)
        plan = {k: (rec.format_for(k, shape, prefix), shape, tensor_role(k, prefix)) for k, shape in expected.items()}
        planned = [p for k, (fmt, shape, _) in plan.items() for p in stored_tensors(k, shape, fmt)]
        files = _read_embedded_files(folder)
        stats = None
        calibration: dict = {}
        if rec.method == "search-act":
            from engine.calibrate import CALIBRATION_TEXT, collect_activation_stats
            def on_layer(i: int, n: int) -> None:  # reported as index 0: before the first tensor
                if progress is not None:
                    progress(ConvertProgress(f"calibrating: layer {i + 1}/{n}", 0, len(plan), 0,
                                             sum(source.nbytes(k) for k in plan), time.monotonic() - t0))
            stats = collect_activation_stats(source, config, on_layer=on_layer)
            calibration = {"tokens": stats.tokens, "text_digest": digest_bytes(CALIBRATION_TEXT.encode("utf-8")),
                           "observed": len(stats.mean_square)}

        def metadata(digests: dict[str, str], errors: dict[str, float], source_digest: str) -> dict[str, str]:
            return {
                "format": "pt",
                META + "artifact": str(ARTIFACT_VERSION),
                META + "family": family,
                META + "architecture": (config.raw.get("architectures") or [config.model_type])[0],
                META + "text_prefix": prefix,
                META + "recipe": canonical_json({"id": rec.id, "version": rec.version, "method": rec.method,
                                                 "tag": rec.tag, "formats": dict(rec.formats)}),
                META + "tensors": canonical_json(_tensor_table(plan, source, errors, prefix)),
                META + "digests": canonical_json(digests),
                META + "source": canonical_json({
                    "name": folder.resolve().name, "digest": source_digest,
                    "dtype": "fp8-e4m3 block %dx%d" % source.block if source.fp8 else
                    "/".join(sorted({t.dtype for t in source.tensors.values()})),
                    "tensors": len(source.entries), "bytes": sum(e.nbytes for _, e in source.entries.values())}),
                META + "files": canonical_json(files),
                META + "converter": canonical_json({"monorail": __version__}),
                META + "calibration": canonical_json(calibration),
            }

        # Reserve the header with placeholders of the final widths: digests are fixed-width hex,
        # errors are fixed-width strings; the header digest is added last.
        placeholder = metadata({p.name: "0" * DIGEST_HEX_LEN for p in planned}, {k: 1.0 for k in plan},
                               "0" * DIGEST_HEX_LEN)
        placeholder[META + "header_digest"] = "0" * DIGEST_HEX_LEN
        reserve = header_size_for(planned, placeholder, slack=4096 + 4 * len(plan))
        if reserve > MAX_HEADER_BYTES:
            raise ConvertError(f"the artifact header would be {reserve:,} bytes (embedded files: "
                               f"{sum(len(v) for v in files.values()):,}); safetensors allows {MAX_HEADER_BYTES:,}")
        _check_free_space(out, reserve + sum(p.nbytes for p in planned))
        writer = StreamingWriter(out, planned, reserve)
        try:
            reports, errors, source_digests = _convert_tensors(source, plan, writer, prefix, rec.method, progress, t0,
                                                               stats)
            source_digest = digest_bytes(canonical_json({
                "config.json": digest_bytes((folder / "config.json").read_bytes()),
                "tensors": source_digests}).encode("utf-8"))
            meta = metadata(writer.digests, errors, source_digest)
            meta[META + "header_digest"] = header_digest(writer.header_dict(meta))
            path = writer.finish(meta)
        except BaseException:
            writer.abort()
            raise
    finally:
        source.close()
    return ConvertResult(path=path, family=family, recipe=rec.tag, source_digest=source_digest,
                         source_bytes=sum(source.nbytes(k) for k in source.tensors),
                         artifact_bytes=path.stat().st_size, elapsed_s=time.monotonic() - t0, tensors=reports)


def _check_free_space(out: Path, needed: int) -> None:
    """Refuse before reading a byte when the artifact cannot fit on its disk (the file is written
    sparse, so running out of space would otherwise surface only part-way through)."""
    folder = out.resolve().parent
    while not folder.exists():
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    partial = out.with_name(out.name + ".partial")
    if partial.exists():
        free += partial.stat().st_blocks * 512  # a stale partial file is removed before writing
    if needed > free:
        raise ConvertError(f"the artifact needs {needed / 1e9:.2f} GB but only {free / 1e9:.2f} GB are free on the "
                           f"disk holding {folder}; free some space or choose another output folder")


def header_digest(header: dict) -> str:
    """Digest of the header as canonical JSON, without the header digest itself."""
    h = dict(header)
    meta = dict(h.get("__metadata__", {}))
    meta.pop(META + "header_digest", None)
    h["__metadata__"] = meta
    return digest_bytes(canonical_json(h).encode("utf-8"))


def _convert_tensors(source: SourceCheckpoint, plan, writer: StreamingWriter, prefix: str, method: str,
                     progress, t0: float, stats=None):
    keys = [k for k in source.ordered_keys() if k in plan]
    total = sum(source.nbytes(k) for k in keys)
    done = 0
    reports: list[TensorReport] = []
    errors: dict[str, float] = {}
    source_digests: dict[str, list[str]] = {}
    for i, key in enumerate(keys, 1):
        fmt, shape, role = plan[key]
        w, digests = source.read(key)
        source_digests[key] = digests
        q = parse_format(fmt)
        if q is None:
            stored = w.to(FLOAT_STORE[fmt])
            writer.write(key, stored)
            err = relative_error(w.reshape(w.shape[0] if w.dim() else 1, -1),
                                 stored.reshape(w.shape[0] if w.dim() else 1, -1)) if w.numel() else 0.0
            nbytes = stored.numel() * stored.element_size()
            del stored
        else:
            if method == "search-act":
                qt = quantize(w, q, method="search", importance=stats.importance(key) if stats else None)
            else:
                qt = quantize(w, q, method=method)
            writer.write(key + ".qcodes", qt.codes)
            if qt.high is not None:
                writer.write(key + ".qhigh", qt.high)
            writer.write(key + ".qscales", qt.scales)
            err = relative_error(w, qt)
            nbytes = qt.nbytes
            del qt
        del w
        errors[key] = err
        reports.append(TensorReport(key, role, fmt, tuple(shape), source.tensors[key].dtype, nbytes, err))
        done += source.nbytes(key)
        if progress is not None:
            progress(ConvertProgress(key, i, len(keys), done, total, time.monotonic() - t0))
    return reports, errors, source_digests
