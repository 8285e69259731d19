"""``auto`` picks by budget: the ladder's choice for given measured speeds.

Speeds are made by hand (``RungCost`` per rung, scaled by a machine's speed): a slow
machine gets small models, a fast one large; an explicit setting is kept (with a warning
when it is predicted slow); an English-only model is never picked for another language;
with no calibration nothing is chosen by budget and each stage says so.
"""

import pytest

from engine.config import EngineConfig
from engine.models.calibration import Calibration, RungCost
from engine.runtime.devices import Device, DeviceInfo
from engine.runtime.hub import HubStatus
from engine.backends.ladder import load_ladder
from engine.models.placement import resolve_placements
from engine.models.stack_choice import (BUDGET, EXPLICIT, NONE, UNMEASURED, Candidate, StackChoice,
                                         StageChoice, choose_for_config, choose_stack, find_rung, gains)


@pytest.fixture(scope="module")
def ladder():
    return load_ladder()


def machine(ladder, slowness: float, kind: str = "cpu") -> Calibration:
    """A machine whose costs grow with each rung's parameters, ``slowness`` times those of
    a reference CPU (1.0: tiny.en 80 ms a call, SmolLM2-360M 150 ms to its first token and
    30 tokens/s, a Piper voice 100 ms to its first chunk)."""
    costs = {}
    for rung in ladder.rungs:
        if rung.build(kind) is None:
            continue
        size = rung.parameters
        if rung.stage == "stt":
            cost = RungCost(rung.id, kind, stt_s=slowness * 0.08 * size / 37.76e6,
                            stt_30s_s=slowness * 0.26 * size / 37.76e6)
        elif rung.stage == "llm":
            cost = RungCost(rung.id, kind, llm_first_token_s=slowness * 0.15 * size / 361.8e6,
                            llm_tokens_per_s=30 * 361.8e6 / size / slowness)
        else:
            cost = RungCost(rung.id, kind, tts_first_chunk_s=slowness * 0.1 * max(1.0, size / 20e6))
        costs[rung.id] = cost
    return Calibration(machine="test machine", parley_version="0.0.test", device_kind=kind,
                       took_s=1.0, costs=costs)


def picks(choice) -> dict[str, str | None]:
    return {stage: (c.chosen.rung.id if c.chosen else None) for stage, c in choice.stages.items()}


def chosen(choice: StackChoice | StageChoice | None, stage: str = "") -> Candidate:
    """The candidate a stage chose (it must have one)."""
    found = choice.stages[stage] if isinstance(choice, StackChoice) else choice
    assert found is not None and found.chosen is not None, found
    return found.chosen


def runner_up(choice: StackChoice | StageChoice | None, stage: str = "") -> Candidate:
    """The runner-up of a stage (it must have one)."""
    found = choice.stages[stage] if isinstance(choice, StackChoice) else choice
    assert found is not None and found.runner_up is not None, found
    return found.runner_up


def text(value: str | None) -> str:
    assert value is not None
    return value


def test_a_slow_machine_gets_the_smallest_models(ladder):
    choice = choose_stack(ladder, machine(ladder, 4.0), "cpu")
    assert choice.measured
    assert picks(choice) == {"stt": "whisper-tiny.en", "llm": "smollm2-360m-instruct",
                             "tts": "piper-lessac-low"}
    # Over its share even so: it says so, warns, and names the next rung up.
    assert "the fastest llm rung here" in choice.stages["llm"].why
    assert text(choice.stages["llm"].warning).startswith(
        "llm: warning: HuggingFaceTB/SmolLM2-360M-Instruct is the fastest llm model of the ladder")
    assert choice.stages["llm"].fix.startswith("raise voice_budget_s")
    assert runner_up(choice, "stt").rung.id == "whisper-base.en"


def test_a_fast_machine_gets_the_largest_models(ladder):
    choice = choose_stack(ladder, machine(ladder, 0.02), "cpu")
    assert picks(choice) == {"stt": "whisper-large-v3-turbo", "llm": "qwen3-4b-instruct-2507",
                             "tts": "kokoro-82m"}
    assert all(c.how == BUDGET and c.warning is None for c in choice.stages.values())
    assert choice.predicted_s is not None and choice.predicted_s <= choice.budget_s
    assert "within its" in choice.stages["llm"].why and "0.80 s budget" in choice.stages["llm"].why


def test_a_middle_machine_fits_the_turn_in_the_budget_and_grows_with_it(ladder):
    calibration = machine(ladder, 0.5)
    tight = choose_stack(ladder, calibration, "cpu", budget_s=0.8)
    roomy = choose_stack(ladder, calibration, "cpu", budget_s=3.0)
    assert tight.predicted_s is not None and tight.predicted_s <= 0.8
    for stage in ("stt", "llm"):
        assert chosen(roomy, stage).rung.parameters >= chosen(tight, stage).rung.parameters, stage
    assert chosen(roomy, "stt").rung.parameters > chosen(tight, "stt").rung.parameters
    # The runner-up is what more budget would buy: larger, and predicted over the share.
    runner, share = runner_up(tight, "stt"), tight.stages["stt"].share_s
    assert runner.rung.parameters > chosen(tight, "stt").rung.parameters
    assert runner.cost_s is not None and share is not None and runner.cost_s > share


