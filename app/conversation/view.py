"""The conversation: the user's words as recognised (a live partial line that firms up into
the final transcript) or as typed (marked so), and Parley's reply streaming in, one pair
of bubbles per turn; between them a row per tool call the reply made, and after the last
turn the prompt keeps only as a summary, a marker that shows that summary on a click
(``app.conversation.tool_rows``).
When the reply has not started ``thinking_delay_ms`` after the final transcript, a
"Thinking…" bubble stands in for it until the reply starts or the turn ends, and
``thinking_started`` is emitted (``app.conversation.thinking_sound`` may then play a soft tone).

The reply is shown as the LLM wrote it, its Markdown rendered (bold, italic, code, links,
lists); the user's words are plain text, never read as Markdown. What the voice says is
made elsewhere (``engine.stages.speech_text``) and never shown here.
"""

from __future__ import annotations

import html

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QTextDocument
from PySide6.QtWidgets import (QFrame, QHBoxLayout, QLabel, QScrollArea, QSizePolicy, QVBoxLayout, QWidget)

from app.conversation.markdown import join_markdown, label_html, render_markdown
from app.conversation.tool_rows import SummaryMarker, ToolCallRow
from app.core import theme
from engine.pipeline.metrics import TurnKind

_KEEP_TURNS = 200

def _bubble(object_name: str) -> QLabel:
    label = QLabel()
    label.setObjectName(object_name)
    label.setWordWrap(True)
    label.setTextFormat(Qt.TextFormat.RichText)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
    return label


