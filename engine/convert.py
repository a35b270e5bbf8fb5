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
    StreamingWriter,
    canonical_json,
    digest_bytes,
    header_size_for,
)
from engine.config import load_config
from engine.convert_source import ConvertError, SourceCheckpoint
from engine.quant import quantize, relative_error
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
FLOAT_STORE = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
STORE_DTYPE_NAMES = {"bf16": "BF16", "f16": "F16", "f32": "F32"}


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