def test_the_llm_is_sized_by_a_later_turns_first_token_not_the_first_turns(ladder):
    from dataclasses import replace

    from engine.models.stack_choice import FIRST_CLAUSE_TOKENS, stage_cost

    cold = RungCost("smollm2-360m-instruct", "cpu", llm_first_token_s=1.2, llm_tokens_per_s=30.0)
    assert stage_cost("llm", cold) == pytest.approx(1.2 + FIRST_CLAUSE_TOKENS / 30)
    warm = replace(cold, llm_turn_first_token_s=0.05)
    assert stage_cost("llm", warm) == pytest.approx(0.05 + FIRST_CLAUSE_TOKENS / 30)
    # A machine whose first turns are slow but whose later turns are quick gets a larger
    # LLM than one that knew only the first turn's cost.
    base = machine(ladder, 1.0)
    only_first = choose_stack(ladder, base, "cpu")
    kept_cache = {rid: (replace(c, llm_turn_first_token_s=c.llm_first_token_s / 20)
                        if c.llm_first_token_s is not None else c) for rid, c in base.costs.items()}
    later = choose_stack(ladder, replace(base, costs=kept_cache), "cpu")
    assert chosen(later, "llm").rung.parameters > chosen(only_first, "llm").rung.parameters
    # The first turn's figure is kept beside it, and said.
    assert "first turn prefills the whole prompt" in later.stages["llm"].why
    assert "first turn" not in only_first.stages["llm"].why


def test_the_llm_prefers_a_tool_capable_multilingual_model_where_it_fits(ladder):
    choice = choose_stack(ladder, machine(ladder, 0.5), "cpu", budget_s=1.2)
    llm = chosen(choice, "llm").rung
    assert llm.tools and not llm.english_only


@pytest.mark.parametrize("slowness", [4.0, 1.0, 0.5, 0.1, 0.02])
@pytest.mark.parametrize("language", ["de", "fr", None])
def test_an_english_only_model_is_never_picked_for_another_language(ladder, slowness, language):
    choice = choose_stack(ladder, machine(ladder, slowness), "cpu", language=language)
    for stage, stage_choice in choice.stages.items():
        if stage_choice.chosen is not None:
            assert not stage_choice.chosen.rung.english_only, (stage, stage_choice.chosen.rung.id)
            assert ".en" not in stage_choice.chosen.build.repo
    assert chosen(choice, "stt").rung.id == "whisper-large-v3-turbo"  # the one multilingual STT
    # Every TTS voice of the ladder is English: none is chosen, and the stage says why.
    assert choice.stages["tts"].how == NONE
    assert "speaks" in choice.stages["tts"].why


def test_a_model_the_user_set_is_kept_and_warned_about_when_predicted_slow(ladder):
    choice = choose_stack(ladder, machine(ladder, 4.0), "cpu",
                          models={"stt": "Systran/faster-whisper-small.en"})
    stt = choice.stages["stt"]
    assert stt.how == EXPLICIT and chosen(stt).rung.id == "whisper-small.en"
    assert text(stt.warning).startswith("stt: warning: Systran/faster-whisper-small.en is predicted ")
    assert "stt.model = auto picks whisper-tiny.en" in text(stt.warning)
    # The others still share what is left.
    assert choice.stages["llm"].how == BUDGET


def test_a_set_model_that_fits_has_no_warning_and_one_outside_the_ladder_is_kept(ladder):
    fast = choose_stack(ladder, machine(ladder, 0.02), "cpu",
                        models={"llm": "Qwen/Qwen2.5-0.5B-Instruct", "tts": "/models/my-voice.onnx"})
    assert fast.stages["llm"].how == EXPLICIT and fast.stages["llm"].warning is None
    tts = fast.stages["tts"]
    assert tts.how == EXPLICIT and tts.chosen is None and "not in the model ladder" in tts.why


def test_a_backend_the_user_set_limits_the_choice_to_its_builds(ladder):
    choice = choose_stack(ladder, machine(ladder, 0.02), "cpu", backends={"tts": "piper"})
    assert chosen(choice, "tts").rung.id == "piper-lessac-high"
    installed = choose_stack(ladder, machine(ladder, 0.02), "cpu",
                             usable=lambda stage, backend: backend != "kokoro")
    assert chosen(installed, "tts").build.backend == "piper"


