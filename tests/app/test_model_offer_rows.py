""""Get larger models…" and the stack badge's tooltip say what auto picked by budget: each
offer with its download size, its expected latency on this machine and what it adds, why
it was picked and the runner-up; with no calibration, that nothing was measured."""

from app.onboarding.downloads import HubDownload, ModelDownloadDialog, hub_downloads
from app.onboarding.offer_rows import OfferRow, choice_lines
from engine.config import EngineConfig
from engine.runtime.devices import Device, DeviceInfo
from engine.runtime.hub import HubStatus
from engine.backends.ladder import load_ladder
from engine.models.placement import resolve_placements
from tests.models.test_stack_choice import machine

CPU_ONLY = [DeviceInfo(Device("cpu"), "CPU", True),
            DeviceInfo(Device("cuda", 0), "CUDA", False, "no NVIDIA GPU found")]
OFFLINE = HubStatus(offline=True)  # the bundled stack runs; the hub's models are offered


def offer(download: HubDownload) -> OfferRow:
    assert download.offer is not None, download
    return download.offer


def _placements(calibration):
    return resolve_placements(EngineConfig(), CPU_ONLY, hub=OFFLINE, calibration=lambda kind: calibration)


def test_the_dialog_lists_each_offer_with_size_expected_latency_and_what_it_adds(qtbot):
    placements = _placements(machine(load_ladder(), 0.5))
    downloads = {d.stage: d for d in hub_downloads(placements.values())}
    stt, llm = offer(downloads["stt"]), offer(downloads["llm"])
    assert downloads["stt"].repo_id == "Systran/faster-whisper-small.en"  # the budget's, not turbo
    assert (stt.size, stt.latency) == ("484 MB", "0.26 s on this machine")
    assert stt.adds == ("WER 3.1 (LibriSpeech test-clean)",)
    assert stt.runner_up.startswith("runner-up distil-large-v3 (0.80 s on this machine, 1.5 GB)")
    assert downloads["llm"].repo_id == "Qwen/Qwen3-0.6B" and llm.size == "size unknown"
    assert llm.adds[:2] == ("calls tools", "many languages")
    dialog = ModelDownloadDialog(list(downloads.values()))
    qtbot.addWidget(dialog)
    text = dialog.intro.text()
    assert "speech recognition: Systran/faster-whisper-small.en<br><small>484 MB · expected 0.26 s " \
           "on this machine · adds WER 3.1 (LibriSpeech test-clean)" in text
    assert "Picked by budget: whisper-small.en: predicted 0.26 s on the median turn" in text
    assert "language model: Qwen/Qwen3-0.6B" in text and "adds calls tools, many languages" in text
    # The tooltip of the stack badge: every stage's pick, why and the runner-up.
    lines = choice_lines(placements.values())
    assert lines[0].startswith("stt: whisper-small.en: predicted 0.26 s") and "runner-up" in lines[0]
    assert [line.split(":")[0] for line in lines] == ["stt", "llm", "tts"]


def test_without_a_calibration_the_offers_and_the_tooltip_say_nothing_was_measured(qtbot):
    placements = _placements(None)
    downloads = {d.stage: d for d in hub_downloads(placements.values())}
    stt = offer(downloads["stt"])
    assert downloads["stt"].repo_id == "mobiuslabsgmbh/faster-whisper-large-v3-turbo"  # by name
    assert (stt.size, stt.latency) == ("1.6 GB", "not measured here")
    assert stt.why.startswith("Default by name: not measured: no calibration of cpu here")
    dialog = ModelDownloadDialog(list(downloads.values()))
    qtbot.addWidget(dialog)
    assert "1.6 GB · latency not measured here" in dialog.intro.text()
    assert choice_lines(placements.values()) == [
        "Models are not sized to this machine yet: it has not been calibrated, so auto keeps "
        "its defaults by name."]
