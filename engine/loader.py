"""Read a Hugging Face Qwen3.5 checkpoint folder directly from its safetensors shards.

The shards are memory-mapped (``safetensors.safe_open``) and each tensor is materialised only
when asked for, one at a time, so opening a 54 GB checkpoint costs a few header reads and never a
second full copy in RAM. Both key layouts are understood: the multimodal save
(``model.language_model.*``, ``model.visual.*``) and the text-only save (``model.*``).

Every tensor of the text decoder and the MTP head has the shape its config implies
(``text_tensor_shapes``); a tensor that disagrees is refused with its name, the expected shape
and the shape found, instead of failing later inside a matmul.

Official FP8 releases (``*_scale_inv``) are the converter's business, not this module's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import torch
from safetensors import safe_open

from engine.config import ModelConfig, TextConfig, load_config

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
MULTIMODAL_TEXT_PREFIX = "model.language_model."
TEXT_ONLY_PREFIX = "model."
LM_HEAD = "lm_head.weight"
MTP_PREFIX = "mtp."


class CheckpointError(ValueError):
    """A checkpoint folder whose files or tensors do not match what its config describes."""


def _attention_shapes(t: TextConfig, p: str) -> dict[str, tuple[int, ...]]:
    h, hd = t.hidden_size, t.head_dim
    return {
        p + "self_attn.q_proj.weight": (2 * t.num_attention_heads * hd, h),  # per head [q | gate]
        p + "self_attn.k_proj.weight": (t.num_key_value_heads * hd, h),
        p + "self_attn.v_proj.weight": (t.num_key_value_heads * hd, h),
        p + "self_attn.o_proj.weight": (h, t.num_attention_heads * hd),
        p + "self_attn.q_norm.weight": (hd,),
        p + "self_attn.k_norm.weight": (hd,),
    }


def _mlp_and_norm_shapes(t: TextConfig, p: str) -> dict[str, tuple[int, ...]]:
    h, i = t.hidden_size, t.intermediate_size
    return {
        p + "input_layernorm.weight": (h,),
        p + "post_attention_layernorm.weight": (h,),
        p + "mlp.gate_proj.weight": (i, h),
        p + "mlp.up_proj.weight": (i, h),
        p + "mlp.down_proj.weight": (h, i),
    }


def _gdn_shapes(t: TextConfig, p: str) -> dict[str, tuple[int, ...]]:
    h, nv = t.hidden_size, t.linear_num_value_heads
    return {
        p + "linear_attn.in_proj_qkv.weight": (t.linear_conv_dim, h),
        p + "linear_attn.in_proj_z.weight": (t.linear_v_dim, h),
        p + "linear_attn.in_proj_b.weight": (nv, h),
        p + "linear_attn.in_proj_a.weight": (nv, h),
        p + "linear_attn.conv1d.weight": (t.linear_conv_dim, 1, t.linear_conv_kernel_dim),
        p + "linear_attn.dt_bias": (nv,),
        p + "linear_attn.A_log": (nv,),
        p + "linear_attn.norm.weight": (t.linear_value_head_dim,),
        p + "linear_attn.out_proj.weight": (h, t.linear_v_dim),
    }


def text_tensor_shapes(t: TextConfig) -> dict[str, tuple[int, ...]]:
    """Every text-decoder and MTP tensor the config implies, keyed relative to the text prefix.

    ``lm_head.weight`` and ``mtp.*`` are top-level keys in every layout and are listed as such.
    """
    h = t.hidden_size
    shapes: dict[str, tuple[int, ...]] = {
        "embed_tokens.weight": (t.vocab_size, h),
        "norm.weight": (h,),
        LM_HEAD: (t.vocab_size, h),
    }
    for i in range(t.num_hidden_layers):
        p = f"layers.{i}."
        shapes.update(_mlp_and_norm_shapes(t, p))
        shapes.update(_attention_shapes(t, p) if t.is_full_attention(i) else _gdn_shapes(t, p))
    for j in range(t.mtp_num_hidden_layers):
        p = f"mtp.layers.{j}."
        shapes.update(_mlp_and_norm_shapes(t, p))
        shapes.update(_attention_shapes(t, p))
    if t.mtp_num_hidden_layers:
        shapes.update({"mtp.fc.weight": (h, 2 * h), "mtp.pre_fc_norm_embedding.weight": (h,),
                       "mtp.pre_fc_norm_hidden.weight": (h,), "mtp.norm.weight": (h,)})
    return shapes


class Checkpoint:
    """A lazily read, memory-mapped Hugging Face checkpoint of the Qwen3.5 family.

    Open with ``Checkpoint.open(folder)``. ``get(full_key)`` reads one tensor; ``text(rel_key)``
    reads a text-decoder tensor by its name relative to the language-model prefix (also accepts
    ``lm_head.weight`` and ``mtp.*``) and checks its shape against the config.
    """

    def __init__(self, folder: Path, config: ModelConfig, weight_map: dict[str, str], index_path: Path | None,
                 *, detect_layout: bool = True):
        self.folder = folder
        self.config = config
        self._weight_map = weight_map           # full key -> shard file name
        self._index_path = index_path
        self._handles: dict[str, object] = {}   # shard file name -> open safe_open handle (mmap)
        self._shard_key_cache: dict[str, set[str]] = {}
        self.text_prefix = self._detect_text_prefix() if detect_layout else ""
        self._expected = text_tensor_shapes(config.text)

    # ---- opening -------------------------------------------------------------------------
    @classmethod
    def open(cls, folder: str | Path) -> "Checkpoint":
        folder = Path(folder)
        if not folder.is_dir():
            raise CheckpointError(f"{folder}: not a checkpoint folder (expected a directory with config.json "
                                  "and model.safetensors or model.safetensors.index.json)")
        config = load_config(folder)  # raises ConfigError for anything that is not qwen3_5
        index = folder / INDEX_FILE
        single = folder / SINGLE_FILE
        if index.exists():
            # The index wins over a lone model.safetensors: it may list extra shards (e.g. mtp.*).
            weight_map = cls._read_index(index)
            for shard in sorted(set(weight_map.values())):
                if Path(shard).name != shard:
                    raise CheckpointError(f"{index}: shard name '{shard}' is not a plain file name in the folder")
                if not (folder / shard).is_file():
                    n = sum(1 for s in weight_map.values() if s == shard)
                    raise CheckpointError(f"shard file '{shard}' is missing from {folder}: {index.name} lists "
                                          f"{n} tensors in it. Re-download the checkpoint or restore the file.")
            ckpt = cls(folder, config, weight_map, index)
            for shard in sorted(set(weight_map.values())):
                ckpt._open_shard(shard)  # parses headers now, so a corrupt file is named at open time
            return ckpt
        if single.exists():
            ckpt = cls(folder, config, {}, None, detect_layout=False)
            ckpt._weight_map = {k: SINGLE_FILE for k in ckpt._open_shard(SINGLE_FILE).keys()}
            ckpt.text_prefix = ckpt._detect_text_prefix()
            return ckpt
        raise CheckpointError(f"{folder}: no {SINGLE_FILE} and no {INDEX_FILE}; this is not a safetensors "
                              "checkpoint (Monorail does not read .bin/.pt weights)")

    @staticmethod
    def _read_index(index: Path) -> dict[str, str]:
        try:
            data = json.loads(index.read_text(encoding="utf-8"))
            weight_map = data["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise CheckpointError(f"{index}: not a valid safetensors index (needs a 'weight_map' object): {exc}") \
                from exc
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{index}: 'weight_map' is not an object")
        return {str(k): str(v) for k, v in weight_map.items()}

    def _detect_text_prefix(self) -> str:
        if any(k.startswith(MULTIMODAL_TEXT_PREFIX) for k in self._weight_map):
            return MULTIMODAL_TEXT_PREFIX
        if any(k.startswith(TEXT_ONLY_PREFIX + "layers.") or k == TEXT_ONLY_PREFIX + "embed_tokens.weight"
               for k in self._weight_map):
            return TEXT_ONLY_PREFIX
        raise CheckpointError(f"{self.folder}: found neither '{MULTIMODAL_TEXT_PREFIX}*' nor "
                              f"'{TEXT_ONLY_PREFIX}layers.*' tensors; not a Qwen3.5 text decoder checkpoint")

    # ---- queries -------------------------------------------------------------------------
    def keys(self) -> list[str]:
        return list(self._weight_map)

    def has(self, full_key: str) -> bool:
        return full_key in self._weight_map

    def full_key(self, rel_key: str) -> str:
        """Map a text-relative key to its key in this checkpoint (handles lm_head, tied embeddings, mtp)."""
        if rel_key == LM_HEAD:
            if LM_HEAD not in self._weight_map and self.config.text.tie_word_embeddings:
                return self.text_prefix + "embed_tokens.weight"
            return LM_HEAD
        if rel_key.startswith(MTP_PREFIX):
            return rel_key
        return self.text_prefix + rel_key

    def shape(self, full_key: str) -> tuple[int, ...]:
        """Shape from the safetensors header, without reading the data."""
        return tuple(self._handle_for(full_key).get_slice(full_key).get_shape())

    def get(self, full_key: str, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Read one tensor (a fresh tensor backed by this read only; the shard stays mapped)."""
        t = self._handle_for(full_key).get_tensor(full_key)
        return t if dtype is None or t.dtype == dtype else t.to(dtype)

    def text(self, rel_key: str, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Read a text-decoder/MTP tensor by relative key, checking its shape against the config."""
        key = self.full_key(rel_key)
        expected = self._expected.get(rel_key)
        if expected is not None:
            found = self.shape(key)
            if found != expected:
                raise CheckpointError(f"tensor '{key}' has shape {list(found)}; the config implies "
                                      f"{list(expected)}. The checkpoint does not match its config.json.")
        return self.get(key, dtype)

    def validate_text(self, *, mtp: bool | None = None) -> None:
        """Check presence and shape of every text (and MTP) tensor from headers only."""
        for rel, expected in self._expected.items():
            if rel.startswith(MTP_PREFIX) and mtp is False:
                continue
            key = self.full_key(rel)
            found = self.shape(key)
            if found != expected:
                raise CheckpointError(f"tensor '{key}' has shape {list(found)}; the config implies "
                                      f"{list(expected)}. The checkpoint does not match its config.json.")

    def iter_shards(self) -> Iterator[Path]:
        for shard in sorted(set(self._weight_map.values())):
            yield self.folder / shard

    # ---- internals -----------------------------------------------------------------------
    def _handle_for(self, full_key: str):
        shard = self._weight_map.get(full_key)
        if shard is None:
            where = self._index_path.name if self._index_path else SINGLE_FILE
            raise CheckpointError(f"tensor '{full_key}' is missing from the checkpoint at {self.folder} "
                                  f"(not listed in {where})")
        h = self._open_shard(shard)
        # the index may claim a tensor that the shard does not hold
        if self._index_path is not None and full_key not in self._shard_keys(shard):
            raise CheckpointError(f"tensor '{full_key}' is listed in {self._index_path.name} under '{shard}' "
                                  "but that file does not contain it")
        return h

    def _open_shard(self, shard: str):
        """The shard's safe_open handle (header parsed, data memory-mapped), opened once."""
        h = self._handles.get(shard)
        if h is None:
            path = self.folder / shard
            if not path.is_file():
                raise CheckpointError(f"shard file '{shard}' is missing from {self.folder}")
            try:
                h = safe_open(path, framework="pt")
            except Exception as exc:  # safetensors raises its own SafetensorError for bad headers
                raise CheckpointError(f"shard file '{path}' is not a readable safetensors file ({exc}); "
                                      "it is probably truncated or corrupt: re-download it") from exc
            self._handles[shard] = h
        return h

    def _shard_keys(self, shard: str) -> set[str]:
        if shard not in self._shard_key_cache:
            self._shard_key_cache[shard] = set(self._handles[shard].keys())
        return self._shard_key_cache[shard]

    def close(self) -> None:
        self._handles.clear()
        self._shard_key_cache.clear()

    def __enter__(self) -> "Checkpoint":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Checkpoint({str(self.folder)!r}, layout={self.text_prefix!r}, tensors={len(self._weight_map)}, "
                f"shards={len(set(self._weight_map.values()))})")
