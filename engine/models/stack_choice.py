"""Which model of the ladder each stage gets: the largest that keeps the turn in budget.

``choose_stack`` is a pure function of the ladder (``engine.backends.ladder``), this
machine's calibration (``engine.models.calibration``: each rung's predicted STT time, LLM
time to first token and tokens per second, TTS first-chunk time), the device kind, the
voice-to-voice budget (``voice_budget_s``, 0.8 s on the median turn by default), the
conversation's language and the user's explicit settings. Per stage it returns the rung
chosen, why (its predicted cost against the stage's share of the budget) and the
runner-up.

How the budget is spent. The end-of-turn wait is reserved first (``END_OF_TURN_S``); the
rest is split between the stages not set by the user that have a measured rung
(``SHARES``; a stage with none is left to ``auto``'s default and gets no share), each taking the
best rung predicted within its share (the largest; for the LLM a tool-capable and
multilingual one first, then the largest). What the stages leave is offered again, LLM
first (``UPGRADE_ORDER``), so one fast stage lets another grow. A stage whose smallest
rung is already over its share takes the fastest, and says so.

Rules that no budget overrides: a rung that does not speak the language is never a
candidate (an English-only ``.en`` model for any other language; ``stt.language`` auto,
detected per turn and passed as None, needs a multilingual model); a model the user set is kept, and
gets a warning when it is predicted over its share (so does the fastest rung when even it
is over: the machine is too slow for the budget); a backend the user set limits the
candidates to that backend's builds. With no calibration of this device kind, nothing is
chosen by budget: every stage says so and ``auto`` keeps its default by name.

A stage's cost on the median turn: STT, one call at the fitted window (``stt_s``); LLM,
a later turn's first token (the new tokens on the kept KV cache,
``llm_turn_first_token_s``; the first turn's whole prompt is slower and happens once) plus
the first clause's tokens (``FIRST_CLAUSE_TOKENS``) at the measured rate; TTS, the first
chunk. Only data here: no model, no heavy import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.config import EngineConfig
from engine.backends.ladder import STAGES, Build, Ladder, Rung
from engine.models.model_catalog import human_size

if TYPE_CHECKING:
    from engine.models.calibration import Calibration, RungCost

DEFAULT_BUDGET_S = 0.8
#: The end-of-turn wait kept out of the stages' budget: the bundled stack's measured
#: silence wait on jfk.flac (65 ms of its 0.48 s p50, docs in DESIGN.md "Latency budget").
END_OF_TURN_S = 0.065
#: Tokens of the reply's first clause, the LLM's part of the turn: ``tts.first_clause_words``
#: is 3 by default; three words and the break after them come to about 6 tokens.
FIRST_CLAUSE_TOKENS = 6
#: Each stage's share of the budget left after the end-of-turn wait. On the bundled stack
#: (this 2-core CPU) STT took 117 ms, the LLM's first clause 134 ms, TTS 101 ms; the LLM's
#: size buys the most (answers, tools, languages), TTS the least.
SHARES = {"stt": 0.35, "llm": 0.45, "tts": 0.20}
#: Who gets what the other stages left, first to last.
UPGRADE_ORDER = ("llm", "stt", "tts")

BUDGET = "budget"  # chosen by the budget
EXPLICIT = "explicit"  # the user's setting, kept
UNMEASURED = "unmeasured"  # no calibration: auto's default by name
NONE = "none"  # no rung of the ladder fits the language, device kind or backend

Usable = Callable[[str, str], bool]  # (stage, backend) -> installed


@dataclass(frozen=True, slots=True)
class Candidate:
    """A rung as ``device_kind`` runs it, with its predicted cost on the median turn
    (None: not measured) and the calibration's figures for it."""

    rung: Rung
    build: Build
    cost_s: float | None
    measured: RungCost | None = None

    def latency_text(self) -> str:
        """``0.21 s on this machine`` or ``not measured here``."""
        return "not measured here" if self.cost_s is None else f"{self.cost_s:.2f} s on this machine"

    def size_text(self) -> str:
        """The download: ``1.6 GB``, ``about 988 MB`` (computed), ``size unknown``."""
        size = self.build.download_bytes
        if size is None:
            return "size unknown"
        return ("about " if self.build.download_estimated else "") + human_size(size)


