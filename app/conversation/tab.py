"""The Conversation tab and what goes with it in the window: the turns as they happen
(with the tool calls and the summary marker), the message box under them, a place beside
them (the live meters), File > Clear conversation, File > Private conversation (and its
strip above the turns), the header's Stop talking button and push-to-talk controls, and
the thinking chime (View menu)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QSplitter, QVBoxLayout, QWidget

from app.conversation.composer import Composer
from app.conversation.private import PrivateConversation
from app.conversation.stop_talking import StopTalkingButton
from app.conversation.talk_key import TalkKey
from app.conversation.thinking_sound import ChimePlayer, ThinkingSound
from app.conversation.view import ConversationView
from app.core.controller import ControllerMode
from app.core.window_api import WindowApi


class ConversationTab:
    """The conversation feature of ``window``; ``player`` plays the thinking chime."""

    def __init__(self, window: WindowApi, player: ChimePlayer) -> None:
        controller, bridge = window.controller, window.bridge
        self.view = view = ConversationView()
        self.composer = Composer(window.settings)
        left = QWidget()
        column = QVBoxLayout(left)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        column.addWidget(view, 1)
        column.addWidget(self.composer)
        self.private = PrivateConversation(window, lambda strip: column.insertWidget(0, strip))
        self.split = QSplitter(Qt.Orientation.Horizontal)
        self.split.setObjectName("conversationSplit")
        self.split.addWidget(left)
        self.split.setChildrenCollapsible(False)
        self.page = window.add_tab("Conversation", self.split)
        bridge.user_speaking.connect(view.on_user_speaking)
        bridge.partial_transcript.connect(view.on_partial)
        bridge.final_transcript.connect(view.on_final)
        bridge.reply_text.connect(view.on_reply)
        bridge.turn_cancelled.connect(view.on_cancelled)
        bridge.turn_finished.connect(view.on_finished)
        bridge.tool_started.connect(view.on_tool_started)
        bridge.tool_finished.connect(view.on_tool_finished)
        bridge.history_summarized.connect(view.on_summarized)
        # Typed messages go through the controller's serial lane; the reply comes as events.
        self.composer.send.connect(lambda text, spoken: controller.say(text, speak=spoken))
        controller.typed_sent.connect(view.on_typed)
        controller.say_failed.connect(self._say_failed)
        self._banner = window.banner
        controller.state_changed.connect(lambda _s: self.composer.set_why_not(controller.say_why_not()))
        window.on_tick(lambda _snap: self.composer.set_why_not(controller.say_why_not()))
        # Shown only while a reply is heard: the way to silence Parley, always in reach.
        self.stop_talking = StopTalkingButton(lambda: controller.interrupt())
        window.add_header_widget(self.stop_talking)
        window.interrupted.connect(self.stop_talking.forget)
        bridge.turn_cancelled.connect(self.stop_talking.turn_cancelled)
        window.on_tick(lambda snap: self.stop_talking.update_from(
            snap, controller.mode is not ControllerMode.IDLE))
        controller.engine_changed.connect(self._new_engine)
        # New conversation: events of the cut-off reply may arrive after the first clear.
        controller.conversation_reset.connect(view.clear)
        clear = QAction("Clear conversation", window.widget)
        clear.triggered.connect(view.clear)
        window.add_file_action(clear)
        self.talk_key = TalkKey(window)
        self.thinking_sound = ThinkingSound(window, view, player)
        window.on_close(self._close)

    def add_beside(self, widget: QWidget) -> None:
        """Put ``widget`` right of the turns, a quarter of the width (the live meters)."""
        self.split.addWidget(widget)
        self.split.setStretchFactor(0, 3)
        self.split.setStretchFactor(1, 1)
        self.split.setSizes([840, 380])

    def _say_failed(self, text: str, why: str) -> None:
        self.composer.restore(text)
        self._banner.show_message(f"The message was not sent: {why}")

    def _close(self) -> list[str]:
        # A chime playing is cut off; its thread is named if it did not end.
        return [] if self.thinking_sound.stop() else ["parley-voice-preview"]

    def _new_engine(self, _engine) -> None:
        # A new engine numbers its turns afresh.
        self.view.new_engine()
        self.stop_talking.new_engine()