class TurnItem(QWidget):
    """One turn: the user's bubble on the right, the reply's on the left."""

    def __init__(self, turn_id: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.turn_id = turn_id
        self.stable = ""
        self.unstable = ""
        self.transcript: str | None = None  # the final transcript, once known
        self.reply = ""  # the reply's pieces as written, joined by single spaces
        self.reply_markdown = ""  # the same pieces joined to keep their Markdown blocks
        self.reply_document = QTextDocument(self)  # what the reply bubble shows
        self.cancelled = ""
        self.typed = False  # the user typed the words (the message box) instead of saying them
        self.spoken_reply = True  # False: a typed turn answered in text only
        self.language_mark = ""  # the turn's language, shown where it changed ("fr")
        self.tool_rows: dict[str, ToolCallRow] = {}  # by call id, in call order
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 4)
        layout.setSpacing(2)
        self.user_caption = self._caption("You", Qt.AlignmentFlag.AlignRight)
        self.user_bubble = _bubble("userBubble")
        self.reply_caption = self._caption("Parley", Qt.AlignmentFlag.AlignLeft)
        self.reply_bubble = _bubble("replyBubble")
        # Links in a reply open on a click; mouse only, so the bubble never takes the
        # keyboard focus (the push-to-talk key).
        self.reply_bubble.setOpenExternalLinks(True)
        self.reply_bubble.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse
                                                  | Qt.TextInteractionFlag.LinksAccessibleByMouse)
        layout.addWidget(self.user_caption)
        layout.addLayout(self._row(self.user_bubble, right=True))
        self._tools = QVBoxLayout()
        self._tools.setContentsMargins(0, 2, 0, 2)
        self._tools.setSpacing(2)
        layout.addLayout(self._tools)
        layout.addWidget(self.reply_caption)
        layout.addLayout(self._row(self.reply_bubble, right=False))
        self.thinking_bubble = QLabel("Thinking…")
        self.thinking_bubble.setObjectName("thinkingBubble")
        self.thinking_bubble.setAccessibleName("Parley is thinking")
        layout.addLayout(self._row(self.thinking_bubble, right=False))
        self.thinking_bubble.hide()
        #: Fires ``thinking_delay_ms`` after the final transcript (ConversationView starts it).
        self.think_timer = QTimer(self)
        self.think_timer.setSingleShot(True)
        self.think_timer.timeout.connect(lambda: self.set_thinking(True))
        self.reply_caption.hide()
        self.reply_bubble.hide()
        self._render_user()

    @property
    def thinking(self) -> bool:
        """True while the "Thinking…" cue shows."""
        return not self.thinking_bubble.isHidden()

    def set_thinking(self, on: bool) -> None:
        """Show the cue (only while no reply arrived and the turn goes on) or hide it."""
        on = on and not self.reply and not self.cancelled
        if not on:
            self.think_timer.stop()
        if on != self.thinking:
            self.thinking_bubble.setVisible(on)
            if on:
                self.reply_caption.show()
            elif not self.reply and not self.cancelled:
                self.reply_caption.hide()

    @staticmethod
    def _caption(text: str, align: Qt.AlignmentFlag) -> QLabel:
        label = QLabel(text)
        label.setObjectName("bubbleCaption")
        label.setAlignment(align)
        return label

    @staticmethod
    def _row(bubble: QLabel, right: bool) -> QHBoxLayout:
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        if right:
            row.addStretch(1)
        row.addWidget(bubble, 5)
        if not right:
            row.addStretch(1)
        return row

    # ------------------------------------------------------------------ updates
    def set_partial(self, stable: str, unstable: str) -> None:
        """A live partial: stable words firm, the rest still changing."""
        if self.transcript is None:
            self.stable, self.unstable = stable, unstable
            self._render_user()

    def set_final(self, text: str) -> None:
        """The final transcript replaces the partial line."""
        self.transcript = text
        self._render_user()

    def set_typed(self, text: str, spoken_reply: bool) -> None:
        """The user typed ``text``; ``spoken_reply`` False: the reply comes in text only."""
        self.typed, self.spoken_reply = True, spoken_reply
        self.show_user(True)
        self.set_final(text)

    def show_user(self, shown: bool) -> None:
        """Show the user's side, or not: a turn the assistant opened itself (the answer
        after a tool's output) has no words of the user's."""
        self.user_caption.setVisible(shown)
        self.user_bubble.setVisible(shown)

    def add_tool_call(self, call, server: str = "") -> ToolCallRow:
        """A row for the tool call ``call`` (a ToolCall), shown running until it finishes;
        ``server``: the MCP server that runs it, if one does."""
        row = self.tool_rows.get(call.call_id)
        if row is None:
            row = self.tool_rows[call.call_id] = ToolCallRow(call, server=server)
            self._tools.addWidget(row)
        return row

    def add_reply(self, text: str) -> None:
        """A piece of the reply (a clause, a sentence, a list item) as the LLM wrote it."""
        self.set_thinking(False)
        piece = text.strip()
        self.reply = f"{self.reply} {piece}".strip()
        if piece:
            self.reply_markdown = join_markdown(self.reply_markdown, piece)
        self._render_reply()

    def reopen(self) -> None:
        """The user went on speaking: the reply so far was dropped, the words continue."""
        self.set_thinking(False)
        if self.transcript:
            self.stable, self.unstable = self.transcript, ""
        self.transcript = None
        self.reply = ""
        self.reply_markdown = ""
        self.reply_document.clear()
        self.reply_caption.hide()
        self.reply_bubble.hide()
        self._render_user()

    def set_cancelled(self, reason: str) -> None:
        """The reply was cut off (barge-in or the Interrupt button)."""
        self.set_thinking(False)
        self.cancelled = reason
        self._render_reply()

    def set_finished(self, voice_to_voice: float | None) -> None:
        """Show the turn's voice-to-voice latency under the reply."""
        self.set_thinking(False)
        if voice_to_voice is not None:
            after = "you sent it" if self.typed else "you stopped"
            self.reply_caption.setText(f"Parley  ·  replied {voice_to_voice * 1000:.0f} ms after {after}")
        if not self.reply and not self.cancelled:
            self.reply_caption.hide()
            self.reply_bubble.hide()

    def _render_user(self) -> None:
        muted = theme.current().user_muted  # on the accent-coloured bubble
        if self.transcript is not None:
            text = html.escape(self.transcript) if self.transcript else \
                f"<i style='color:{muted}'>(no words recognised)</i>"
            self.user_caption.setText((self._typed_caption() if self.typed else "You")
                                      + (f"  ·  language: {self.language_mark}"
                                         if self.language_mark else ""))
        elif self.stable or self.unstable:
            text = html.escape(self.stable)
            if self.unstable:
                text += f" <i style='color:{muted}'>{html.escape(self.unstable)}</i>"
            self.user_caption.setText("You  ·  transcribing…")
        else:
            text = f"<i style='color:{muted}'>listening…</i>"
            self.user_caption.setText("You")
        self.user_bubble.setText(text)

    def _typed_caption(self) -> str:
        return "You  ·  typed" + ("" if self.spoken_reply else "  ·  reply in text only")

    def mark_language(self, language: str) -> None:
        """Say in the caption that this turn was in ``language`` (it changed here)."""
        self.language_mark = language
        self._render_user()

    def restyle(self) -> None:
        """Render again with the current palette (inline colours of the muted parts)."""
        self._render_user()
        for row in self.tool_rows.values():
            row.render()
        if self.reply or self.cancelled:
            self._render_reply()

    def _render_reply(self) -> None:
        muted = theme.current().muted
        self.reply_caption.show()
        self.reply_bubble.show()
        if not self.reply_markdown:
            text = f"<i style='color:{muted}'>…</i>"
            if self.cancelled:
                text += f" <span style='color:{muted}'>— interrupted</span>"
            self.reply_document.clear()
            self.reply_bubble.setText(text)
            return
        # Rendered afresh from the whole reply each time: a piece may close a bold span or
        # a list the previous piece opened.
        render_markdown(self.reply_document, self.reply_markdown,
                        " — interrupted" if self.cancelled else "")
        self.reply_bubble.setText(label_html(self.reply_document))


