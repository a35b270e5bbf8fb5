"""Open a Monorail artifact: checked header, memory-mapped tensors, per-tensor digests on read.

    art = Artifact.open("model.monorail")             # header checks only: milliseconds
    art.stream(consumer, progress)                    # every tensor in file order, digest-checked
    qt = art.quantized("model.language_model.layers.0.mlp.up_proj.weight")   # native: codes/scales
    ReferenceModel.from_checkpoint(art.checkpoint())  # reference: dequantized, original HF names

Corruption is caught in two cheap layers (docs/artifact.md):
- at open: the header must parse, its digest (XXH3-128 over its canonical JSON) must match, and
  the file must be exactly as long as the header says (a truncated file is refused at once);
- on read: each stored tensor's bytes are hashed the first time they are read and compared with
  the digest in the header. A load reads every byte anyway; XXH3 runs at several GB/s per core.
"""

from __future__ import annotations

import json
import mmap
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch

from engine.artifact_format import DTYPES, Header, SafetensorsFormatError, TensorEntry, digest_bytes, read_header
from engine.config import ConfigError, ModelConfig, parse_config
from engine.convert import ARTIFACT_VERSION, META, header_digest
from engine.errors import ModelLoadError
from engine.loader import LM_HEAD, MTP_PREFIX
from engine.quant import QuantFormat, QuantizedTensor
from engine.recipe import FLOAT_FORMATS
from engine.registry import RegistryError, identify


class ArtifactError(ModelLoadError, ValueError):
    """An artifact that is missing, corrupt, or not one this version of Monorail reads."""


