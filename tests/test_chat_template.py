"""Chat template rendering against transformers' own renderer on the official Qwen templates.

Oracle: ``transformers.utils.chat_template_utils.render_jinja_template``, the function under
``apply_chat_template`` that needs no tokenizer files. Our output must equal it byte for byte.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from engine.chat_template import (
    DEFAULT_TEMPLATE_PATH,
    ChatTemplateError,
    load_chat_template,
    render_chat,
)

FIXTURES = Path(__file__).parent / "fixtures"
TEMPLATES = {
    "qwen3.5": (FIXTURES / "qwen3.5-chat-template.jinja").read_text(encoding="utf-8"),
    "qwen3.6": (FIXTURES / "qwen3.6-chat-template.jinja").read_text(encoding="utf-8"),
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city — «with» <unicode> & symbols",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "城市"},
                "days": {"type": "integer"},
                "units": {"type": "string", "enum": ["c", "f"]},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"},
                                                         "filters": {"type": "object"}}},
    },
}

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


def _tool_call(name, arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


TOOL_CONVERSATION = [
    SYSTEM,
    {"role": "user", "content": "Weather in Paris and Berlin? Also search news."},
    {
        "role": "assistant",
        "reasoning_content": "I should call the tools.",
        "content": "Let me check.",
        "tool_calls": [
            _tool_call("get_weather", {"city": "Paris", "days": 3, "units": "c"}),
            _tool_call("get_weather", {"city": "Berlin"}),
            _tool_call("search", {"query": "news\nmultiline", "filters": {"lang": ["en", "fr"], "recent": True}}),
        ],
    },
    {"role": "tool", "content": '{"temp": 21}'},
    {"role": "tool", "content": '{"temp": 17}'},
    {"role": "tool", "content": "headline: 新闻"},
    {"role": "assistant", "content": "<think>\nCombine.\n</think>\n\nParis 21°C, Berlin 17°C."},
    {"role": "user", "content": "Thanks! And tomorrow?"},
]

MULTI_TURN = [
    SYSTEM,
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "<think>\nEasy: 4.\n</think>\n\n2+2 = 4."},
    {"role": "user", "content": "And 3+3?"},
    {"role": "assistant", "reasoning_content": "Six.", "content": "3+3 = 6."},
    {"role": "user", "content": "Now 4+4?"},
]

IMAGE_CONVERSATION = [
    {"role": "system", "content": [{"type": "text", "text": "Describe images precisely."}]},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "Compare these:"},
            {"type": "image", "image": "file:///tmp/a.png"},
            {"type": "image"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            {"type": "text", "text": "Which is larger?"},
        ],
    },
    {"role": "assistant", "content": "The first."},
    {"role": "user", "content": [{"type": "image", "image": "x"}, {"type": "text", "text": "And this one?"}]},
]

# (name, messages, render keyword arguments)
CASES = [
    ("user_only_thinking", [{"role": "user", "content": "Hello!"}], {}),
    ("system_user_thinking_off", [SYSTEM, {"role": "user", "content": "Hi"}], {"enable_thinking": False}),
    ("no_generation_prompt", MULTI_TURN[:3], {"add_generation_prompt": False}),
    ("multi_turn_thinking", MULTI_TURN, {}),
    ("multi_turn_thinking_off", MULTI_TURN, {"enable_thinking": False}),
    ("multi_turn_preserve_thinking", MULTI_TURN, {"preserve_thinking": True}),
    ("tools_and_tool_turns", TOOL_CONVERSATION, {"tools": [WEATHER_TOOL, SEARCH_TOOL]}),
    ("tools_thinking_off", TOOL_CONVERSATION, {"tools": [WEATHER_TOOL], "enable_thinking": False}),
    ("tools_preserve_thinking", TOOL_CONVERSATION, {"tools": [WEATHER_TOOL, SEARCH_TOOL], "preserve_thinking": True}),
    ("tools_no_system", [{"role": "user", "content": "hi"}], {"tools": [WEATHER_TOOL]}),
    ("tool_turn_last", TOOL_CONVERSATION[:4], {"tools": [WEATHER_TOOL, SEARCH_TOOL]}),
    ("images", IMAGE_CONVERSATION, {}),
    ("images_with_vision_ids", IMAGE_CONVERSATION, {"add_vision_id": True}),
    ("forced_tool_choice", [{"role": "user", "content": "weather?"}],
     {"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}),
    ("thinking_undefined_reasoning_effort_low", [{"role": "user", "content": "hi"}],
     {"enable_thinking": None, "reasoning_effort": "low"}),
]


def _transformers_render(template, messages, *, tools=None, add_generation_prompt=True,
                         enable_thinking=True, preserve_thinking=False, **kwargs):
    from transformers.utils.chat_template_utils import render_jinja_template

    # Pass the same template variables our render_chat passes (None leaves a variable undefined).
    if enable_thinking is not None:
        kwargs["enable_thinking"] = enable_thinking
    if preserve_thinking is not None:
        kwargs["preserve_thinking"] = preserve_thinking
    rendered, _ = render_jinja_template(
        [copy.deepcopy(messages)], tools=tools, chat_template=template,
        add_generation_prompt=add_generation_prompt, **kwargs,
    )
    return rendered[0]


@pytest.mark.parametrize("template_name", sorted(TEMPLATES))
@pytest.mark.parametrize("name,messages,kwargs", CASES, ids=[c[0] for c in CASES])
def test_matches_transformers_byte_for_byte(template_name, name, messages, kwargs):
    template = TEMPLATES[template_name]
    ours = render_chat(template, copy.deepcopy(messages), **kwargs)
    theirs = _transformers_render(template, messages, **kwargs)
    assert ours == theirs


def test_rendered_prompt_has_the_expected_shape():
    # Spot checks that the oracle comparison is about real content, not two empty strings.
    t = TEMPLATES["qwen3.6"]
    prompt = render_chat(t, [SYSTEM, {"role": "user", "content": "Hi"}])
    assert prompt == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                      "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n")
    off = render_chat(t, [{"role": "user", "content": "Hi"}], enable_thinking=False)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    images = render_chat(t, IMAGE_CONVERSATION)
    assert images.count("<|vision_start|><|image_pad|><|vision_end|>") == 4
    tools = render_chat(t, TOOL_CONVERSATION, tools=[WEATHER_TOOL])
    assert "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n" in tools
    assert '"description": "城市"' in tools  # tojson keeps non-ASCII and does not HTML-escape
    assert "«with» <unicode> & symbols" in tools


def test_preserve_thinking_keeps_old_reasoning_in_qwen36():
    t = TEMPLATES["qwen3.6"]
    dropped = render_chat(t, MULTI_TURN)
    kept = render_chat(t, MULTI_TURN, preserve_thinking=True)
    assert "Easy: 4." not in dropped and "Easy: 4." in kept
    assert "<think>\nSix.\n</think>\n\n3+3 = 6." in kept


@pytest.mark.parametrize("template_name", sorted(TEMPLATES))
def test_string_arguments_render_like_dict_arguments(template_name):
    # The OpenAI wire format carries arguments as a JSON string. transformers fails on it with both
    # templates; we render it as the equivalent dict, which transformers does render.
    t = TEMPLATES[template_name]
    as_dicts = copy.deepcopy(TOOL_CONVERSATION)
    as_strings = copy.deepcopy(TOOL_CONVERSATION)
    for call in as_strings[2]["tool_calls"]:
        call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
    before = copy.deepcopy(as_strings)
    assert render_chat(t, as_strings, tools=[WEATHER_TOOL]) == _transformers_render(t, as_dicts, tools=[WEATHER_TOOL])
    assert as_strings == before  # the caller's messages are not modified


@pytest.mark.parametrize(
    "messages,match",
    [
        ([], "empty"),
        ([{"role": "system", "content": "only a system prompt"}], "No user query found"),
        ([{"role": "system", "content": [{"type": "image"}]}, {"role": "user", "content": "x"}],
         "System message cannot contain images"),
        ([{"role": "user", "content": "a"}, {"role": "system", "content": "late"}], "System message must be at the beginning"),
        ([{"role": "wizard", "content": "x"}, {"role": "user", "content": "a"}], "Unexpected message role"),
        ([{"content": "no role"}], "must be a dict with a 'role'"),
        ([{"role": "user", "content": 42}], "Unexpected content type"),
        ([{"role": "user", "content": "x"}, {"role": "assistant", "content": "",
          "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{bad"}}]}],
         "message 1, tool call 0: arguments are not valid JSON"),
    ],
)
def test_refusals_become_chat_template_errors(messages, match):
    with pytest.raises(ChatTemplateError, match=match):
        render_chat(TEMPLATES["qwen3.6"], messages)


def test_template_errors_match_transformers_refusals():
    import jinja2

    bad = [{"role": "system", "content": [{"type": "image"}]}, {"role": "user", "content": "x"}]
    with pytest.raises(jinja2.exceptions.TemplateError, match="System message cannot contain images"):
        _transformers_render(TEMPLATES["qwen3.6"], bad)


def test_syntax_error_is_reported_with_line():
    with pytest.raises(ChatTemplateError, match="syntax error on line 2"):
        render_chat("{{ messages }}\n{% if %}", [{"role": "user", "content": "x"}])


def test_sandbox_blocks_unsafe_access():
    evil = "{{ messages.__class__.__mro__[1].__subclasses__() }}"
    with pytest.raises(ChatTemplateError):
        render_chat(evil, [{"role": "user", "content": "x"}])


def test_strftime_now_and_loopcontrols_available():
    template = "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m.content }}{% endfor %}|{{ strftime_now('%Y') }}"
    out = render_chat(template, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    head, year = out.split("|")
    assert head == "a" and year.isdigit() and len(year) == 4


def test_load_default_template_is_the_official_qwen36():
    assert load_chat_template() == TEMPLATES["qwen3.6"]
    assert DEFAULT_TEMPLATE_PATH.is_file()


def test_load_from_model_folder(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "from-config"}))
    assert load_chat_template(tmp_path) == "from-config"
    # chat_template.jinja wins over tokenizer_config.json (transformers saves it separately).
    (tmp_path / "chat_template.jinja").write_text("from-jinja")
    assert load_chat_template(tmp_path) == "from-jinja"


def test_load_named_templates_and_fallbacks(tmp_path):
    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({"chat_template": [{"name": "tool_use", "template": "T"},
                                                    {"name": "default", "template": "D"}]}))
    assert load_chat_template(tmp_path) == "D"
    config.write_text(json.dumps({"chat_template": [{"name": "tool_use", "template": "T"}]}))
    with pytest.raises(ChatTemplateError, match="none named 'default'"):
        load_chat_template(tmp_path)
    config.write_text("{not json")
    with pytest.raises(ChatTemplateError, match="not valid JSON"):
        load_chat_template(tmp_path)
    config.write_text(json.dumps({"model_max_length": 10}))
    assert load_chat_template(tmp_path) == TEMPLATES["qwen3.6"]
    with pytest.raises(ChatTemplateError, match="does not exist"):
        load_chat_template(tmp_path / "missing")
