"""Turn-taking logic on frame probabilities: start, end, reopen, commit, partials."""

import numpy as np
import pytest

from engine.config import TurnConfig, VadConfig
from engine.stages.turns import Committed, Partial, Reopened, SegmentEnded, Started, TurnDetector

FRAME = 512
FRAME_S = FRAME / 16000


def run(detector, pattern, start_t=100.0):
    """Feed (probability, seconds) runs; return (time, event) pairs."""
    events, t = [], start_t
    for prob, seconds in pattern:
        for _ in range(round(seconds / FRAME_S)):
            frame = np.full(FRAME, prob, np.float32)
            events += [(t, e) for e in detector.push(frame, prob, t)]
            t += FRAME_S
    events += [(t, e) for e in detector.flush()]
    return events


def kinds(events):
    return [type(e).__name__ for _, e in events]


def make(speculative=False, grace=500, silence=500, live=False):
    return TurnDetector(VadConfig(min_silence_ms=silence, min_speech_ms=200, pad_ms=300),
                        TurnConfig(reopen_grace_ms=grace, speculative=speculative,
                                   live_transcription=live, live_transcription_interval=0.5))


def test_one_utterance_gives_start_then_commit_with_padded_audio():
    events = run(make(), [(0.0, 1.0), (0.9, 2.0), (0.0, 2.0)])
    assert kinds(events) == ["Started", "Committed"]
    started, committed = events[0][1], events[1][1]
    assert started.t_start == pytest.approx(101.0, abs=FRAME_S)
    assert committed.t_speech_end == pytest.approx(103.0, abs=FRAME_S)
    # The commit comes after min_silence + grace of silence.
    assert events[1][0] - committed.t_speech_end == pytest.approx(1.0, abs=2 * FRAME_S)
    # Audio: 2 s of speech plus ~0.3 s padding on each side.
    assert committed.audio.size / 16000 == pytest.approx(2.6, abs=0.1)


def test_pause_shorter_than_silence_plus_grace_keeps_one_turn():
    events = run(make(), [(0.9, 1.0), (0.0, 0.7), (0.9, 1.0), (0.0, 2.0)])
    assert kinds(events) == ["Started", "Started", "Committed"]
    assert events[1][1].resumed
    assert events[2][1].audio.size / 16000 == pytest.approx(3.0, abs=0.15)


def test_long_pause_gives_two_turns():
    events = run(make(), [(0.9, 1.0), (0.0, 1.5), (0.9, 1.0), (0.0, 2.0)])
    assert kinds(events) == ["Started", "Committed", "Started", "Committed"]
    assert not events[2][1].resumed


def test_speculative_segment_then_reopen_then_commit():
    events = run(make(speculative=True), [(0.9, 1.0), (0.0, 0.7), (0.9, 1.0), (0.0, 2.0)])
    assert kinds(events) == ["Started", "SegmentEnded", "Reopened", "Started", "SegmentEnded", "Committed"]
    first_seg, final_seg, commit = events[1][1], events[4][1], events[5][1]
    assert final_seg.audio.size > first_seg.audio.size  # the combined audio
    assert commit.speculated and commit.audio.size == final_seg.audio.size
    # Silence is zeros in these frames: what was sent is what the turn holds.
    assert np.array_equal(commit.audio, final_seg.audio)
    # The speculative segment goes out after speculative_start_ms (the default), well
    # before the segment ends (min_silence, 500 ms here) and the commit.
    start_s = TurnConfig().speculative_start_ms / 1000
    assert events[1][0] - first_seg.t_speech_end == pytest.approx(start_s, abs=2 * FRAME_S)
    # Each segment says where its speech ends in its audio (the rest is the padding):
    # the later one begins with the earlier one's speech and the pause after it.
    for segment in (first_seg, final_seg, commit):
        voiced_s = segment.voiced_samples / 16000
        assert voiced_s == pytest.approx(segment.t_speech_end - 100.0, abs=2 * FRAME_S)
        assert segment.audio.size / 16000 == pytest.approx(voiced_s + 0.3, abs=2 * FRAME_S)
    assert np.array_equal(final_seg.audio[:first_seg.voiced_samples],
                          first_seg.audio[:first_seg.voiced_samples])


def test_speech_shorter_than_min_speech_is_ignored():
    assert run(make(), [(0.0, 0.5), (0.9, 0.1), (0.0, 2.0)]) == []


def test_live_partials_grow_while_speaking():
    events = run(make(live=True), [(0.9, 2.0), (0.0, 2.0)])
    partials = [e for _, e in events if isinstance(e, Partial)]
    assert len(partials) >= 2
    sizes = [p.audio.size for p in partials]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]


def test_end_of_input_commits_the_turn_in_progress():
    detector = make()
    events = run(detector, [(0.9, 1.0)])
    assert kinds(events) == ["Started", "Committed"]
    assert isinstance(events[-1][1], Committed)


def test_zero_grace_commits_at_segment_end():
    events = run(make(grace=0), [(0.9, 1.0), (0.0, 1.0)])
    assert kinds(events) == ["Started", "Committed"]
    assert not any(isinstance(e, (SegmentEnded, Reopened)) for _, e in events)
    assert isinstance(events[0][1], Started)