@dataclass(frozen=True, slots=True)
class StageChoice:
    """What one stage gets and why. ``how``: ``budget``, ``explicit``, ``unmeasured`` or
    ``none``; ``chosen`` is None unless the ladder holds the model (a user's own model may
    not be in it). ``share_s``: the seconds the budget allowed the stage. ``warning``: a
    choice expected to be slow, ending with ``fix``, what to do (a placement note and a
    doctor warning)."""

    stage: str
    how: str
    why: str
    chosen: Candidate | None = None
    runner_up: Candidate | None = None
    share_s: float | None = None
    warning: str | None = None
    fix: str = ""

    @property
    def model(self) -> str | None:
        """The repo the chosen build loads, or None."""
        return None if self.chosen is None else self.chosen.build.repo

    def runner_up_text(self) -> str:
        """``runner-up whisper-small.en (0.52 s, 484 MB)``, or ``no runner-up``."""
        other = self.runner_up
        if other is None:
            return "no runner-up"
        return f"runner-up {other.rung.id} ({other.latency_text()}, {other.size_text()})"


@dataclass(frozen=True, slots=True)
class StackChoice:
    """The choice for every stage of one device kind; ``measured``: a calibration of this
    kind was used; ``source``: where its figures come from (machine, Parley version)."""

    device_kind: str
    budget_s: float
    language: str | None
    measured: bool
    source: str
    stages: Mapping[str, StageChoice] = field(default_factory=dict)

    @property
    def predicted_s(self) -> float | None:
        """The predicted voice-to-voice time of the median turn, or None when a stage's
        cost is unknown."""
        costs = [c.chosen.cost_s if c.chosen else None for c in self.stages.values()]
        if not costs or any(c is None for c in costs):
            return None
        return END_OF_TURN_S + sum(c for c in costs if c is not None)

    def summary(self) -> str:
        """One line: the predicted turn against the budget, or why nothing was measured."""
        if not self.measured:
            return (f"not sized to this machine yet: no calibration of {self.device_kind} here, "
                    "so auto keeps its defaults by name")
        total = self.predicted_s
        unknown = [c.stage for c in self.stages.values() if c.chosen is None or c.chosen.cost_s is None]
        shown = f"unknown ({', '.join(unknown)}: no prediction)" if total is None else f"{total:.2f} s"
        return (f"predicted voice-to-voice {shown} on the median turn against a "
                f"{self.budget_s:.2f} s budget ({self.source})")


# ----------------------------------------------------------------------------- costs
def stage_cost(stage: str, cost: RungCost) -> float | None:
    """The predicted seconds ``stage`` adds to the median turn, from one rung's figures."""
    if stage == "stt":
        return cost.stt_s
    if stage == "llm":
        # A later turn's first token (the KV cache kept from the turns before), the median
        # turn's; a calibration without it has only the first turn's, which is slower.
        first = (cost.llm_turn_first_token_s if cost.llm_turn_first_token_s is not None
                 else cost.llm_first_token_s)
        if first is None or not cost.llm_tokens_per_s:
            return None
        return first + FIRST_CLAUSE_TOKENS / cost.llm_tokens_per_s
    return cost.tts_first_chunk_s


def speaks(rung: Rung, language: str | None) -> bool:
    """Whether ``rung`` can serve a conversation in ``language`` (None: detected per turn,
    so any language: never an English-only model)."""
    if language is None:
        return not rung.english_only
    return rung.speaks(language)


def candidates(ladder: Ladder, calibration: Calibration | None, device_kind: str, stage: str,
               language: str | None, *, backend: str | None = None,
               usable: Usable | None = None) -> list[Candidate]:
    """The rungs of ``stage`` that ``device_kind`` runs and that speak ``language``
    (limited to ``backend``'s builds, and to installed backends with ``usable``),
    smallest first, each with its predicted cost."""
    costs = calibration.costs if _applies(calibration, device_kind) and calibration else {}
    found = []
    for rung in ladder.rungs_for(stage, device_kind):
        build = rung.build(device_kind)
        if build is None or not speaks(rung, language):
            continue
        if (backend is not None and build.backend != backend) or (
                usable is not None and not usable(stage, build.backend)):
            continue
        measured = costs.get(rung.id)
        found.append(Candidate(rung, build, None if measured is None else stage_cost(stage, measured),
                               measured))
    return found


