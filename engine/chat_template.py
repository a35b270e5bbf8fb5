"""Render a checkpoint's own chat template into the prompt text, as transformers does.

The Jinja environment copies the one behind transformers' ``apply_chat_template``
(``transformers.utils.chat_template_utils``): an immutable sandbox with ``trim_blocks`` and
``lstrip_blocks``, the ``loopcontrols`` extension, a ``tojson`` filter that does not escape HTML
and keeps non-ASCII text, and the globals ``raise_exception`` and ``strftime_now``. On the same
inputs the output is byte-for-byte transformers' output (tests/test_chat_template.py checks this).

Additions, all for inputs transformers cannot render at all, so they change nothing it can:
- tool-call arguments given as a JSON string (the OpenAI wire format) are parsed into a dict
  before rendering, as vLLM does: both Qwen templates iterate over them as a mapping;
- a ``from_json`` filter (the Qwen3.6 template calls it for string arguments; transformers has none);
- a ``{% generation %}`` block tag that renders its body (transformers uses it to mark assistant
  tokens; the marking itself is training-only and not needed here).

No torch here: the GUI process renders prompts to count tokens.
"""

from __future__ import annotations

import functools
import json
import logging
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping, Sequence

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

log = logging.getLogger(__name__)

# The default template: the official Qwen3.6 template, shipped with the 27B checkpoints.
def _default_template_path() -> Path:
    from engine.paths import resources_dir

    try:
        return resources_dir() / "chat_template.jinja"
    except FileNotFoundError:
        return Path(__file__).resolve().parent.parent / "resources" / "chat_template.jinja"


# resources/ sits beside the packages in a source tree and inside engine/ in an installed wheel.
DEFAULT_TEMPLATE_PATH = _default_template_path()


class ChatTemplateError(ValueError):
    """The template could not be loaded or refused the messages (the message says why)."""


# ---- loading ------------------------------------------------------------------------------------
def load_default_chat_template() -> str:
    try:
        return DEFAULT_TEMPLATE_PATH.read_text(encoding="utf-8")
    except OSError as exc:
        raise ChatTemplateError(
            f"the default chat template {DEFAULT_TEMPLATE_PATH} is missing ({exc.strerror}); "
            "reinstall Monorail or pass a model folder that has its own chat_template.jinja"
        ) from exc