def test_resumption_confirmed_after_the_grace_still_continues_the_turn():
    # Speech resumes 0.95 s into a 1.0 s end-of-turn wait; confirming it takes 0.2 s more.
    events = run(make(), [(0.9, 1.0), (0.0, 0.95), (0.9, 1.0), (0.0, 2.0)])
    assert kinds(events) == ["Started", "Started", "Committed"]


def _push(detector, pattern, start_t=100.0):
    """Like ``run`` without the final flush."""
    events, t = [], start_t
    for prob, seconds in pattern:
        for _ in range(round(seconds / FRAME_S)):
            events += detector.push(np.full(FRAME, prob, np.float32), prob, t)
            t += FRAME_S
    return events


def test_manual_end_of_turn_waits_for_the_commit_whatever_the_silence():
    from engine.config import EndOfTurn

    detector = TurnDetector(VadConfig(min_silence_ms=300), TurnConfig(
        reopen_grace_ms=500, speculative=True, end_of_turn=EndOfTurn.MANUAL))
    events = _push(detector, [(0.0, 0.5), (0.9, 1.0), (0.0, 5.0), (0.9, 0.5), (0.0, 1.0)])
    assert [type(e).__name__ for e in events] == ["Started"]  # 5 s of silence ended nothing
    (committed,) = detector.flush()  # the client's commit
    assert isinstance(committed, Committed) and not committed.speculated
    assert committed.t_speech_end == pytest.approx(100.0 + 0.5 + 1.0 + 5.0 + 0.5, abs=FRAME_S)


def test_configure_mid_turn_takes_the_new_waits():
    detector = make(grace=0, silence=2000)
    events = _push(detector, [(0.0, 0.5), (0.9, 1.0), (0.0, 1.0)])
    assert [type(e).__name__ for e in events] == ["Started"]  # 1 s < 2 s of silence
    detector.configure(VadConfig(min_silence_ms=300, min_speech_ms=200, pad_ms=300),
                       TurnConfig(reopen_grace_ms=0))
    events = _push(detector, [(0.0, 0.2)], start_t=102.5)
    assert [type(e).__name__ for e in events] == ["Committed"]


def early(silence=300, grace=900, start=200):
    return TurnDetector(VadConfig(min_silence_ms=silence, min_speech_ms=200, pad_ms=300),
                        TurnConfig(reopen_grace_ms=grace, speculative=True,
                                   speculative_start_ms=start))


def test_the_early_speculative_start_drops_its_work_when_speech_resumes():
    # 250 ms of silence: past the speculative start (200 ms), short of the segment's end
    # (300 ms). The work started on the first part is dropped and the turn goes on as
    # one; from the speech on, no decision can commit the dropped segment.
    detector = early()
    events = _push(detector, [(0.0, 0.3), (0.9, 1.0), (0.0, 0.25)])
    assert kinds([(0, e) for e in events]) == ["Started", "SegmentEnded"]
    assert detector.may_commit_now and not detector.in_grace
    events = _push(detector, [(0.9, 0.5)], start_t=101.55)
    assert kinds([(0, e) for e in events]) == ["Reopened"]
    assert not detector.may_commit_now and detector.commit_now() == []
    events += _push(detector, [(0.0, 2.0)], start_t=102.05)
    assert kinds([(0, e) for e in events]) == ["Reopened", "SegmentEnded", "Committed"]
    second, commit = events[1], events[2]
    assert commit.speculated and commit.t_speech_end == pytest.approx(102.05, abs=2 * FRAME_S)
    assert second.audio.size / 16000 == pytest.approx(0.3 + 1.0 + 0.25 + 0.5 + 0.3, abs=0.1)


def test_a_confident_decision_commits_the_speculated_segment_before_it_ends():
    # The learned end of turn may decide within min_silence_ms: the segment it judged
    # (sent at the speculative start) is the one committed, with its own end of speech.
    detector = early()
    events = _push(detector, [(0.0, 0.3), (0.9, 1.0), (0.0, 0.25)])
    segment = events[-1]
    assert isinstance(segment, SegmentEnded) and detector.may_commit_now
    (commit,) = detector.commit_now()
    assert isinstance(commit, Committed) and commit.speculated
    assert commit.t_speech_end == segment.t_speech_end
    assert commit.voiced_samples == segment.voiced_samples
    assert not detector.in_turn and not detector.may_commit_now


def test_any_sound_after_the_early_start_drops_the_work_before_the_segment_ends():
    # A breath (p between the silence and speech thresholds) 220 ms into the silence:
    # the segment sent at 200 ms no longer holds the whole turn.
    detector = early()
    events = _push(detector, [(0.0, 0.3), (0.9, 1.0), (0.0, 0.22), (0.4, 0.064), (0.0, 2.0)])
    assert kinds([(0, e) for e in events]) == ["Started", "SegmentEnded", "Reopened",
                                               "SegmentEnded", "Committed"]


def test_the_speculative_start_is_never_later_than_the_segment_end():
    detector = early(silence=300, start=5000)
    events = run(detector, [(0.9, 1.0), (0.0, 2.0)])
    assert kinds(events) == ["Started", "SegmentEnded", "Committed"]
    assert events[1][0] - events[1][1].t_speech_end == pytest.approx(0.3, abs=2 * FRAME_S)