def find_rung(ladder: Ladder, model: str) -> Rung | None:
    """The rung whose hub id or one of whose builds' repos is ``model``, or None."""
    for rung in ladder.rungs:
        if model == rung.hub_id or any(model == b.repo for b in rung.builds):
            return rung
    return None


def gains(current: Rung | None, offer: Rung) -> list[str]:
    """What ``offer`` adds over ``current`` (None: nothing known of it), in a few words
    each: tools, languages, a better published accuracy on the same benchmark."""
    out: list[str] = []
    if offer.tools and not (current is not None and current.tools):
        out.append("calls tools")
    if offer.any_language:
        if current is None or not current.any_language:
            out.append("many languages")
    elif len(offer.languages) > 1 and (current is None or (
            not current.any_language and len(offer.languages) > len(current.languages))):
        out.append(f"{len(offer.languages)} languages")
    accuracy = offer.accuracy
    if accuracy is not None and accuracy.value is not None:
        before = current.accuracy if current is not None else None
        same = before is not None and before.value is not None and before.benchmark == accuracy.benchmark
        lower_better = accuracy.metric.upper() == "WER"
        if same and before is not None and before.value is not None:
            better = accuracy.value < before.value if lower_better else accuracy.value > before.value
            if better:
                out.append(f"{accuracy.metric} {accuracy.value:g} (now {before.value:g})")
        elif not same:
            out.append(f"{accuracy.metric} {accuracy.value:g} ({_benchmark_name(accuracy.benchmark)})")
    return out


# ----------------------------------------------------------------------------- choice
def choose_stack(ladder: Ladder, calibration: Calibration | None, device_kind: str, *,
                 budget_s: float = DEFAULT_BUDGET_S, language: str | None = "en",
                 models: Mapping[str, str] | None = None, backends: Mapping[str, str] | None = None,
                 usable: Usable | None = None) -> StackChoice:
    """Per stage of the ladder (stt, llm, tts), the rung to load on ``device_kind`` (see
    the module doc). ``models``/``backends``: the stages' models and backends the user set
    (leave out the ones set to auto); ``usable(stage, backend)``: whether that backend is
    installed (default: all are)."""
    models = dict(models or {})
    backends = dict(backends or {})
    measured = _applies(calibration, device_kind)
    source = (f"calibrated on {calibration.machine}, Parley {calibration.parley_version}"
              if measured and calibration is not None else "")
    pools = {stage: candidates(ladder, calibration, device_kind, stage, language,
                               backend=backends.get(stage), usable=usable) for stage in STAGES}
    auto = _by_budget(pools, budget_s, {}) if measured else {}
    fixed = {stage: _explicit(ladder, pools, stage, model, device_kind, calibration)
             for stage, model in models.items() if stage in STAGES}
    chosen = _by_budget(pools, budget_s, fixed) if measured else {}
    stages: dict[str, StageChoice] = {}
    for stage in STAGES:
        if stage in fixed:
            stages[stage] = _explain_explicit(stage, models[stage], fixed[stage], auto.get(stage),
                                              budget_s, device_kind)
        elif stage in chosen:
            stages[stage] = chosen[stage]
        elif not pools[stage]:
            stages[stage] = StageChoice(stage, NONE, _no_rung(stage, device_kind, language,
                                                              backends.get(stage)))
        else:
            stages[stage] = StageChoice(stage, UNMEASURED, (
                f"not measured: no calibration of {device_kind} here, so auto keeps its "
                "default by name" if not measured else
                f"none of the {len(pools[stage])} {stage} rungs is measured on {device_kind}; "
                "auto keeps its default by name"))
    return StackChoice(device_kind, budget_s, language, measured, source, stages)


