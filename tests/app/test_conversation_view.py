"""The conversation view shows the LLM's reply as written, its Markdown rendered, and the
user's words as plain text. (tests/conftest.py makes Qt offscreen.)"""

from __future__ import annotations

import dataclasses

import pytest
from PySide6.QtGui import QTextDocument

from app.conversation.view import ConversationView
from tests.support.gui import recorded_metrics


def shown(html: str) -> str:
    """The text a rich-text label shows for ``html``."""
    document = QTextDocument()
    document.setHtml(html)
    return document.toPlainText()


@pytest.fixture
def view(qtbot):
    widget = ConversationView()
    qtbot.addWidget(widget)
    return widget


def test_the_reply_is_stored_as_written_and_its_markdown_rendered(view):
    pieces = ["Use `snake_case` and 2*3.", "**Bold** [docs](https://example.com)",
              "Also 4*5, a <div> & `2*3`."]
    for piece in pieces:
        view.on_reply(0, 1, piece)
    item = view.item(1)
    assert item.reply == " ".join(pieces)
    assert view.turns() == [(1, "", " ".join(pieces))]
    assert view.plain_text() == "You: \nParley: " + " ".join(pieces)
    text = "Use snake_case and 2*3. Bold docs Also 4*5, a <div> & 2*3."
    assert item.reply_document.toPlainText() == text
    assert shown(item.reply_bubble.text()) == text  # what the label really shows
    label = item.reply_bubble.text()
    assert "font-weight:700;\">Bold</span>" in label
    assert '<a href="https://example.com">' in label
    assert "font-family:'monospace';\">snake_case</span>" in label
    assert "&lt;div&gt;" in label  # raw HTML in a reply is text, not markup


def test_list_items_render_as_a_list(view):
    for piece in ["Here are two options:", "- **Fast**: use `a_b`.", "- Slow, really.", "Then more.",
                  "## Next", "Done."]:
        view.on_reply(0, 2, piece)
    item = view.item(2)
    assert item.reply == ("Here are two options: - **Fast**: use `a_b`. - Slow, really. Then more. "
                          "## Next Done.")
    assert item.reply_markdown == ("Here are two options:\n\n- **Fast**: use `a_b`.\n- Slow, really. "
                                   "Then more.\n\n## Next\n\nDone.")
    document = item.reply_document
    assert document.toPlainText() == \
        "Here are two options:\nFast: use a_b.\nSlow, really. Then more.\nNext\nDone."
    blocks = [document.findBlockByNumber(i) for i in range(document.blockCount())]
    assert [b.textList() is not None for b in blocks] == [False, True, True, False, False]
    assert blocks[3].blockFormat().headingLevel() == 2


def test_a_code_block_is_shown_verbatim(view):
    view.on_reply(0, 3, "Run this:")
    view.on_reply(0, 3, "```python\nx = 2*3  # **not bold**\n```")
    view.on_reply(0, 3, "It prints 6.")
    item = view.item(3)
    assert item.reply_document.toPlainText() == "Run this:\nx = 2*3  # **not bold**\nIt prints 6."


def test_the_users_words_are_plain_text(view):
    view.on_partial(0, 4, "use **not", "bold** <b>")
    item = view.item(4)
    assert shown(item.user_bubble.text()) == "use **not bold** <b>"
    view.on_final(0, 4, "Say `snake_case` and **2*3** [x](y) <i>")
    assert shown(item.user_bubble.text()) == "Say `snake_case` and **2*3** [x](y) <i>"
    assert view.turns()[0][1] == "Say `snake_case` and **2*3** [x](y) <i>"


def test_an_interrupted_reply_keeps_its_text_and_says_so(view):
    view.on_reply(0, 5, "**Sure**, let me")
    view.on_cancelled(0, 5, "barge-in")
    item = view.item(5)
    assert shown(item.reply_bubble.text()) == "Sure, let me — interrupted"
    assert item.reply == "**Sure**, let me"


def test_a_reopened_turn_drops_its_reply(view):
    view.on_final(0, 6, "hello")
    view.on_reply(0, 6, "*Hi* there.")
    view.on_cancelled(0, 6, "reopened")
    item = view.item(6)
    assert item.reply == "" and item.reply_markdown == "" and item.reply_document.isEmpty()
    assert item.reply_bubble.isHidden()
    view.on_reply(0, 6, "Hello `again`.")
    assert item.reply_document.toPlainText() == "Hello again."


def test_a_finished_turn_without_pieces_shows_the_recorded_reply(view):
    record = dataclasses.replace(recorded_metrics(1).turns()[0], turn_id=7,
                                 reply="Use **snake_case**, not 2*3.")
    view.on_finished(record)
    item = view.item(7)
    assert item.reply == "Use **snake_case**, not 2*3."
    assert item.reply_document.toPlainText() == "Use snake_case, not 2*3."
    assert "replied" in item.reply_caption.text()