def test_with_no_calibration_nothing_is_chosen_by_budget_and_it_says_so(ladder):
    for calibration in (None, machine(ladder, 0.5, kind="cuda")):  # none, or another kind's
        choice = choose_stack(ladder, calibration, "cpu")
        assert not choice.measured
        assert {c.how for c in choice.stages.values()} == {UNMEASURED}
        assert all(c.chosen is None for c in choice.stages.values())
        assert "no calibration of cpu" in choice.summary()
        assert "auto keeps its default by name" in choice.stages["llm"].why


def test_the_config_gives_budget_language_and_set_models(ladder):
    config = EngineConfig().with_overrides({"voice_budget_s": "3.0", "stt.language": "de",
                                            "llm.model": "Qwen/Qwen3-1.7B"})
    choice = choose_for_config(config, ladder, machine(ladder, 0.5), "cpu")
    assert choice.budget_s == 3.0 and choice.language == "de"
    assert choice.stages["llm"].how == EXPLICIT and chosen(choice, "llm").rung.id == "qwen3-1.7b"
    assert not chosen(choice, "stt").rung.english_only


def test_a_detected_language_is_passed_as_none_and_gets_a_multilingual_stt(ladder):
    config = EngineConfig().with_overrides({"stt.language": "auto"})
    choice = choose_for_config(config, ladder, machine(ladder, 0.5), "cpu")
    assert choice.language is None
    assert not chosen(choice, "stt").rung.english_only


def test_a_bad_budget_setting_is_a_clear_error():
    from engine.errors import ConfigError

    with pytest.raises(ConfigError, match="voice_budget_s"):
        EngineConfig().with_overrides({"voice_budget_s": "0"})


def test_what_an_offer_adds(ladder):
    smol, qwen = ladder.get("smollm2-360m-instruct"), ladder.get("qwen3-4b-instruct-2507")
    assert gains(smol, qwen)[:2] == ["calls tools", "many languages"]
    tiny, small = ladder.get("whisper-tiny.en"), ladder.get("whisper-small.en")
    assert gains(tiny, small) == ["WER 3.1 (now 5.6)"]
    turbo = find_rung(ladder, "mobiuslabsgmbh/faster-whisper-large-v3-turbo")
    assert turbo is not None and turbo.id == "whisper-large-v3-turbo"
    assert find_rung(ladder, "/my/model") is None


# ------------------------------------------------------------------ wired into placement

class _ReachableHub(HubStatus):
    """The hub answers (never asked over the network here)."""

    def __init__(self) -> None:
        super().__init__(offline=False)

    def reachable(self) -> bool:
        return True


CPU_ONLY = [DeviceInfo(Device("cpu"), "CPU", True),
            DeviceInfo(Device("cuda", 0), "CUDA", False, "no NVIDIA GPU found")]


def test_auto_loads_the_budgets_choice_with_the_hub_reachable_and_says_why(ladder):
    placements = resolve_placements(EngineConfig(), CPU_ONLY, hub=_ReachableHub(),
                                    calibration=lambda kind: machine(ladder, 0.5, kind))
    stt, llm, tts = placements["stt"], placements["llm"], placements["tts"]
    assert (stt.backend, stt.model) == ("faster-whisper", "Systran/faster-whisper-small.en")
    assert (llm.backend, llm.model) == ("onnx-genai", "Qwen/Qwen3-0.6B")
    # Piper's voice is chosen, though kokoro comes first in auto's order.
    assert tts.backend == "piper" and tts.model.endswith("en_US-lessac-high.onnx")
    choice = stt.choice
    assert choice is not None and choice.how == BUDGET
    assert runner_up(choice).rung.id == "distil-large-v3"
    assert stt.notes == (f"stt: auto picked Systran/faster-whisper-small.en by budget: "
                         f"{choice.why}; {choice.runner_up_text()}",)


def test_without_a_calibration_auto_keeps_todays_pick_and_the_placement_says_so():
    placements = resolve_placements(EngineConfig(), CPU_ONLY, hub=_ReachableHub(),
                                    calibration=lambda kind: None)
    stt = placements["stt"]
    assert stt.model == "mobiuslabsgmbh/faster-whisper-large-v3-turbo"  # the default by name
    assert stt.choice is not None
    assert stt.choice.how == UNMEASURED and "no calibration of cpu" in stt.choice.why


def test_a_set_model_predicted_slow_is_loaded_with_a_warning_note(ladder):
    config = EngineConfig().with_overrides({"llm.model": "Qwen/Qwen3-4B-Instruct-2507"})
    llm = resolve_placements(config, CPU_ONLY, hub=_ReachableHub(),
                             calibration=lambda kind: machine(ladder, 4.0, kind))["llm"]
    assert llm.model == "Qwen/Qwen3-4B-Instruct-2507"
    assert any(n.startswith("llm: warning: Qwen/Qwen3-4B-Instruct-2507 is predicted ")
               and "llm.model = auto picks smollm2-360m-instruct" in n for n in llm.notes)