def _applies(calibration: Calibration | None, device_kind: str) -> bool:
    return calibration is not None and calibration.device_kind == device_kind


def _explicit(ladder: Ladder, pools: Mapping[str, list[Candidate]], stage: str, model: str,
              device_kind: str, calibration: Calibration | None) -> Candidate | None:
    """The user's model as a candidate when the ladder knows it, else None."""
    for candidate in pools[stage]:
        if model in (candidate.build.repo, candidate.rung.hub_id):
            return candidate
    rung = find_rung(ladder, model)
    build = rung.build(device_kind) if rung is not None else None
    if rung is None or build is None:
        return None
    measured = calibration.costs.get(rung.id) if _applies(calibration, device_kind) and calibration else None
    return Candidate(rung, build, None if measured is None else stage_cost(stage, measured), measured)


def _rank(stage: str, candidate: Candidate, index: int) -> tuple:
    """Better is larger; for the LLM a tool-capable, multilingual rung comes before size."""
    rung = candidate.rung
    if stage == "llm":
        return (rung.tools, not rung.english_only, rung.parameters, index)
    return (rung.parameters, index)


def _best(stage: str, pool: list[Candidate], limit: float) -> Candidate | None:
    fitting = [(i, c) for i, c in enumerate(pool) if c.cost_s is not None and c.cost_s <= limit]
    if not fitting:
        return None
    return max(fitting, key=lambda item: _rank(stage, item[1], item[0]))[1]


def _by_budget(pools: Mapping[str, list[Candidate]], budget_s: float,
               fixed: Mapping[str, Candidate | None]) -> dict[str, StageChoice]:
    """The budget's pick for every stage not in ``fixed`` that has a measured rung."""
    spent = sum(c.cost_s for c in fixed.values() if c is not None and c.cost_s is not None)
    free = [s for s in STAGES if s not in fixed and any(c.cost_s is not None for c in pools[s])]
    left = max(0.0, budget_s - END_OF_TURN_S - spent)
    weight = sum(SHARES[s] for s in free) or 1.0
    share = {s: left * SHARES[s] / weight for s in free}
    pick: dict[str, Candidate] = {}
    over: set[str] = set()
    for stage in free:
        measured = [c for c in pools[stage] if c.cost_s is not None]
        best = _best(stage, measured, share[stage])
        if best is None:  # even the fastest is over its share: take the fastest
            best = min(measured, key=lambda c: c.cost_s or 0.0)
            over.add(stage)
        pick[stage] = best
    leftover = left - sum(c.cost_s or 0.0 for c in pick.values())
    for stage in UPGRADE_ORDER:
        if stage not in pick or stage in over or leftover <= 0:
            continue
        now = pick[stage]
        allowed = (now.cost_s or 0.0) + leftover
        better = _best(stage, [c for c in pools[stage] if c.cost_s is not None], allowed)
        if better is not None and better is not now:
            leftover -= (better.cost_s or 0.0) - (now.cost_s or 0.0)
            pick[stage] = better
            share[stage] = max(share[stage], allowed)
    return {stage: _explain_budget(stage, pools[stage], pick[stage], share[stage], budget_s,
                                   over=stage in over) for stage in free}


def _runner_up(stage: str, pool: list[Candidate], chosen: Candidate) -> Candidate | None:
    """The next rung up (what more budget would buy), else the next one down."""
    ranked = sorted(((_rank(stage, c, i), c) for i, c in enumerate(pool)), key=lambda t: t[0])
    place = next(i for i, (_r, c) in enumerate(ranked) if c is chosen)
    if place + 1 < len(ranked):
        return ranked[place + 1][1]
    return ranked[place - 1][1] if place > 0 else None


