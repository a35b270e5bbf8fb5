"""Read a Hugging Face checkpoint folder for conversion: every shard's header, bounded-memory
tensor reads, and the official FP8 block-scaled layout dequantized on the fly.

Tensors are read with ``os.pread`` into a fresh buffer each (no memory map, so nothing accumulates
in the resident set while a 54 GB checkpoint streams through). FP8 weights (``float8_e4m3fn``)
come with ``<key>_scale_inv`` [ceil(N/B0), ceil(K/B1)] and are returned as fp32
``w * scale_inv[row // B0, col // B1]``; the block size comes from ``quantization_config``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.artifact_format import SafetensorsReader, digest_bytes
from engine.config import ModelConfig
from engine.loader import INDEX_FILE, LM_HEAD, MTP_PREFIX, MULTIMODAL_TEXT_PREFIX, SINGLE_FILE, TEXT_ONLY_PREFIX

FP8_SCALE_SUFFIX = "_scale_inv"
FP8_DTYPES = ("F8_E4M3",)


class ConvertError(ValueError):
    """A checkpoint folder that cannot be converted, with what to do about it."""


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