class ArtifactKeyError(ArtifactError, KeyError):
    """A tensor name the artifact does not hold."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class LoadProgress:
    done_bytes: int
    total_bytes: int
    tensor: str
    elapsed_s: float

    @property
    def percent(self) -> float:
        return 100.0 * self.done_bytes / self.total_bytes if self.total_bytes else 100.0


@dataclass(frozen=True)
class WeightInfo:
    """What the artifact says about one original checkpoint tensor."""

    key: str
    format: str            # "q4g64", ..., or "bf16" / "f16" / "f32"
    shape: tuple[int, ...]
    role: str
    rel_error: float
    source_dtype: str

    @property
    def quantized(self) -> bool:
        return self.format not in FLOAT_FORMATS


class Artifact:
    def __init__(self, path: Path, header: Header, verify: bool, allow_test_shapes: bool | None):
        self.path = path
        self.header = header
        self.verify_reads = verify
        meta = header.metadata
        self.metadata = meta
        self.family: str = meta[META + "family"]
        self.architecture: str = meta.get(META + "architecture", "")
        self.text_prefix: str = meta[META + "text_prefix"]
        self.recipe: dict = json.loads(meta[META + "recipe"])
        self.source: dict = json.loads(meta[META + "source"])
        self.files: dict[str, str] = json.loads(meta.get(META + "files", "{}"))
        self._digests: dict[str, str] = json.loads(meta[META + "digests"])
        self.weights: dict[str, WeightInfo] = {
            k: WeightInfo(k, v["format"], tuple(v["shape"]), v["role"], float(v["rel_error"]), v["source_dtype"])
            for k, v in json.loads(meta[META + "tensors"]).items()}
        if "config.json" not in self.files:
            raise ArtifactError(f"{path}: the artifact carries no config.json; re-convert it")
        self.config: ModelConfig = parse_config(json.loads(self.files["config.json"]))
        identify(self.config, allow_test_shapes=allow_test_shapes)
        self._verified: set[str] = set()
        self._fd = os.open(path, os.O_RDONLY)
        # A private mapping: pages come from the page cache on first touch; nothing is copied
        # unless written (tensors handed out are writable views, writes never reach the file).
        self._map = mmap.mmap(self._fd, 0, flags=mmap.MAP_PRIVATE,
                              prot=mmap.PROT_READ | mmap.PROT_WRITE) if header.file_len else None

    # ---- opening -------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path, *, verify: bool = True, allow_test_shapes: bool | None = None) -> "Artifact":
        """Open and check the header (digest, length, version, registered family). Cheap: no tensor read.

        With ``verify``, every tensor is also checked against its digest the first time it is read.
        """
        path = Path(path)
        if not path.is_file():
            raise ArtifactError(f"no artifact at {path}; create one with `monorail convert HF_DIR -o {path}`")
        try:
            header = read_header(path)
        except SafetensorsFormatError as exc:
            raise ArtifactError(f"{exc}. Re-run `monorail convert` to rebuild the artifact.") from exc
        meta = header.metadata
        version = meta.get(META + "artifact")
        if version is None:
            raise ArtifactError(f"{path} is a safetensors file but not a Monorail artifact (no '{META}artifact' "
                                "metadata); convert the checkpoint folder with `monorail convert`")
        if version != str(ARTIFACT_VERSION):
            raise ArtifactError(f"{path} is artifact format version {version}; this Monorail reads version "
                                f"{ARTIFACT_VERSION}. Re-convert with this version.")
        want = meta.get(META + "header_digest")
        if want is None or header_digest(header.raw) != want:
            raise ArtifactError(f"{path}: the header checksum does not match; the file was edited or damaged. "
                                "Re-run `monorail convert`.")
        size = path.stat().st_size
        if size != header.file_len:
            raise ArtifactError(f"{path}: the file has {size:,} bytes but its header describes {header.file_len:,}; "
                                "it is truncated or has trailing data. Re-run `monorail convert`.")
        try:
            return cls(path, header, verify, allow_test_shapes)
        except (RegistryError, ConfigError) as exc:  # a config this Monorail does not serve (or test shapes unswitched)
            raise ArtifactError(f"{path}: {exc}") from exc
        except (KeyError, json.JSONDecodeError, TypeError) as exc:
            raise ArtifactError(f"{path}: Monorail metadata is incomplete or malformed ({exc}); re-convert it") \
                from exc

    def close(self) -> None:
        # Tensors handed out keep views of the map; let the GC unmap it when they are gone.
        self._map = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "Artifact":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- stored tensors ------------------------------------------------------------------
    @property
    def total_bytes(self) -> int:
        return self.header.data_len

    def stored_names(self) -> list[str]:
        """Stored tensor names in file order."""
        return sorted(self.header.entries, key=lambda n: self.header.entries[n].begin)

    def _entry(self, name: str) -> TensorEntry:
        e = self.header.entries.get(name)
        if e is None:
            raise ArtifactKeyError(f"tensor '{name}' is not in the artifact {self.path.name}")
        return e

    def stored(self, name: str, *, verify: bool | None = None) -> torch.Tensor:
        """A zero-copy view of one stored tensor, digest-checked on first read when verifying."""
        e = self._entry(name)
        if self._map is None:
            raise ArtifactError(f"{self.path}: artifact is closed")
        dt = DTYPES[e.dtype]
        if e.nbytes == 0:
            return torch.empty(e.shape, dtype=dt)
        off = self.header.data_start + e.begin
        if (verify if verify is not None else self.verify_reads) and name not in self._verified:
            self._check_digest(name, memoryview(self._map)[off:off + e.nbytes])
        t = torch.frombuffer(self._map, dtype=dt, count=e.numel, offset=off)
        return t.reshape(e.shape)

    def _check_digest(self, name: str, data) -> None:
        want = self._digests.get(name)
        got = digest_bytes(data)
        if want != got:
            raise ArtifactError(f"{self.path}: tensor '{name}' fails its checksum (stored {want}, computed {got}); "
                                "the file is corrupt. Re-run `monorail convert` (or re-copy the file).")
        self._verified.add(name)

    def stream(self, consumer: Callable[[str, torch.Tensor], None] | None = None,
               progress: Callable[[LoadProgress], None] | None = None) -> None:
        """Read every stored tensor in file order (sequential disk reads) and hand it to
        ``consumer(name, tensor)``; ``progress`` after each tensor.

        With verification on, each tensor's digest is computed on a second thread while the
        consumer copies it (XXH3 releases the GIL), so the check hides behind the copy; a
        mismatch raises ArtifactError before the next tensor is read.
        """
        t0 = time.monotonic()
        done = 0
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="artifact-digest") as pool:
            for name in self.stored_names():
                e = self.header.entries[name]
                check = None
                if self.verify_reads and name not in self._verified and e.nbytes:
                    off = self.header.data_start + e.begin
                    check = pool.submit(self._check_digest, name, memoryview(self._map)[off:off + e.nbytes])
                t = self.stored(name, verify=False)
                if consumer is not None:
                    consumer(name, t)
                if check is not None:
                    check.result()  # re-raises ArtifactError for a corrupt tensor
                done += e.nbytes
                if progress is not None:
                    progress(LoadProgress(done, self.total_bytes, name, time.monotonic() - t0))

    def verify(self, progress: Callable[[LoadProgress], None] | None = None) -> None:
        """Check every tensor's digest now (``monorail inspect --verify``)."""
        t0 = time.monotonic()
        done = 0
        for name in self.stored_names():
            e = self.header.entries[name]
            off = self.header.data_start + e.begin
            self._check_digest(name, memoryview(self._map)[off:off + e.nbytes])
            done += e.nbytes
            if progress is not None:
                progress(LoadProgress(done, self.total_bytes, name, time.monotonic() - t0))

    # ---- original weights ----------------------------------------------------------------
    def info(self, key: str) -> WeightInfo:
        w = self.weights.get(key)
        if w is None:
            raise ArtifactKeyError(f"tensor '{key}' is not in the artifact {self.path.name}")
        return w

    def quantized(self, key: str) -> QuantizedTensor:
        """The stored codes/high bits/scales of a quantized weight (zero-copy views), for the native engine."""
        w = self.info(key)
        if not w.quantized:
            raise ArtifactError(f"tensor '{key}' is stored unquantized ({w.format}); use raw()")
        q = QuantFormat.parse(w.format)
        high = self.stored(key + ".qhigh") if q.bits in (5, 6) else None
        return QuantizedTensor(q.bits, q.group, self.stored(key + ".qcodes"), high, self.stored(key + ".qscales"),
                               (int(w.shape[0]), int(w.shape[1])))

    def raw(self, key: str) -> torch.Tensor:
        """An unquantized weight as stored (bf16/f16/f32 view)."""
        w = self.info(key)
        if w.quantized:
            raise ArtifactError(f"tensor '{key}' is quantized ({w.format}); use quantized() or dequantized()")
        return self.stored(key)

    def dequantized(self, key: str, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The weight as the reference backend uses it: quantized ones dequantized (fp32 unless ``dtype``)."""
        w = self.info(key)
        if w.quantized:
            return self.quantized(key).dequantize(dtype or torch.float32)
        t = self.stored(key)
        return t.clone() if dtype is None else t.to(dtype)

    def checkpoint(self) -> "ArtifactCheckpoint":
        return ArtifactCheckpoint(self)

    checkpoint_view = checkpoint  # the name engine/api.py uses

    # ---- tokenizer, template and configs -------------------------------------------------
    def chat_template(self) -> str | None:
        """The embedded chat template (chat_template.jinja, else tokenizer_config.json's), or None."""
        if "chat_template.jinja" in self.files:
            return self.files["chat_template.jinja"]
        if "chat_template.json" in self.files:
            t = json.loads(self.files["chat_template.json"]).get("chat_template")
            if isinstance(t, str):
                return t
        tc = json.loads(self.files.get("tokenizer_config.json", "{}"))
        t = tc.get("chat_template") if isinstance(tc, dict) else None
        if isinstance(t, list):
            t = {x.get("name"): x.get("template") for x in t if isinstance(x, dict)}.get("default")
        return t if isinstance(t, str) else None

    def generation_config(self) -> dict:
        return json.loads(self.files.get("generation_config.json", "{}"))

    def preprocessor_config(self) -> dict | None:
        text = self.files.get("preprocessor_config.json")
        return json.loads(text) if text is not None else None

    def extract_files(self, folder: str | Path) -> Path:
        """Write the embedded files (tokenizer, template, configs) into ``folder``; returns it."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in self.files.items():
            (folder / Path(name).name).write_text(text, encoding="utf-8")
        return folder

    def __repr__(self) -> str:
        return (f"Artifact({str(self.path)!r}, family={self.family!r}, recipe={self.recipe.get('tag')!r}, "
                f"tensors={len(self.weights)}, bytes={self.header.file_len:,})")


class ArtifactCheckpoint:
    """A Checkpoint-like view (engine.loader.Checkpoint's read API) giving dequantized weights
    under their original Hugging Face names, so the reference backend loads an artifact unchanged."""

    def __init__(self, artifact: Artifact):
        self.artifact = artifact
        self.config = artifact.config
        self.text_prefix = artifact.text_prefix

    def keys(self) -> list[str]:
        return list(self.artifact.weights)

    def has(self, full_key: str) -> bool:
        return full_key in self.artifact.weights

    def shape(self, full_key: str) -> tuple[int, ...]:
        return self.artifact.info(full_key).shape

    def full_key(self, rel_key: str) -> str:
        if rel_key == LM_HEAD:
            if not self.has(LM_HEAD) and self.config.text.tie_word_embeddings:
                return self.text_prefix + "embed_tokens.weight"
            return LM_HEAD
        if rel_key.startswith(MTP_PREFIX):
            return rel_key
        return self.text_prefix + rel_key

    def get(self, full_key: str, dtype: torch.dtype | None = None) -> torch.Tensor:
        return self.artifact.dequantized(full_key, dtype)

    def text(self, rel_key: str, dtype: torch.dtype | None = None) -> torch.Tensor:
        return self.get(self.full_key(rel_key), dtype)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())