def _explain_budget(stage: str, pool: list[Candidate], chosen: Candidate, share: float,
                    budget_s: float, *, over: bool) -> StageChoice:
    cost = chosen.cost_s or 0.0
    warning, fix = None, ""
    if over:
        why = (f"{chosen.rung.id}: the fastest {stage} rung here, and still predicted "
               f"{cost:.2f} s, over its {share:.2f} s share of the {budget_s:.2f} s budget")
        fix = (f"raise voice_budget_s, or place the {stage} on a faster device ({stage}.device) "
               f"or a server ({stage}.base_url)")
        warning = (f"{stage}: warning: {chosen.build.repo} is the fastest {stage} model of the "
                   f"ladder here and is still predicted {cost:.2f} s per turn on "
                   f"{chosen.build.device_kind}, over its {share:.2f} s share of the "
                   f"{budget_s:.2f} s voice-to-voice budget: replies will start later; {fix}")
    else:
        why = (f"{chosen.rung.id}: predicted {cost:.2f} s on the median turn, within its "
               f"{share:.2f} s share of the {budget_s:.2f} s budget")
    if stage == "stt" and chosen.measured is not None and chosen.measured.stt_30s_s is not None:
        why += f" (an unsure decode re-runs at 30 s: {chosen.measured.stt_30s_s:.2f} s)"
    first = chosen.measured.llm_first_token_s if chosen.measured is not None else None
    if stage == "llm" and first is not None and chosen.measured is not None \
            and chosen.measured.llm_turn_first_token_s is not None:
        why += f" (a conversation's first turn prefills the whole prompt: {first:.2f} s to its first token)"
    return StageChoice(stage, BUDGET, why, chosen, _runner_up(stage, pool, chosen), share, warning,
                       fix)


def _explain_explicit(stage: str, model: str, chosen: Candidate | None, auto: StageChoice | None,
                      budget_s: float, device_kind: str) -> StageChoice:
    """The user's model, kept; a warning when it is predicted over its share."""
    share = max(0.0, budget_s - END_OF_TURN_S) * SHARES[stage]
    if chosen is None or chosen.cost_s is None:
        known = "not in the model ladder" if chosen is None else "not measured here"
        return StageChoice(stage, EXPLICIT, f"{model}: set in the config (kept; {known})", chosen,
                           auto.chosen if auto else None)
    why = (f"{chosen.rung.id}: set in the config (kept), predicted {chosen.cost_s:.2f} s "
           f"against a {share:.2f} s share of the {budget_s:.2f} s budget")
    warning, fix = None, ""
    if chosen.cost_s > share:
        fix = (f"{stage}.model = auto picks {auto.chosen.rung.id} ({auto.chosen.latency_text()})"
               if auto is not None and auto.chosen is not None and auto.chosen is not chosen
               else f"choose a smaller {stage} model, or raise voice_budget_s")
        warning = (f"{stage}: warning: {model} is predicted {chosen.cost_s:.2f} s per turn on "
                   f"{device_kind}, over its {share:.2f} s share of the {budget_s:.2f} s "
                   f"voice-to-voice budget: replies will start later; {fix}")
    return StageChoice(stage, EXPLICIT, why, chosen, auto.chosen if auto else None, share, warning,
                       fix)


def _no_rung(stage: str, device_kind: str, language: str | None, backend: str | None) -> str:
    said = f"'{language}'" if language else "a detected language"
    limit = f" with backend {backend}" if backend else ""
    return (f"no {stage} model of the ladder runs on {device_kind}{limit} and speaks {said}; "
            "auto keeps its default by name")


def _benchmark_name(benchmark: str) -> str:
    """The benchmark's name without its parenthesised detail: ``LibriSpeech test-clean``."""
    return benchmark.split(" (")[0].split(",")[0]


def choose_for_config(config: EngineConfig, ladder: Ladder, calibration: Calibration | None,
                      device_kind: str, *, usable: Usable | None = None) -> StackChoice:
    """``choose_stack`` with what ``config`` sets: its budget, ``stt.language``, and each
    stage's model and backend that are not ``auto`` (a remote stage runs the server's model,
    so the ladder has nothing for it)."""
    models, backends = {}, {}
    for stage in STAGES:
        section = config.stage_config(stage)
        if section.model != "auto":
            models[stage] = section.model
        if section.backend != "auto":
            backends[stage] = section.backend
        elif section.device == "remote":
            backends[stage] = "openai"
    return choose_stack(ladder, calibration, device_kind, budget_s=config.voice_budget_s,
                        language=config.stt.spoken_language, models=models, backends=backends,
                        usable=usable)
