"""The reply's Markdown: how the chunker's pieces are joined back into Markdown blocks,
and how the joined reply is rendered into a QTextDocument for a bubble (raw HTML shown as
text, the "*" of "2*3" kept, a muted suffix)."""

from __future__ import annotations

import re

from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor, QTextDocument

from app.core import theme

# Raw HTML in a reply is shown as text ("use a <div>"), not interpreted.
_MARKDOWN = (QTextDocument.MarkdownFeature.MarkdownDialectGitHub
             | QTextDocument.MarkdownFeature.MarkdownNoHTML)
# The line kinds that decide how two pieces of a reply are joined (see join_markdown).
_LIST_LINE = re.compile(r"[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]")
_QUOTE_LINE = re.compile(r"[ \t]*>")
_TABLE_LINE = re.compile(r"[ \t]*\|")
_HEADING_LINE = re.compile(r"[ \t]*#{1,6}(?:[ \t]|$)")
_FENCE_LINE = re.compile(r"[ \t]*(?:`{3}|~{3})")
_CODE = re.compile(r"^[ \t]*(`{3,}|~{3,})[^\n]*\n.*?(?:^[ \t]*\1[`~]*[ \t]*$|\Z)|(`+).*?\2",
                   re.MULTILINE | re.DOTALL)
# A "*" between two word characters is "2*3", not emphasis: CommonMark would pair the
# ones in "2*3 and 4*5" into italics and drop them from view.
_INTRAWORD_STAR = re.compile(r"(?<=\w)\*(?=\w)")
_BODY_STYLE = re.compile(r"<body[^>]*>")


def _line_kind(line: str) -> str | None:
    for kind, pattern in (("list", _LIST_LINE), ("quote", _QUOTE_LINE), ("table", _TABLE_LINE),
                          ("heading", _HEADING_LINE), ("fence", _FENCE_LINE)):
        if pattern.match(line):
            return kind
    return None


def join_markdown(source: str, piece: str) -> str:
    """``source`` with the reply piece ``piece`` added, keeping the Markdown's blocks.

    The pieces come trimmed from the chunker, which cuts at sentence ends and line breaks
    alike; a single space would run a list into one paragraph. A piece that opens a block
    (list item, quote, table row, heading, code fence) starts a new line, a new paragraph
    when the block kind changes; anything after a heading or a code block starts a new
    paragraph; other pieces continue the line (a paragraph right after a list therefore
    renders as part of the last item: the pieces do not tell the two apart).
    """
    if not source:
        return piece
    before = _line_kind(source.rsplit("\n", 1)[-1])
    after = _line_kind(piece.split("\n", 1)[0])
    if before in ("heading", "fence"):
        sep = "\n\n"
    elif after is None:
        sep = " "
    elif after == before and after != "heading":
        sep = "\n"
    else:
        sep = "\n\n"
    return f"{source}{sep}{piece}"


def _protect_stars(markdown: str) -> str:
    """Escape the "*" of "2*3" outside code, where a backslash would show."""
    out, last = [], 0
    for code in _CODE.finditer(markdown):
        out.append(_INTRAWORD_STAR.sub(r"\\*", markdown[last:code.start()]))
        out.append(code.group(0))
        last = code.end()
    out.append(_INTRAWORD_STAR.sub(r"\\*", markdown[last:]))
    return "".join(out)


def render_markdown(document: QTextDocument, markdown: str, suffix: str = "") -> None:
    """Fill ``document`` with the reply ``markdown`` rendered, then ``suffix`` in muted text."""
    document.setMarkdown(_protect_stars(markdown), _MARKDOWN)
    if suffix:
        cursor = QTextCursor(document)
        cursor.movePosition(QTextCursor.MoveOperation.End)
        muted = QTextCharFormat()
        muted.setForeground(QColor(theme.current().muted))
        cursor.insertText(suffix, muted)


def label_html(document: QTextDocument) -> str:
    """The document's HTML for a QLabel bubble."""
    # The body's font would override the bubble's stylesheet font: drop it, keep the rest.
    return _BODY_STYLE.sub("<body>", document.toHtml(), count=1)
