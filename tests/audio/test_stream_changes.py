"""Stream changes happen one at a time in the process: PortAudio's JACK host API makes
every open, start, stop and close wait on one condition variable shared by all streams,
and a wake meant for one can end another's wait early, so a close then frees a stream
JACK's thread still runs (a segfault CI met closing a microphone). The sound card is
``tests.support.fake_sound.FakeSoundDevice``, which counts changes that overlap."""

from __future__ import annotations

import threading

from engine.audio.mic import MicSource
from engine.audio.speaker import SpeakerSink
from tests.support.fake_sound import install_fake_sound
from tests.support.threads import WAIT_S


def test_devices_opened_and_closed_on_two_threads_never_change_streams_at_once(monkeypatch):
    sound = install_fake_sound(monkeypatch)
    sound.change_s = 0.003  # PortAudio waits for its audio thread about this long
    errors: list[BaseException] = []

    def cycle(make) -> None:
        try:
            for _ in range(15):
                device = make()
                device.open()
                device.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)

    threads = [threading.Thread(target=cycle, args=(lambda: MicSource("default"),)),
               threading.Thread(target=cycle, args=(lambda: SpeakerSink("default"),))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
        assert not thread.is_alive()
    assert errors == []
    assert len(sound.streams) == 30 and all(s.closed for s in sound.streams)
    assert sound.overlapping_changes == 0
