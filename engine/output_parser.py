"""Split streamed model output into reasoning, content and Qwen XML tool calls.

What the Qwen3.5/3.6 models write (and what their chat template renders for past turns):

    reasoning text
    </think>

    answer text

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

``<think>`` is usually already in the prompt (the template's generation prompt ends with
``<think>\\n``), so the output starts inside reasoning; with thinking off the prompt ends with an
empty ``<think>\\n\\n</think>\\n\\n`` and the output starts in content. ``OutputParser.for_prompt``
works this out from the rendered prompt.

Text is emitted as soon as it cannot be part of a tag, so a tag split across chunks at any
character is still recognised; the result does not depend on how the text was chunked. Each run of
reasoning or content is stripped of leading and trailing whitespace (as the template strips them
when it renders the turn back), and runs of one channel are joined by a blank line. The caller
feeds decoded text without the end-of-turn token (<|im_end|>): stopping is the sampler's job.

No torch here.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence

Channel = Literal["reasoning", "content", "tool_call"]
ParserState = Literal["reasoning", "content", "tool_call"]

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
TOOL_OPEN = "<tool_call>"
TOOL_CLOSE = "</tool_call>"
ASSISTANT_TURN = "<|im_start|>assistant"
TURN_END = "<|im_end|>"

# Tags each state looks for. In reasoning a stray <think> is dropped and <tool_call> is plain text
# (tool calls are only honoured in the answer, as vLLM's Qwen parsers do).
_TAGS: dict[str, tuple[str, ...]] = {
    "reasoning": (THINK_CLOSE, THINK_OPEN),
    "content": (TOOL_OPEN, THINK_OPEN, THINK_CLOSE),
    "tool_call": (TOOL_CLOSE,),
}
_SEGMENT_SEPARATOR = "\n\n"

_FUNCTION_RE = re.compile(r"^\s*<function=([^>\n]+)>(.*?)</function>\s*$", re.DOTALL)
_FUNCTION_OPEN_RE = re.compile(r"^\s*<function=([^>\n]+)>")
_PARAMETER_RE = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]

    def to_openai(self, call_id: str | None = None) -> dict[str, Any]:
        """OpenAI chat-completions shape (arguments as a JSON string), usable in a later prompt."""
        call: dict[str, Any] = {
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)},
        }
        if call_id is not None:
            call["id"] = call_id
        return call


@dataclass(frozen=True)
class Delta:
    """A piece of output on one channel; channel "tool_call" carries one whole parsed call."""

    channel: Channel
    text: str
    tool_call: ToolCall | None = None


@dataclass
class ParsedOutput:
    reasoning: str = ""
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)


# ---- tool-call blocks ---------------------------------------------------------------------------
def _parameter_types(tools: Sequence[Mapping[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """function name -> {parameter name: JSON-schema type} from OpenAI-style tool definitions."""
    table: dict[str, dict[str, Any]] = {}
    for tool in tools or ():
        function = tool.get("function", tool) if isinstance(tool, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            continue
        properties = (function.get("parameters") or {}).get("properties") or {}
        table[function["name"]] = {
            name: spec.get("type") for name, spec in properties.items() if isinstance(spec, Mapping)
        }
    return table


def _convert_value(raw: str, schema_type: Any) -> Any:
    """A parameter value back into JSON data.

    The template writes strings verbatim and everything else as JSON (Qwen3.5's writes numbers and
    booleans with Python's ``str``), so without a schema a value
    that parses as JSON (and not as a JSON string) is taken as that data: "3" becomes 3. A schema
    type of "string" keeps the text as it is; that is the only way to tell "3" the string apart.
    """
    if schema_type == "string":
        return raw
    if schema_type == "boolean" and raw.strip() in ("True", "False"):
        return raw.strip() == "True"  # the Qwen3.5 template writes Python's spelling of booleans
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    return raw if isinstance(value, str) else value


def parse_tool_call_block(block: str, tools: Sequence[Mapping[str, Any]] | None = None) -> ToolCall | None:
    """The call inside one ``<tool_call>...</tool_call>`` (tags excluded); None if malformed.

    Accepts the Qwen3.5/3.6 XML form and, for older checkpoints, the JSON form
    ``{"name": ..., "arguments": {...}}``.
    """
    match = _FUNCTION_RE.match(block)
    if match:
        name = match.group(1).strip()
        types = _parameter_types(tools).get(name, {})
        arguments: dict[str, Any] = {}
        for param_match in _PARAMETER_RE.finditer(match.group(2)):
            key = param_match.group(1).strip()
            raw = param_match.group(2)
            # The template writes "<parameter=k>\n" + value + "\n</parameter>".
            if raw.startswith("\n"):
                raw = raw[1:]
            if raw.endswith("\n"):
                raw = raw[:-1]
            arguments[key] = _convert_value(raw, types.get(key))
        return ToolCall(name, arguments)
    try:
        data = json.loads(block)
    except ValueError:
        return None
    if isinstance(data, dict) and isinstance(data.get("name"), str):
        arguments = data.get("arguments", data.get("parameters", {}))
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                return None
        if isinstance(arguments, dict):
            return ToolCall(data["name"], arguments)
    return None


# ---- streaming parser ---------------------------------------------------------------------------
class _TextChannel:
    """One text channel: strips each run, joins runs with a blank line, holds trailing whitespace."""

    def __init__(self, name: Channel) -> None:
        self.name = name
        self.text = ""  # everything emitted so far
        self._in_run = False  # the current run has emitted non-whitespace
        self._held = ""  # trailing whitespace not yet known to be interior

    def add(self, piece: str) -> str:
        if not self._in_run:
            piece = piece.lstrip()
            if not piece:
                return ""
            self._in_run = True
            if self.text:
                piece = _SEGMENT_SEPARATOR + piece
        piece = self._held + piece
        body = piece.rstrip()
        self._held = piece[len(body):]
        self.text += body
        return body

    def end_run(self) -> None:
        self._in_run = False
        self._held = ""

    def reset(self) -> None:
        self.text = ""
        self.end_run()


class OutputParser:
    """Incremental parser: ``feed`` text as it is decoded, then ``flush`` (last deltas) and ``finish``."""

    def __init__(self, initial_state: ParserState = "content",
                 tools: Sequence[Mapping[str, Any]] | None = None) -> None:
        if initial_state not in _TAGS:
            raise ValueError(f"initial_state must be one of {sorted(_TAGS)}, got {initial_state!r}")
        self._state: ParserState = initial_state
        self._tools = list(tools) if tools else None
        self._pending = ""  # text that may still be the start of a tag
        self._channels = {"reasoning": _TextChannel("reasoning"), "content": _TextChannel("content")}
        self._tool_block = ""  # raw text of the tool call being read
        self._tool_calls: list[ToolCall] = []
        self._finished = False

    @classmethod
    def for_prompt(cls, prompt: str, tools: Sequence[Mapping[str, Any]] | None = None) -> "OutputParser":
        """A parser in the state the rendered prompt leaves the model in.

        The text after the last ``<|im_start|>assistant`` (the generation prompt: "<think>\\n",
        "<think>\\n\\n</think>\\n\\n", or a forced "<tool_call>\\n<function=f>\\n") is fed first and
        its output discarded, so the model's output continues from exactly there.
        """
        parser = cls("content", tools)
        start = prompt.rfind(ASSISTANT_TURN)
        if start >= 0:
            tail = prompt[start + len(ASSISTANT_TURN):]
            if TURN_END not in tail:  # a finished assistant turn leaves nothing open
                parser.feed(tail.removeprefix("\n"))
        for channel in parser._channels.values():
            channel.text = ""
        parser._tool_calls.clear()
        return parser

    @property
    def state(self) -> ParserState:
        return self._state

    def feed(self, text: str) -> list[Delta]:
        if self._finished:
            raise RuntimeError("OutputParser.feed() after finish(); make a new parser per response")
        self._pending += text
        deltas: list[Delta] = []
        while self._pending:
            tags = _TAGS[self._state]
            index, tag = _first_tag(self._pending, tags)
            if tag is None:
                keep = _partial_tag_length(self._pending, tags)
                ready = self._pending[: len(self._pending) - keep]
                self._pending = self._pending[len(ready):]
                self._take_text(ready, deltas)
                break
            self._take_text(self._pending[:index], deltas)
            self._pending = self._pending[index + len(tag):]
            self._take_tag(tag, deltas)
        return _coalesce(deltas)

    def flush(self) -> list[Delta]:
        """Ends the stream and returns the last deltas (text that was held back as a possible tag).

        A tool call that never closed (output cut by max_tokens) is not executed: its raw text goes
        to content so the user sees it.
        """
        if self._finished:
            return []
        deltas: list[Delta] = []
        self._take_text(self._pending, deltas)
        self._pending = ""
        if self._state == "tool_call":
            self._emit_raw_tool_block(self._tool_block, closed=False, deltas=deltas)
            self._tool_block = ""
        self._finished = True
        return _coalesce(deltas)

    def finish(self) -> ParsedOutput:
        """The whole output (calls ``flush`` first if the caller has not)."""
        self.flush()
        return ParsedOutput(
            reasoning=self._channels["reasoning"].text,
            content=self._channels["content"].text,
            tool_calls=list(self._tool_calls),
        )

    # ---- internals ----------------------------------------------------------------------------
    def _take_text(self, text: str, deltas: list[Delta]) -> None:
        if not text:
            return
        if self._state == "tool_call":
            self._tool_block += text
            return
        emitted = self._channels[self._state].add(text)
        if emitted:
            deltas.append(Delta(self._state, emitted))

    def _take_tag(self, tag: str, deltas: list[Delta]) -> None:
        if self._state == "reasoning" and tag == THINK_CLOSE:
            self._switch("content")
        elif self._state == "content" and tag == THINK_OPEN:
            self._switch("reasoning")
        elif self._state == "content" and tag == TOOL_OPEN:
            self._switch("tool_call")
        elif self._state == "tool_call" and tag == TOOL_CLOSE:
            call = parse_tool_call_block(self._tool_block, self._tools)
            if call is not None:
                self._tool_calls.append(call)
                deltas.append(Delta("tool_call", TOOL_OPEN + self._tool_block + TOOL_CLOSE, call))
            else:
                self._emit_raw_tool_block(self._tool_block, closed=True, deltas=deltas)
            self._tool_block = ""
            self._switch("content")
        # Any other tag in a state that does not expect it (a second <think>, a stray </think>) is
        # dropped: it carries no text.

    def _emit_raw_tool_block(self, block: str, *, closed: bool, deltas: list[Delta]) -> None:
        # A malformed or unfinished call is shown to the user as text rather than lost.
        content = self._channels["content"]
        content.end_run()
        emitted = content.add(TOOL_OPEN + block + (TOOL_CLOSE if closed else ""))
        if emitted:
            deltas.append(Delta("content", emitted))

    def _switch(self, state: ParserState) -> None:
        for channel in self._channels.values():
            channel.end_run()
        self._state = state


def _first_tag(text: str, tags: Sequence[str]) -> tuple[int, str | None]:
    best_index, best_tag = len(text), None
    for tag in tags:
        index = text.find(tag)
        if 0 <= index < best_index:
            best_index, best_tag = index, tag
    return best_index, best_tag


def _partial_tag_length(text: str, tags: Sequence[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of one of ``tags``."""
    longest = 0
    for tag in tags:
        for length in range(min(len(tag) - 1, len(text)), longest, -1):
            if text.endswith(tag[:length]):
                longest = length
                break
    return longest


def _coalesce(deltas: list[Delta]) -> list[Delta]:
    merged: list[Delta] = []
    for delta in deltas:
        if merged and delta.tool_call is None and merged[-1].tool_call is None and merged[-1].channel == delta.channel:
            merged[-1] = Delta(delta.channel, merged[-1].text + delta.text)
        else:
            merged.append(delta)
    return merged


def initial_state_for_prompt(prompt: str) -> ParserState:
    """Where the model's output starts: "reasoning" if the prompt left <think> open, else "content"
    (or "tool_call" when the prompt forced a tool call)."""
    return OutputParser.for_prompt(prompt).state


def parse_output(text: str, initial_state: ParserState = "content",
                 tools: Sequence[Mapping[str, Any]] | None = None) -> ParsedOutput:
    """One-shot parse of a whole output."""
    parser = OutputParser(initial_state, tools)
    parser.feed(text)
    return parser.finish()
