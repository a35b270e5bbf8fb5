"""Markdown -> the HTML subset QTextBrowser renders, with highlighted code blocks and copy links.

markdown-it-py parses (CommonMark + tables + strikethrough, raw HTML disabled so model output
cannot inject markup); Pygments colours code with inline styles, because QTextBrowser ignores
CSS classes from external sheets. Each code block gets a header row with its language and a
"Copy" link whose href is ``copy:N``; the view maps N back to the block's source text.

Streaming re-renders the whole message: an unclosed ``` fence is treated as running to the end,
so a half-written code block is already highlighted.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import TextLexer, get_lexer_by_name
from pygments.util import ClassNotFound

COPY_SCHEME = "copy"


@dataclass
class Rendered:
    html: str
    code_blocks: list[str] = field(default_factory=list)   # source of each block, index = N in copy:N


def _lexer(lang: str):
    try:
        return get_lexer_by_name(lang) if lang else TextLexer()
    except ClassNotFound:
        return TextLexer()


class MarkdownRenderer:
    def __init__(self, dark: bool = False, copy_label: str = "Copy") -> None:
        self.dark = dark
        self.copy_label = copy_label
        self._formatter = HtmlFormatter(noclasses=True, nowrap=True, style="monokai" if dark else "default")
        self._md = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(["table", "strikethrough"])
        # markdown-it binds rule functions to its renderer, so hand it a plain function.
        fence = lambda _renderer, tokens, idx, options, env: self._fence(tokens[idx])  # noqa: E731
        self._md.add_render_rule("fence", fence)
        self._md.add_render_rule("code_block", fence)
        # QTextBrowser draws no table borders from CSS; use the HTML attributes it does honour.
        self._md.add_render_rule("table_open", lambda *_a: '<table border="1" cellspacing="0" cellpadding="4" '
                                                            'style="border-collapse: collapse; margin: 6px 0;">')
        self._blocks: list[str] = []

    def _fence(self, token) -> str:
        lang = token.info.strip().split(" ")[0] if token.info else ""
        source = token.content
        n = len(self._blocks)
        self._blocks.append(source)
        code = highlight(source, _lexer(lang), self._formatter).rstrip("\n")
        bg, head, fg = ("#272822", "#3a3b34", "#f8f8f2") if self.dark else ("#f6f8fa", "#e6e9ed", "#24292f")
        label = html.escape(lang or "text")
        return (f'<table width="100%" cellspacing="0" cellpadding="6" bgcolor="{bg}" style="margin: 6px 0;">'
                f'<tr><td bgcolor="{head}"><span style="color:{fg}; font-size: small;">{label}</span></td>'
                f'<td bgcolor="{head}" align="right"><a href="{COPY_SCHEME}:{n}" style="font-size: small;">'
                f'{html.escape(self.copy_label)}</a></td></tr>'
                f'<tr><td colspan="2"><pre style="color:{fg}; font-family: monospace; margin: 0;">{code}</pre>'
                f'</td></tr></table>')

    def render(self, text: str) -> Rendered:
        self._blocks = []
        body = self._md.render(text)
        return Rendered(body, list(self._blocks))


def plain_html(text: str) -> str:
    """User messages are shown as typed: escaped, line breaks kept."""
    return html.escape(text).replace("\n", "<br>")