class ConversationView(QScrollArea):
    """All turns, newest at the bottom; follows new text while scrolled to the end."""

    #: How long after the final transcript a reply that has not started shows "Thinking…".
    thinking_delay_ms = 1000
    #: The cue's dots advance this often (only while the view is shown).
    thinking_step_ms = 400
    #: The "Thinking…" cue appeared for this turn id.
    thinking_started = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("conversation")
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFrameShape(QFrame.Shape.NoFrame)
        body = QWidget()
        body.setObjectName("conversationBody")
        self._layout = QVBoxLayout(body)
        self._layout.setContentsMargins(20, 16, 20, 16)
        self._layout.setSpacing(8)
        self._empty = QLabel("Press <b>Listen</b> and start talking.<br>"
                             "Your words appear here as they are recognised, then Parley's reply.")
        self._empty.setObjectName("emptyHint")
        self._empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._layout.addWidget(self._empty, 1)
        self._layout.addStretch(1)
        self.setWidget(body)
        self._items: list[TurnItem] = []  # every turn shown, oldest first
        self._current: dict[int, TurnItem] = {}  # turn ids of the current engine
        #: Where the turns the prompt carries as a summary end (None: nothing summarised).
        self.summary_marker: SummaryMarker | None = None
        self.verticalScrollBar().rangeChanged.connect(self._follow)
        self._at_end = True
        self.verticalScrollBar().valueChanged.connect(self._remember_position)
        self._dots = QTimer(self)
        self._dots.timeout.connect(self._step_thinking)
        self._step = 0
        self._tool_servers: dict[str, str] = {}  # tool name -> the MCP server that runs it
        self._language: str | None = None  # the language of the last turn that had one
        theme.notifier().changed.connect(self._restyle)

    # ------------------------------------------------------------------ event slots
    def on_user_speaking(self, unit: int, turn_id: int, started: bool) -> None:
        """The user started (or stopped) speaking in ``turn_id``."""
        if started:
            item = self._item(turn_id)
            for other in self._current.values():
                if other is not item:
                    other.set_thinking(False)  # a new turn: earlier ones are past waiting

    def on_partial(self, unit: int, turn_id: int, stable: str, unstable: str) -> None:
        """A live partial transcript."""
        self._item(turn_id).set_partial(stable, unstable)

    def on_final(self, unit: int, turn_id: int, text: str) -> None:
        """The final transcript of ``turn_id``: its reply is now awaited."""
        item = self._item(turn_id)
        item.set_final(text)
        if text.strip() and not item.reply and not item.cancelled:
            item.think_timer.start(self.thinking_delay_ms)

    def on_reply(self, unit: int, turn_id: int, text: str) -> None:
        """A clause of the reply."""
        self._item(turn_id, user=False).add_reply(text)

    def on_typed(self, unit: int, turn_id: int, text: str, spoken_reply: bool) -> None:
        """The user typed ``text`` (the message box), sent as ``turn_id``: its reply is now awaited."""
        item = self._item(turn_id)
        for other in self._current.values():
            if other is not item:
                other.set_thinking(False)  # a new turn: earlier ones are past waiting
        item.set_typed(text, spoken_reply)
        if not item.reply and not item.cancelled:
            item.think_timer.start(self.thinking_delay_ms)

    def set_tool_support(self, support) -> None:
        """The engine's tools (an ``engine.tools.ToolSupport``, or None): a tool call's
        row names the MCP server that runs its tool."""
        self._tool_servers = {} if support is None else {t.name: t.server for t in support.tools if t.server}

    def on_tool_started(self, unit: int, turn_id: int, call) -> None:
        """The reply of ``turn_id`` runs the tool call ``call``."""
        self._item(turn_id, user=False).add_tool_call(call, self._tool_servers.get(call.name, ""))

    def on_tool_finished(self, unit: int, turn_id: int, call, result: str, error, seconds: float) -> None:
        """The tool call ``call`` ended (``error`` None: it worked)."""
        self._item(turn_id).add_tool_call(call, self._tool_servers.get(call.name, "")).finish(
            result, error, seconds)

    def on_summarized(self, unit: int, summary: str, through_turn: int) -> None:
        """The prompt now carries ``summary`` for every turn up to ``through_turn``: the
        marker moves after that turn (the top, if it is no longer shown)."""
        marker = self.summary_marker
        if marker is None:
            marker = self.summary_marker = SummaryMarker()
        else:
            self._layout.removeWidget(marker)
        marker.set_summary(summary, through_turn)
        after = self._current.get(through_turn)
        at = self._layout.indexOf(after) + 1 if after is not None else 1  # 0 is the empty hint
        self._layout.insertWidget(at, marker)
        marker.show()

    def on_cancelled(self, unit: int, turn_id: int, reason: str) -> None:
        """A reopened turn drops its reply; a barge-in marks it interrupted."""
        item = self._current.get(turn_id)
        if item is None:
            return
        if reason == "reopened":
            item.reopen()
        else:
            item.set_cancelled(reason)

    def on_finished(self, record) -> None:
        """A TurnRecord: the turn's texts are final; show its latency."""
        item = self._item(record.turn_id, user=bool(record.transcript))
        if record.kind is TurnKind.TYPED and not item.typed and record.transcript:
            item.set_typed(record.transcript, item.spoken_reply)
        if item.transcript is None:
            item.set_final(record.transcript)
        if record.reply and not item.reply:
            item.add_reply(record.reply)
        if record.language:
            if self._language is not None and record.language != self._language:
                item.mark_language(record.language)  # the conversation changed language
            self._language = record.language
        item.set_finished(record.voice_to_voice)

    def clear(self) -> None:
        """Forget every turn."""
        for item in self._items:
            item.set_thinking(False)
            item.deleteLater()
        self._items.clear()
        self._current.clear()
        if self.summary_marker is not None:
            self.summary_marker.deleteLater()
            self.summary_marker = None
        self._empty.show()

    def new_engine(self) -> None:
        """A new engine numbers its turns from 1 again: later events start new bubbles."""
        for item in self._current.values():
            item.set_thinking(False)
        self._current.clear()

    def item(self, turn_id: int) -> TurnItem | None:
        """The bubble pair of ``turn_id`` of the current engine."""
        return self._current.get(turn_id)

    # ------------------------------------------------------------------ readers
    def turns(self) -> list[tuple[int, str, str]]:
        """``(turn_id, what the user said, the reply)`` as shown, oldest first."""
        return [(i.turn_id, i.transcript if i.transcript is not None else f"{i.stable} {i.unstable}".strip(),
                 i.reply) for i in self._items]

    def tool_calls(self) -> list[str]:
        """Every tool call shown, as text (``ToolCallRow.summary``), oldest first."""
        return [row.summary() for item in self._items for row in item.tool_rows.values()]

    def plain_text(self) -> str:
        """The conversation as text, for copying and tests."""
        return "\n".join(f"You: {user}\nParley: {reply}" for _t, user, reply in self.turns())

    def thinking_turns(self) -> list[int]:
        """The turn ids showing the "Thinking…" cue."""
        return [turn_id for turn_id, item in self._current.items() if item.thinking]

    # ------------------------------------------------------------------ internals
    def _start_dots(self) -> None:
        if not self._dots.isActive():
            self._step = 0
            self._dots.start(self.thinking_step_ms)

    def _step_thinking(self) -> None:
        thinking = [i for i in self._items if i.thinking]
        if not thinking:
            self._dots.stop()
            return
        if not self.isVisible():
            return  # a hidden tab is not drawn
        self._step = (self._step + 1) % 4
        text = "Thinking" + ("…" if self._step == 0 else "." * self._step)
        for item in thinking:
            item.thinking_bubble.setText(text)

    def _restyle(self, _palette) -> None:
        for item in self._items:
            item.restyle()

    def _item(self, turn_id: int, user: bool = True) -> TurnItem:
        """The turn's item, made on its first event; ``user`` False: that event is the
        assistant's (a reply, a tool call), so the user's side waits hidden for words."""
        item = self._current.get(turn_id)
        if item is None:
            self._empty.hide()
            item = TurnItem(turn_id)
            item.show_user(user)
            item.think_timer.timeout.connect(self._start_dots)
            item.think_timer.timeout.connect(
                lambda item=item: item.thinking and self.thinking_started.emit(item.turn_id))
            self._layout.insertWidget(self._layout.count() - 1, item)
            self._items.append(item)
            self._current[turn_id] = item
            while len(self._items) > _KEEP_TURNS:
                oldest = self._items.pop(0)
                if self._current.get(oldest.turn_id) is oldest:
                    del self._current[oldest.turn_id]
                oldest.deleteLater()
        return item

    def _remember_position(self, value: int) -> None:
        bar = self.verticalScrollBar()
        self._at_end = value >= bar.maximum() - 4

    def _follow(self, _lo: int, hi: int) -> None:
        if self._at_end:
            bar = self.verticalScrollBar()
            # Bound to the bar: a window closed before the timer fires cancels it.
            QTimer.singleShot(0, bar, lambda: bar.setValue(bar.maximum()))
