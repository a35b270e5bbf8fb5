"""Conversation states saved on disk, so that a long conversation goes on after a restart without recomputing it.

Prefix reuse (engine.api) keeps a conversation's state where its history ends, first on the GPU and then, set
aside, in host memory; both are lost when the worker stops. This store keeps such states in files: a 128K-token
conversation of the 27B (int8 KV) is 4.3 GB, read back in seconds where a 4090-class card would spend minutes
prefilling it again.

One file a state, in a folder per model identity (the weights' files, the backend and the state's layout, hashed:
engine.api._state_identity), so a state is only offered to the model that computed it. A file holds

    MAGIC | u64 header length | header (JSON, utf-8) | token ids (int32) | arrays ...     (each part 64-byte aligned)

The header names the state's metadata (backend-specific, e.g. its length), each array's dtype, shape and offset,
and an XXH3-128 digest of the ids and arrays. Files are written to a temporary name and renamed, so a crash leaves
no half file under a real name; a file that fails its digest or does not parse is deleted when found, and the
conversation is recomputed. The store keeps within a byte budget over every identity's folder (least recently
used first: a state read back is touched) and never fills the disk past DISK_FREE_RESERVE.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash

MAGIC = b"MRSTATE1"
SUFFIX = ".state"
ALIGN = 64
# Free disk space a saved state must leave: the cache is an optimisation and never the reason a disk fills up.
DISK_FREE_RESERVE = 4 << 30
_MAX_HEADER = 1 << 20
# A half-written file this old is a leftover of a write that never finished (a killed process), not one in progress.
STALE_WRITE_S = 3600


@dataclass(eq=False)
class StoredState:
    path: Path
    ids: list[int]        # the prompt tokens the state has consumed
    nbytes: int           # the file's size


def _pad(n: int) -> int:
    return -n % ALIGN


def _ids_bytes(ids: list[int]) -> bytes:
    return np.asarray(ids, dtype="<i4").tobytes()


def longest_prefix(candidates, ids: list[int]):
    """Of ``candidates`` (anything with ``.ids``: saved states, engine.api's snapshots in memory), the one whose
    tokens start ``ids`` and cover the most of them, leaving some to compute; None where none does."""
    best = None
    for c in candidates:
        if len(c.ids) < len(ids) and (best is None or len(c.ids) > len(best.ids)) and ids[:len(c.ids)] == c.ids:
            best = c
    return best


def state_name(ids: list[int]) -> str:
    """The file name of the state for ``ids`` (one file per token sequence within an identity's folder)."""
    return xxhash.xxh3_128(_ids_bytes(ids)).hexdigest() + SUFFIX


class PrefixStore:
    """The saved states of one model identity under ``root``, within ``budget_bytes`` for all of ``root``.

    Safe to call from two threads (the engine's generation thread reads, its writer thread saves)."""

    def __init__(self, root: Path, identity: str, budget_bytes: int, *, free_reserve: int = DISK_FREE_RESERVE):
        self.root = Path(root)
        self.folder = self.root / identity
        self.identity = identity
        self.budget_bytes = int(budget_bytes)
        self.free_reserve = int(free_reserve)
        self._lock = threading.Lock()
        self._entries: list[StoredState] = []
        self._scan()
        with self._lock:   # a budget lowered since the files were written holds from now on
            self._make_room(0)

    # ------------------------------------------------------------------ index
    def _scan(self) -> None:
        """Read the headers and ids of this identity's files; remove leftovers of interrupted writes and files
        that do not parse (their digest is checked when they are read back)."""
        entries = []
        if self.folder.is_dir():
            for path in sorted(self.folder.iterdir()):
                if path.name.endswith(".tmp"):
                    if _age_s(path) > STALE_WRITE_S:   # younger: another process may be writing it now
                        _unlink(path)
                    continue
                if not path.name.endswith(SUFFIX):
                    continue
                try:
                    header, ids = _read_header(path)
                except (OSError, ValueError):
                    _unlink(path)
                    continue
                if header.get("identity") != self.identity or path.name != state_name(ids):
                    _unlink(path)
                    continue
                entries.append(StoredState(path, ids, path.stat().st_size))
        self._entries = entries

    def entries(self) -> list[StoredState]:
        with self._lock:
            return list(self._entries)

    def longest_prefix(self, ids: list[int]) -> StoredState | None:
        """The stored state covering the most of ``ids`` (its tokens start them, and some are left to compute)."""
        return longest_prefix(self.entries(), ids)

    def holds(self, ids: list[int]) -> bool:
        return any(e.ids == ids for e in self.entries())

    # ------------------------------------------------------------------ writing
    def save(self, ids: list[int], meta: dict, arrays: list[np.ndarray]) -> StoredState | None:
        """Write a state; None where it cannot fit the budget or the disk (nothing is written then). States of
        this identity whose tokens ``ids`` extends are removed: the conversation went on past them."""
        arrays = [np.ascontiguousarray(a) for a in arrays]
        ids_raw = _ids_bytes(ids)
        specs, offset = [], 0
        for a in arrays:
            specs.append({"dtype": a.dtype.str, "shape": list(a.shape), "offset": offset, "nbytes": int(a.nbytes)})
            offset += a.nbytes + _pad(a.nbytes)
        digest = xxhash.xxh3_128(ids_raw)
        for a in arrays:
            digest.update(memoryview(a).cast("B"))
        header = json.dumps({"version": 1, "identity": self.identity, "n_ids": len(ids), "meta": meta,
                             "arrays": specs, "digest": digest.hexdigest()}).encode()
        head_len = len(MAGIC) + 8 + len(header)
        total = head_len + _pad(head_len) + len(ids_raw) + _pad(len(ids_raw)) + offset
        with self._lock:     # the disk's room is claimed under the lock; the write itself runs outside it
            if not self._make_room(total):
                return None
        path = self.folder / state_name(ids)
        tmp = path.with_name(path.name + ".tmp")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(MAGIC + struct.pack("<Q", len(header)) + header + bytes(_pad(head_len)))
                f.write(ids_raw + bytes(_pad(len(ids_raw))))
                for a in arrays:
                    f.write(memoryview(a).cast("B"))
                    f.write(bytes(_pad(a.nbytes)))
        except OSError:
            _unlink(tmp)
            return None
        with self._lock:
            try:
                os.replace(tmp, path)
            except OSError:
                _unlink(tmp)
                return None
            entry = StoredState(path, list(ids), total)
            superseded = [e for e in self._entries if ids[:len(e.ids)] == e.ids]   # this state or its prefixes
            for e in superseded:
                if e.path != path:
                    _unlink(e.path)
            self._entries = [e for e in self._entries if e not in superseded] + [entry]
            return entry

    def _make_room(self, need: int) -> bool:
        """Remove the least recently used files under root (any identity) until ``need`` more bytes keep within
        the budget and leave the disk's reserve free; False (nothing removed) where that cannot be reached."""
        if need > self.budget_bytes:
            return False
        files = _state_files(self.root)
        used = sum(size for _path, size, _t in files)
        try:
            free = shutil.disk_usage(self.root if self.root.exists() else _existing_parent(self.root)).free
        except OSError:
            return False
        evict, freed = [], 0
        for path, size, _t in sorted(files, key=lambda f: f[2]):   # oldest use first
            if used - freed + need <= self.budget_bytes and free + freed - need >= self.free_reserve:
                break
            evict.append(path)
            freed += size
        if used - freed + need > self.budget_bytes or free + freed - need < self.free_reserve:
            return False
        for path in evict:
            _unlink(path)
        gone = set(evict)
        self._entries = [e for e in self._entries if e.path not in gone]
        return True

    def discard(self, entry: StoredState) -> None:
        with self._lock:
            _unlink(entry.path)
            self._entries = [e for e in self._entries if e is not entry]

    # ------------------------------------------------------------------ reading
    def load(self, entry: StoredState) -> tuple[dict, list[np.ndarray]] | None:
        """The state's metadata and arrays (read-only views of the file, mapped, not copied), or None where
        the file is gone or damaged (then it is removed). Reading it back marks it as recently used."""
        try:
            header, ids = _read_header(entry.path)
            data = np.memmap(entry.path, dtype=np.uint8, mode="r")
        except (OSError, ValueError):
            self.discard(entry)
            return None
        head_len = len(MAGIC) + 8 + int.from_bytes(data[8:16].tobytes(), "little")
        ids_at = head_len + _pad(head_len)
        arrays_at = ids_at + 4 * len(ids) + _pad(4 * len(ids))
        digest = xxhash.xxh3_128(data[ids_at:ids_at + 4 * len(ids)])
        arrays = []
        try:
            for spec in header["arrays"]:
                start = arrays_at + int(spec["offset"])
                raw = data[start:start + int(spec["nbytes"])]
                if raw.size != int(spec["nbytes"]):
                    raise ValueError("the file is shorter than its header says")
                digest.update(raw)
                arrays.append(raw.view(np.dtype(spec["dtype"])).reshape(spec["shape"]))
        except (KeyError, TypeError, ValueError):
            self.discard(entry)
            return None
        if ids != entry.ids or digest.hexdigest() != header.get("digest"):
            self.discard(entry)
            return None
        try:
            os.utime(entry.path)
        except OSError:
            pass
        return header.get("meta", {}), arrays


def usage(root: Path) -> tuple[int, int]:
    """(saved states, their bytes) under ``root``, every model's folder."""
    sizes = [size for path, size, _t in _state_files(Path(root)) if path.name.endswith(SUFFIX)]
    return len(sizes), sum(sizes)


def remove_all(root: Path) -> int:
    """Delete every saved state under ``root`` (all models' folders); the bytes freed."""
    freed = 0
    for path, size, _t in _state_files(Path(root)):
        if path.name.endswith((SUFFIX, ".tmp")):
            _unlink(path)
            freed += size
    if Path(root).is_dir():
        for folder in Path(root).iterdir():
            try:
                folder.rmdir()   # only when empty
            except OSError:
                pass
    return freed


def _read_header(path: Path) -> tuple[dict, list[int]]:
    with open(path, "rb") as f:
        head = f.read(len(MAGIC) + 8)
        if len(head) != len(MAGIC) + 8 or head[:len(MAGIC)] != MAGIC:
            raise ValueError(f"{path.name} is not a saved state")
        (n,) = struct.unpack("<Q", head[len(MAGIC):])
        if n > _MAX_HEADER:
            raise ValueError(f"{path.name}: header too long")
        raw = f.read(n)
        try:
            header = json.loads(raw)
            n_ids = int(header["n_ids"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path.name}: damaged header") from exc
        f.seek(len(MAGIC) + 8 + n + _pad(len(MAGIC) + 8 + n))
        ids_raw = f.read(4 * n_ids)
        if len(ids_raw) != 4 * n_ids:
            raise ValueError(f"{path.name}: truncated")
        return header, np.frombuffer(ids_raw, dtype="<i4").tolist()


def _state_files(root: Path) -> list[tuple[Path, int, float]]:
    out = []
    if root.is_dir():
        for folder in root.iterdir():
            if folder.is_dir():
                for path in folder.iterdir():
                    try:
                        st = path.stat()
                    except OSError:
                        continue
                    out.append((path, st.st_size, st.st_mtime))
    return out


def _age_s(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return 0.0


def _existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
