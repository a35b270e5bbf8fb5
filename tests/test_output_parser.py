"""Output parsing: channels, Qwen XML tool calls, independence from chunking, template round trip."""

from __future__ import annotations

import copy
import random
from pathlib import Path

import pytest

from engine.chat_template import render_chat
from engine.output_parser import (
    Delta,
    OutputParser,
    ParsedOutput,
    ToolCall,
    initial_state_for_prompt,
    parse_output,
    parse_tool_call_block,
)

FIXTURES = Path(__file__).parent / "fixtures"
TEMPLATE = (FIXTURES / "qwen3.6-chat-template.jinja").read_text(encoding="utf-8")
TEMPLATE_35 = (FIXTURES / "qwen3.5-chat-template.jinja").read_text(encoding="utf-8")

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "zip": {"type": "string"},
        "options": {"type": "object"}, "hourly": {"type": "boolean"}}}}},
    {"type": "function", "function": {"name": "run_shell", "parameters": {"type": "object", "properties": {
        "command": {"type": "string"}}}}},
]

# (name, initial state, output text, expected reasoning, expected content, expected tool calls)
OUTPUTS = [
    ("thinking_then_answer", "reasoning",
     "Let me think.\nTwo steps.\n</think>\n\nThe answer is 4.",
     "Let me think.\nTwo steps.", "The answer is 4.", []),
    ("no_thinking_plain", "content", "Hello <b>world</b> a<b, x </thinking> y", "",
     "Hello <b>world</b> a<b, x </thinking> y", []),
    ("thinking_tool_calls", "reasoning",
     "Need weather.\n</think>\n\nChecking now.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSão Paulo\n"
     "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=run_shell>\n"
     "<parameter=command>\nls -la </tmp> && echo '<think>'\n</parameter>\n</function>\n</tool_call>",
     "Need weather.", "Checking now.",
     [ToolCall("get_weather", {"city": "São Paulo", "days": 3}),
      ToolCall("run_shell", {"command": "ls -la </tmp> && echo '<think>'"})]),
    ("model_opens_think_itself", "content",
     "<think>\nhmm 🤔\n</think>\n\n答案是四。", "hmm 🤔", "答案是四。", []),
    ("unclosed_reasoning_cut_off", "reasoning", "still thinking about <tool_call> and <", "still thinking about <tool_call> and <", "", []),
    ("partial_tag_at_end", "content", "a < b and <tool_ca", "", "a < b and <tool_ca", []),
]


def _feed_chunks(initial_state, chunks, tools=TOOLS):
    parser = OutputParser(initial_state, tools)
    deltas: list[Delta] = []
    for chunk in chunks:
        deltas += parser.feed(chunk)
    deltas += parser.flush()
    return parser.finish(), deltas


def _check_deltas_agree(result: ParsedOutput, deltas: list[Delta]):
    assert "".join(d.text for d in deltas if d.channel == "reasoning") == result.reasoning
    assert "".join(d.text for d in deltas if d.channel == "content") == result.content
    assert [d.tool_call for d in deltas if d.channel == "tool_call"] == result.tool_calls
    assert all(d.text for d in deltas)


@pytest.mark.parametrize("name,state,text,reasoning,content,calls", OUTPUTS, ids=[o[0] for o in OUTPUTS])
def test_whole_output(name, state, text, reasoning, content, calls):
    result, deltas = _feed_chunks(state, [text])
    assert (result.reasoning, result.content, result.tool_calls) == (reasoning, content, calls)
    _check_deltas_agree(result, deltas)