def load_chat_template(model_dir: str | Path | None = None) -> str:
    """The chat template a checkpoint ships, or Monorail's default (Qwen3.6) when it ships none.

    Looks in ``model_dir`` for ``chat_template.jinja`` (what transformers >= 4.43 saves), then for
    the ``chat_template`` entry of ``tokenizer_config.json`` (a string, or a list of
    ``{"name", "template"}`` of which the one named "default" is used, as transformers does).
    """
    if model_dir is None:
        return load_default_chat_template()
    folder = Path(model_dir)
    if not folder.is_dir():
        raise ChatTemplateError(f"model folder {folder} does not exist or is not a folder")

    jinja_file = folder / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")

    config_file = folder / "tokenizer_config.json"
    if config_file.is_file():
        try:
            config = json.loads(config_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ChatTemplateError(f"{config_file} is not valid JSON: {exc}") from exc
        template = config.get("chat_template") if isinstance(config, dict) else None
        if isinstance(template, str):
            return template
        if isinstance(template, list):
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            if isinstance(named.get("default"), str):
                return named["default"]
            raise ChatTemplateError(
                f"{config_file} lists chat templates {sorted(map(str, named))} but none named 'default'"
            )
        if template is not None:
            raise ChatTemplateError(f"{config_file}: chat_template must be a string or a list")

    log.warning("%s has no chat template; using Monorail's default (Qwen3.6) template", folder)
    return load_default_chat_template()


# ---- environment --------------------------------------------------------------------------------
def _raise_exception(message: str) -> None:
    # Templates call this to refuse a conversation; it surfaces as ChatTemplateError(message).
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    # Jinja's own tojson escapes <, >, & and ' for HTML; prompts need the plain JSON transformers writes.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _from_json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise jinja2.exceptions.TemplateError(f"tool-call arguments are not valid JSON: {exc}") from exc


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _GenerationBlock(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller: Any) -> str:
        return caller()


@functools.lru_cache(maxsize=16)
@functools.lru_cache(maxsize=8)
def compile_chat_template(template: str) -> jinja2.Template:
    """Compile once per template text (rendering a long chat must not re-parse the template)."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_GenerationBlock, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _tojson
    env.filters["from_json"] = _from_json
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(template)
    except jinja2.exceptions.TemplateSyntaxError as exc:
        raise ChatTemplateError(f"chat template syntax error on line {exc.lineno}: {exc.message}") from exc


# ---- rendering ----------------------------------------------------------------------------------
def _check_messages(messages: Sequence[Mapping[str, Any]]) -> None:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise ChatTemplateError("messages must be a list of {'role': ..., 'content': ...} dicts")
    if not messages:
        raise ChatTemplateError("no messages to render: the conversation is empty")
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or "role" not in message:
            raise ChatTemplateError(f"message {index} must be a dict with a 'role' (got {message!r:.80})")


def _with_parsed_tool_arguments(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Messages whose tool-call arguments are dicts; JSON-string arguments are parsed (copies only
    the messages it changes)."""
    result: list[Mapping[str, Any]] = []
    for m_index, message in enumerate(messages):
        calls = message.get("tool_calls")
        if not isinstance(calls, list) or not any(_string_arguments(c) for c in calls):
            result.append(message)
            continue
        new_calls = []
        for c_index, call in enumerate(calls):
            if not _string_arguments(call):
                new_calls.append(call)
                continue
            has_function = "function" in call
            function = dict(call["function"] if has_function else call)
            try:
                function["arguments"] = json.loads(function["arguments"])
            except json.JSONDecodeError as exc:
                raise ChatTemplateError(
                    f"message {m_index}, tool call {c_index}: arguments are not valid JSON ({exc})"
                ) from exc
            new_calls.append({**call, "function": function} if has_function else function)
        result.append({**message, "tool_calls": new_calls})
    return result


def _string_arguments(call: Any) -> bool:
    if not isinstance(call, Mapping):
        return False
    function = call.get("function", call)
    return isinstance(function, Mapping) and isinstance(function.get("arguments"), str)


def render_chat(
    template: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    enable_thinking: bool | None = True,
    preserve_thinking: bool | None = False,
    **template_kwargs: Any,
) -> str:
    """The prompt text for ``messages`` (OpenAI-style dicts) under ``template``.

    Content is a string or a list of parts: ``{"type": "text", "text": ...}`` and
    ``{"type": "image", ...}`` (any payload key, e.g. "image", is ignored by the template, which
    writes one ``<|vision_start|><|image_pad|><|vision_end|>`` per image). Assistant turns may carry
    ``tool_calls`` and ``reasoning_content``; tool results are ``{"role": "tool", "content": ...}``.

    enable_thinking / preserve_thinking are passed to the template as given; None leaves the
    variable undefined (the Qwen3.6 template then honours a ``reasoning_effort`` kwarg). Extra
    keyword arguments (``tool_choice``, ``add_vision_id``, ...) go to the template unchanged.
    Template refusals and rendering failures raise ChatTemplateError with the template's message.
    """
    _check_messages(messages)
    compiled = compile_chat_template(template)
    variables: dict[str, Any] = dict(template_kwargs)
    if enable_thinking is not None:
        variables["enable_thinking"] = enable_thinking
    if preserve_thinking is not None:
        variables["preserve_thinking"] = preserve_thinking
    try:
        return compiled.render(
            messages=_with_parsed_tool_arguments(messages),
            tools=list(tools) if tools is not None else None,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **variables,
        )
    except jinja2.exceptions.TemplateError as exc:
        raise ChatTemplateError(f"the chat template refused this conversation: {exc}") from exc
    except (TypeError, AttributeError, KeyError, ValueError) as exc:
        # A message shaped in a way the template did not expect (e.g. content of the wrong type).
        raise ChatTemplateError(f"the chat template failed on these messages: {type(exc).__name__}: {exc}") from exc
