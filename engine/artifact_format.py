"""Streaming safetensors I/O with bounded memory, and the digests that guard an artifact.

The safetensors format (documented by its authors) is: an 8-byte little-endian header length N,
N bytes of JSON (``{"__metadata__": {str: str}, name: {"dtype", "shape", "data_offsets": [b, e]}}``,
space-padded), then the tensor bytes, offsets relative to the end of the header, with no holes.
``safetensors.torch.save_file`` needs every tensor in memory at once, so this module writes the
file itself: the header space is reserved up front (every field that is only known at the end
has a fixed width), tensors are written one by one at their precomputed offsets, and the header
is written last. Everything goes to ``<out>.partial`` which is fsynced and atomically renamed, so
an interrupted conversion never leaves a file under the final name.

Readers here use ``os.pread`` into a fresh buffer per tensor (the converter's source reads:
memory stays bounded by the largest tensor) or a private memory map (artifact loading).

Digest: XXH3-128 (the ``xxhash`` package), several GB/s per core, enough to check every tensor
while it is streamed to the GPU without slowing the load (see docs/artifact.md).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

import torch
import xxhash

DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
# safetensors' own reader refuses headers above 100 MB
MAX_HEADER_BYTES = 100_000_000
DIGEST_HEX_LEN = 32  # XXH3-128


class SafetensorsFormatError(ValueError):
    """A file that is not a well-formed safetensors file (or is truncated)."""


def digest_bytes(data) -> str:
    """XXH3-128 hex digest of a bytes-like object (buffer protocol, no copy)."""
    return xxhash.xxh3_128(data).hexdigest()


def new_digest():
    return xxhash.xxh3_128()


def element_size(dtype: str) -> int:
    return torch.empty(0, dtype=DTYPES[dtype]).element_size()


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors header. ``begin``/``end`` are relative to the data section."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class Header:
    path: Path
    header_len: int                # N
    raw: dict                      # parsed JSON
    entries: dict[str, TensorEntry]
    metadata: dict[str, str]

    @property
    def data_start(self) -> int:
        return 8 + self.header_len

    @property
    def data_len(self) -> int:
        return max((e.end for e in self.entries.values()), default=0)

    @property
    def file_len(self) -> int:
        return self.data_start + self.data_len


def read_header(path: str | Path) -> Header:
    """Parse and validate a safetensors header; refuse truncated or malformed files with a clear message."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise SafetensorsFormatError(f"{path}: {size} bytes, too short to be a safetensors file (truncated?)")
        n = int.from_bytes(head, "little")
        if n <= 0 or n > MAX_HEADER_BYTES:
            raise SafetensorsFormatError(f"{path}: header length field is {n} bytes; not a safetensors file "
                                         "(or its first bytes are corrupt)")
        if 8 + n > size:
            raise SafetensorsFormatError(f"{path}: truncated: the header needs {8 + n} bytes, the file has {size}")
        text = f.read(n)
    try:
        raw = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SafetensorsFormatError(f"{path}: the header is not valid JSON ({exc}); the file is corrupt") from exc
    if not isinstance(raw, dict):
        raise SafetensorsFormatError(f"{path}: the header is not a JSON object; the file is corrupt")
    meta = raw.get("__metadata__") or {}
    entries: dict[str, TensorEntry] = {}
    for name, info in raw.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (b, e) = info["dtype"], tuple(int(d) for d in info["shape"]), info["data_offsets"]
        except (KeyError, TypeError, ValueError) as exc:
            raise SafetensorsFormatError(f"{path}: header entry for '{name}' is malformed ({exc})") from exc
        if dtype not in DTYPES:
            raise SafetensorsFormatError(f"{path}: tensor '{name}' has dtype {dtype!r}, which Monorail does not read")
        entry = TensorEntry(name, dtype, shape, int(b), int(e))
        if entry.nbytes != entry.numel * element_size(dtype) or entry.begin < 0:
            raise SafetensorsFormatError(f"{path}: tensor '{name}' claims bytes [{b}, {e}) for shape {list(shape)} "
                                         f"of {dtype}; the header is corrupt")
        entries[name] = entry
    header = Header(path, n, raw, entries, {str(k): str(v) for k, v in meta.items()})
    if header.file_len > size:
        raise SafetensorsFormatError(f"{path}: truncated: the header describes {header.file_len:,} bytes, the file "
                                     f"has {size:,}. Re-download or re-convert it.")
    return header