@pytest.mark.parametrize("name,state,text,reasoning,content,calls", OUTPUTS, ids=[o[0] for o in OUTPUTS])
def test_result_independent_of_chunking(name, state, text, reasoning, content, calls):
    expected = (reasoning, content, calls)
    # Every single split point, one character at a time, and seeded random multi-way splits.
    chunkings = [[text[:i], text[i:]] for i in range(len(text) + 1)]
    chunkings.append(list(text))
    rng = random.Random(1234)
    for _ in range(200):
        cuts = sorted(rng.sample(range(len(text) + 1), k=min(len(text) + 1, rng.randint(2, 12))))
        chunkings.append([text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])])
    for chunks in chunkings:
        result, deltas = _feed_chunks(state, chunks)
        assert (result.reasoning, result.content, result.tool_calls) == expected, chunks
        _check_deltas_agree(result, deltas)


def test_every_pair_of_split_points_around_adjacent_tags():
    text = "r</think><tool_call><function=f></function></tool_call><think>x</think>y"
    expected = _feed_chunks("reasoning", [text])[0]
    assert expected == ParsedOutput("r\n\nx", "y", [ToolCall("f", {})])
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1):
            assert _feed_chunks("reasoning", [text[:i], text[i:j], text[j:]])[0] == expected


def test_text_is_streamed_early_not_held_to_the_end():
    parser = OutputParser("reasoning")
    assert parser.feed("Thinking hard") == [Delta("reasoning", "Thinking hard")]
    assert parser.feed(" now </thi") == [Delta("reasoning", " now")]  # "</thi" may be a tag, " " trailing
    assert parser.feed("nk>\n\nAns") == [Delta("content", "Ans")]
    assert parser.feed("wer.\n") == [Delta("content", "wer.")]
    assert parser.flush() == []
    assert parser.finish() == ParsedOutput("Thinking hard now", "Answer.", [])


@pytest.mark.parametrize(
    "prompt_kwargs,state",
    [({}, "reasoning"), ({"enable_thinking": False}, "content"),
     ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "run_shell"}}}, "tool_call")],
)
def test_initial_state_from_rendered_prompt(prompt_kwargs, state):
    prompt = render_chat(TEMPLATE, [{"role": "user", "content": "hi"}], **prompt_kwargs)
    assert initial_state_for_prompt(prompt) == state


def test_initial_state_without_generation_prompt_is_content():
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "<think>\nx\n</think>\n\nyo"}]
    assert initial_state_for_prompt(render_chat(TEMPLATE, messages, add_generation_prompt=False)) == "content"
    assert initial_state_for_prompt("plain completion prompt") == "content"


def test_forced_tool_call_continues_from_prompt():
    prompt = render_chat(TEMPLATE, [{"role": "user", "content": "list files"}], tools=TOOLS,
                         tool_choice={"type": "function", "function": {"name": "run_shell"}})
    parser = OutputParser.for_prompt(prompt, TOOLS)
    deltas = parser.feed("<parameter=command>\nls\n</parameter>\n</function>\n</tool_call>") + parser.flush()
    assert parser.finish() == ParsedOutput("", "", [ToolCall("run_shell", {"command": "ls"})])
    assert [d.channel for d in deltas] == ["tool_call"]


# Assistant turns to render with the template and parse back: (messages before, assistant turn, render kwargs)
ROUND_TRIPS = [
    ("thinking_content_and_calls",
     {"role": "assistant", "reasoning_content": "The user wants weather.\n\nCall the tool.",
      "content": "I'll look that up.",
      "tool_calls": [
          {"type": "function", "function": {"name": "get_weather", "arguments": {
              "city": "Zürich", "days": 2, "zip": "8001", "hourly": True,
              "options": {"units": ["c", "km/h"], "note": "<b>x</b>"}}}},
          {"type": "function", "function": {"name": "run_shell", "arguments": {
              "command": "cat <<EOF\n  indented\n\nEOF\n"}}}]},
     {}),
    ("thinking_off_call_only",
     {"role": "assistant", "content": "",
      "tool_calls": [{"type": "function", "function": {"name": "run_shell", "arguments": {"command": "true"}}}]},
     {"enable_thinking": False}),
    ("thinking_plain_answer",
     {"role": "assistant", "reasoning_content": "Simple.", "content": "Hello there!\n\n- a\n- b"}, {}),
]


