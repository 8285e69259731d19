"""The doctor's "Models by budget" section: what auto picks for the measured speed, why,
and the runner-up; a set model predicted slow is a warning with what auto would pick; with
no calibration it says the defaults are kept by name."""

import dataclasses

from engine.config import EngineConfig
from engine.doctor.report import Level, render_text
from engine.doctor.run import SECTIONS, run_checks
from engine.backends.ladder import load_ladder
from tests.models.test_stack_choice import machine
from tests.support.doctor import healthy_devices, healthy_probes


def _cpu_machine(slowness):
    ladder = load_ladder()
    return dataclasses.replace(healthy_probes(), devices=lambda: healthy_devices(cuda=False),
                               calibration=lambda kind: machine(ladder, slowness, kind))


def test_the_section_shows_each_pick_why_and_the_runner_up():
    report = run_checks(EngineConfig(), _cpu_machine(0.5))
    assert list(SECTIONS).index("stack") == list(SECTIONS).index("placement") + 1
    section = report.section("stack")
    texts = [f.text for f in section.findings]
    assert texts[0].startswith("cpu: predicted voice-to-voice ") and "0.80 s budget" in texts[0]
    stt = next(t for t in texts if t.startswith("stt: "))
    assert stt.startswith("stt: whisper-small.en: predicted 0.26 s on the median turn, within its")
    assert "484 MB download; runner-up distil-large-v3 (0.80 s on this machine, 1.5 GB)" in stt
    assert section.facts["measured"] is True
    assert section.facts["stages"]["llm"]["chosen"]["rung"] == "qwen3-0.6b"
    assert section.facts["stages"]["stt"]["runner_up"]["download_bytes"] == 1_510_000_000
    # The placement check loads the same pick, and its note says why.
    stt_placement = report.section("placement").facts["stages"]["stt"]
    assert stt_placement["model"] == "Systran/faster-whisper-small.en"
    assert "Models by budget" in render_text(report)


def test_a_set_model_predicted_slow_is_a_warning_with_what_auto_would_pick():
    config = EngineConfig().with_overrides({"llm.model": "Qwen/Qwen3-4B-Instruct-2507"})
    report = run_checks(config, _cpu_machine(4.0))
    warnings = [f for f in report.section("stack").findings if f.level is Level.WARNING]
    assert len(warnings) == 3  # the set LLM, and the STT and TTS even at their fastest
    assert warnings[1].text.startswith("llm: warning: Qwen/Qwen3-4B-Instruct-2507 is predicted ")
    assert warnings[1].fix.startswith("llm.model = auto picks smollm2-360m-instruct (")
    assert warnings[0].text.startswith("stt: warning: Systran/faster-whisper-tiny.en is the "
                                       "fastest stt model of the ladder here and is still predicted ")
    assert warnings[0].fix.startswith("raise voice_budget_s, or place the stt on a faster device")


def test_without_a_calibration_the_section_says_auto_keeps_its_defaults():
    report = run_checks(EngineConfig(), healthy_probes())
    section = report.section("stack")
    assert section.facts["measured"] is False and section.facts["device_kind"] == "cuda"
    assert section.findings[0].text == ("cuda: not sized to this machine yet: no calibration of "
                                        "cuda here, so auto keeps its defaults by name")
    assert {f.level for f in section.findings} == {Level.INFO}
    assert report.section("placement").facts["stages"]["stt"]["model"] == \
        "mobiuslabsgmbh/faster-whisper-large-v3-turbo"