class SafetensorsReader:
    """Reads one tensor at a time with ``os.pread`` into its own buffer (bounded memory, no mmap)."""

    def __init__(self, path: str | Path):
        self.header = read_header(path)
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_RDONLY)

    def keys(self) -> list[str]:
        return list(self.header.entries)

    def entry(self, name: str) -> TensorEntry:
        return self.header.entries[name]

    def read_bytes(self, name: str) -> bytearray:
        e = self.header.entries[name]
        buf = bytearray(e.nbytes)
        view, done = memoryview(buf), 0
        while done < e.nbytes:
            got = os.preadv(self._fd, [view[done:]], self.header.data_start + e.begin + done)
            if got <= 0:
                raise SafetensorsFormatError(f"{self.path}: unexpected end of file while reading '{name}'")
            done += got
        return buf

    def read(self, name: str) -> tuple[torch.Tensor, bytearray]:
        """(tensor viewing the read buffer, the raw bytes)."""
        e = self.header.entries[name]
        buf = self.read_bytes(name)
        if e.nbytes == 0:
            return torch.empty(e.shape, dtype=DTYPES[e.dtype]), buf
        t = torch.frombuffer(buf, dtype=DTYPES[e.dtype]).reshape(e.shape)
        return t, buf

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "SafetensorsReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(frozen=True)
class PlannedTensor:
    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        n = element_size(self.dtype)
        for d in self.shape:
            n *= d
        return n


def canonical_json(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class StreamingWriter:
    """Writes a safetensors file tensor by tensor, to ``<path>.partial``, renamed on ``finish``.

    ``header_reserve`` is the byte size of the header; it must be at least the final header's
    length (use ``header_size_for`` with placeholder metadata of the final widths).
    Tensors are laid out by decreasing element size so every tensor is aligned to its own
    element size (fp32 first, then fp16/bf16, then bytes), in the given order within a size.
    """

    def __init__(self, path: str | Path, tensors: Iterable[PlannedTensor], header_reserve: int):
        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + ".partial")
        planned = list(tensors)
        names = [p.name for p in planned]
        if len(set(names)) != len(names):
            raise ValueError("duplicate tensor names in the artifact plan")
        order = sorted(range(len(planned)), key=lambda i: (-element_size(planned[i].dtype), i))
        self.entries: dict[str, TensorEntry] = {}
        off = 0
        for i in order:
            p = planned[i]
            self.entries[p.name] = TensorEntry(p.name, p.dtype, p.shape, off, off + p.nbytes)
            off += p.nbytes
        self.data_len = off
        self.header_reserve = _round_up(header_reserve, 8)
        self.digests: dict[str, str] = {}
        if self.partial.exists():
            self.partial.unlink()  # a previous run was interrupted: start over
        self.partial.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.partial, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(self._fd, 8 + self.header_reserve + self.data_len)

    def header_dict(self, metadata: Mapping[str, str]) -> dict:
        h: dict = {"__metadata__": dict(metadata)}
        for e in self.entries.values():
            h[e.name] = {"dtype": e.dtype, "shape": list(e.shape), "data_offsets": [e.begin, e.end]}
        return h

    def write(self, name: str, tensor: torch.Tensor) -> str:
        """Write one tensor at its planned offset; returns its digest."""
        e = self.entries.get(name)
        if e is None:
            raise KeyError(f"tensor '{name}' is not in the artifact plan")
        if DTYPE_NAMES.get(tensor.dtype) != e.dtype or tuple(tensor.shape) != e.shape:
            raise ValueError(f"tensor '{name}': got {tensor.dtype} {list(tensor.shape)}, planned {e.dtype} "
                             f"{list(e.shape)}")
        data = _tensor_bytes(tensor)
        view, done = memoryview(data), 0
        base = 8 + self.header_reserve + e.begin
        while done < e.nbytes:
            done += os.pwrite(self._fd, view[done:], base + done)
        self.digests[name] = digest_bytes(data)
        return self.digests[name]

    def finish(self, metadata: Mapping[str, str]) -> Path:
        """Write the header, fsync, and atomically move the file to its final name."""
        missing = [n for n in self.entries if n not in self.digests]
        if missing:
            raise RuntimeError(f"artifact incomplete: {len(missing)} tensors never written (first: {missing[0]})")
        text = canonical_json(self.header_dict(metadata)).encode("utf-8")
        if len(text) > self.header_reserve:
            raise RuntimeError(f"artifact header is {len(text)} bytes but only {self.header_reserve} were reserved")
        text += b" " * (self.header_reserve - len(text))
        os.pwrite(self._fd, self.header_reserve.to_bytes(8, "little") + text, 0)
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1
        os.replace(self.partial, self.path)
        _fsync_dir(self.path.parent)
        return self.path

    def abort(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self.partial.exists():
            self.partial.unlink()


def header_size_for(tensors: Iterable[PlannedTensor], metadata: Mapping[str, str], slack: int = 4096) -> int:
    """Bytes to reserve for a header with these tensors and metadata of these (final) widths."""
    h: dict = {"__metadata__": dict(metadata)}
    off = 0
    for p in tensors:
        # offsets as wide as the largest possible value, so the estimate never falls short
        h[p.name] = {"dtype": p.dtype, "shape": list(p.shape), "data_offsets": [10 ** 15, 10 ** 15]}
        off += p.nbytes
    return _round_up(len(canonical_json(h).encode("utf-8")) + slack, 8)


def _tensor_bytes(t: torch.Tensor):
    t = t.detach().contiguous().cpu()
    if t.numel() == 0:
        return b""
    return t.reshape(-1).view(torch.uint8).numpy()


def _round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