@pytest.mark.parametrize("template", [TEMPLATE, TEMPLATE_35], ids=["qwen3.6", "qwen3.5"])
@pytest.mark.parametrize("name,assistant,kwargs", ROUND_TRIPS, ids=[r[0] for r in ROUND_TRIPS])
def test_round_trip_through_template(template, name, assistant, kwargs):
    history = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Weather in Zürich?"}]
    prompt = render_chat(template, history, tools=TOOLS, **kwargs)
    full = render_chat(template, history + [copy.deepcopy(assistant)], tools=TOOLS,
                       add_generation_prompt=False, **kwargs)
    # What the model would have generated after the prompt: the rest of the turn before <|im_end|>.
    assert full.startswith(prompt) and full.endswith("<|im_end|>\n")
    completion = full[len(prompt):-len("<|im_end|>\n")]

    expected_calls = [ToolCall(c["function"]["name"], c["function"]["arguments"])
                      for c in assistant.get("tool_calls", [])]
    for chunks in ([completion], list(completion)):
        parser = OutputParser.for_prompt(prompt, TOOLS)
        for chunk in chunks:
            parser.feed(chunk)
        result = parser.finish()
        assert result.tool_calls == expected_calls
        assert result.content == assistant["content"]
        if kwargs.get("enable_thinking", True):
            assert result.reasoning == assistant.get("reasoning_content", "")

    # And the parsed result renders back to the same turn.
    if expected_calls or result.content:
        again = {"role": "assistant", "content": result.content, "reasoning_content": result.reasoning,
                 "tool_calls": [c.to_openai() for c in result.tool_calls]}
        assert render_chat(template, history + [again], tools=TOOLS, add_generation_prompt=False, **kwargs) == full


def test_parameter_types_follow_the_schema():
    block = "\n<function=get_weather>\n<parameter=zip>\n8001\n</parameter>\n<parameter=days>\n8001\n</parameter>\n</function>\n"
    assert parse_tool_call_block(block, TOOLS) == ToolCall("get_weather", {"zip": "8001", "days": 8001})
    # Without a schema, JSON-looking values are taken as JSON data (the template writes non-strings as JSON).
    assert parse_tool_call_block(block) == ToolCall("get_weather", {"zip": 8001, "days": 8001})
    assert parse_tool_call_block("<function=f>\n<parameter=q>\n\"quoted\"\n</parameter>\n</function>") == \
        ToolCall("f", {"q": '"quoted"'})


def test_json_form_tool_call_is_accepted():
    text = 'ok\n<tool_call>\n{"name": "run_shell", "arguments": {"command": "pwd"}}\n</tool_call>'
    assert parse_output(text).tool_calls == [ToolCall("run_shell", {"command": "pwd"})]


def test_malformed_and_unfinished_calls_become_visible_content():
    malformed = parse_output("Try:\n<tool_call>\nnot a call\n</tool_call>")
    assert malformed.tool_calls == []
    assert malformed.content == "Try:\n\n<tool_call>\nnot a call\n</tool_call>"
    cut = parse_output("Calling.\n<tool_call>\n<function=run_shell>\n<parameter=command>\nrm")
    assert cut.tool_calls == []
    assert cut.content == "Calling.\n\n<tool_call>\n<function=run_shell>\n<parameter=command>\nrm"


def test_bad_use_is_refused():
    with pytest.raises(ValueError, match="initial_state"):
        OutputParser("thinking")  # type: ignore[arg-type]
    parser = OutputParser()
    parser.finish()
    with pytest.raises(RuntimeError, match="after finish"):
        parser.feed("x")


def test_to_openai_shape():
    call = ToolCall("f", {"a": "ü", "b": [1]})
    assert call.to_openai("call_1") == {"id": "call_1", "type": "function",
                                        "function": {"name": "f", "arguments": '{"a": "ü", "b": [1]}'}}
