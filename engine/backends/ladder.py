"""The model ladder: per stage, the models Parley can run, smallest first, as data.

``resources/ladder.toml`` lists each model once (a ``Rung``): its hub id, family,
parameters, licence, languages, whether it calls tools and thinks, the published accuracy
it can cite, the architecture config in ``resources/hub_configs/``, and per device kind a
``Build``: the backend of the registry that runs it, the repo that backend loads, the
precision and the bytes it downloads. Figures that could not be verified are the string
``"unknown"`` in the file (TOML has no null) and None here.

``load_ladder`` checks everything and refuses a bad file with a ConfigError naming the
file, the rung, the field, the value and what is allowed: an unknown key, a wrong type,
a backend the registry does not have for that stage or device kind, an unknown device
kind, a duplicate id, a missing architecture config, an English-only model (``.en``)
claiming other languages, rungs out of order of size within a stage and device kind.
``engine.models.stack_choice`` picks from it with a calibration's predictions; only file
reads here, no hub request, no heavy import.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.backends import BackendRegistry
from engine.errors import ConfigError
from engine.runtime.devices import DEVICE_KINDS

RESOURCES = Path(__file__).resolve().parents[2] / "resources"
DEFAULT_LADDER = RESOURCES / "ladder.toml"
HUB_CONFIGS = RESOURCES / "hub_configs"

SCHEMA = 1
STAGES = ("stt", "llm", "tts")
#: Device kinds a build may name: every kind but ``remote`` (a server runs its own models).
BUILD_DEVICE_KINDS = tuple(kind for kind in DEVICE_KINDS if kind != "remote")
THINKING = ("hybrid", "none")
PRECISIONS = ("fp32", "fp16", "bf16", "int8", "int4", "8-bit", "4-bit")
UNKNOWN = "unknown"  # a figure that could not be verified
MULTILINGUAL = "multilingual"  # many languages, no list (the card claims them)
NO_CONFIG = "none"  # no architecture config (a Piper voice)

_ID = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_LANGUAGE = re.compile(r"^[a-z]{2,3}$")
_ENGLISH_ONLY_NAME = re.compile(r"\.en(?![a-z])")  # whisper-tiny.en, faster-whisper-base.en-mlx

_RUNG_REQUIRED = ("id", "stage", "family", "hub_id", "parameters", "licence", "languages",
                  "english_only", "tools", "thinking", "hub_config", "builds")
_RUNG_OPTIONAL = ("parameters_estimated", "accuracy")
_BUILD_REQUIRED = ("backend", "repo", "precision", "download_bytes")
_BUILD_OPTIONAL = ("download_estimated",)
_LICENCE_KEYS = ("name", "osi", "url")
_ACCURACY_KEYS = ("metric", "value", "benchmark", "source")
#: Stages whose rungs must cite an accuracy (its value may be "unknown").
_ACCURACY_STAGES = ("stt", "llm")


@dataclass(frozen=True, slots=True)
class Licence:
    """A model's licence: its name, whether it is OSI-approved open source, and where to read it."""

    name: str
    osi: bool
    url: str


@dataclass(frozen=True, slots=True)
class Accuracy:
    """A published accuracy figure: ``value`` (None: not verified) in ``metric`` on
    ``benchmark``, as ``source`` states it."""

    metric: str
    value: float | None
    benchmark: str
    source: str


@dataclass(frozen=True, slots=True)
class Build:
    """How one device kind runs a rung: ``backend`` (a registry name) loads ``repo`` at
    ``precision``; ``download_bytes`` is None when unknown, ``download_estimated`` when it
    was computed rather than read from the hub's file listing."""

    device_kind: str
    backend: str
    repo: str
    precision: str
    download_bytes: int | None
    download_estimated: bool = False


@dataclass(frozen=True, slots=True)
class Rung:
    """One model of the ladder. ``languages`` are ISO 639 codes; ``any_language`` is True
    (and ``languages`` empty) for a model whose card claims many languages without a list.
    ``hub_config`` is its ``config.json`` (None: it has none). ``builds`` are in the
    file's order."""

    id: str
    stage: str
    family: str
    hub_id: str
    parameters: int
    licence: Licence
    languages: tuple[str, ...]
    any_language: bool
    english_only: bool
    tools: bool
    thinking: str
    hub_config: Path | None
    builds: tuple[Build, ...]
    accuracy: Accuracy | None = None
    parameters_estimated: bool = False

    def build(self, device_kind: str) -> Build | None:
        """The build for ``device_kind``, or None when this rung has none."""
        return next((b for b in self.builds if b.device_kind == device_kind), None)

    def speaks(self, language: str) -> bool:
        """Whether this model handles ``language`` (an ISO 639 code)."""
        return self.any_language or language in self.languages


@dataclass(frozen=True, slots=True)
class Ladder:
    """The rungs of one ladder file, in the file's order (smallest first per stage)."""

    path: Path
    rungs: tuple[Rung, ...]

    def get(self, rung_id: str) -> Rung:
        """The rung ``rung_id``; a ConfigError lists the ids."""
        for rung in self.rungs:
            if rung.id == rung_id:
                return rung
        raise ConfigError(f"{self.path}: no rung {rung_id!r}; rungs: "
                          f"{', '.join(r.id for r in self.rungs)}")

    def rungs_for(self, stage: str, device_kind: str) -> tuple[Rung, ...]:
        """The rungs of ``stage`` with a build for ``device_kind``, smallest first."""
        return tuple(r for r in self.rungs if r.stage == stage and r.build(device_kind) is not None)


@functools.cache
def shipped_ladder() -> Ladder:
    """The ladder Parley ships (``resources/ladder.toml``), read and checked once per
    process."""
    return load_ladder()


def load_ladder(path: Path | str = DEFAULT_LADDER, *, configs: Path = HUB_CONFIGS,
                registry: BackendRegistry | None = None) -> Ladder:
    """Read and check the ladder at ``path``; ``configs`` holds the architecture configs
    (``NAME/config.json``), ``registry`` the backends (the default registry)."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"cannot read the model ladder {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    return _Reader(path, configs, registry or BackendRegistry()).ladder(data)


class _Reader:
    """Checks one file's data and builds its rungs; every error names the file."""

    def __init__(self, path: Path, configs: Path, registry: BackendRegistry) -> None:
        self.path = path
        self.configs = configs
        self.registry = registry
        self.language_sets: dict[str, tuple[str, ...]] = {}

    def fail(self, where: str, message: str) -> ConfigError:
        return ConfigError(f"{self.path}: {where}: {message}")

    def ladder(self, data: dict[str, Any]) -> Ladder:
        self.keys(data, "the file", required=("schema", "rung"), optional=("language_sets",))
        if data["schema"] != SCHEMA or isinstance(data["schema"], bool):
            raise self.fail("the file", f"'schema' = {data['schema']!r} is not supported; "
                                        f"allowed: {SCHEMA}")
        self.language_sets = self.sets(data.get("language_sets", {}))
        entries = data["rung"]
        if not isinstance(entries, list) or not entries:
            raise self.fail("the file", "'rung' must be a non-empty array of tables ([[rung]])")
        rungs: list[Rung] = []
        for number, entry in enumerate(entries, 1):
            rung = self.rung(entry, number)
            earlier = next((r for r in rungs if r.id == rung.id), None)
            if earlier is not None:
                raise self.fail(f"rung {number}", f"'id' = {rung.id!r} is a duplicate: an "
                                                  "earlier rung has that id; ids must be unique")
            rungs.append(rung)
        self.check_order(rungs)
        return Ladder(self.path, tuple(rungs))

    # ------------------------------------------------------------------------ parts
    def keys(self, table: Any, where: str, required: tuple[str, ...],
             optional: tuple[str, ...] = ()) -> None:
        """``table`` is a table holding every ``required`` key and nothing else but ``optional``."""
        if not isinstance(table, dict):
            raise self.fail(where, f"expected a table, got {_kind(table)} ({table!r})")
        # Unknown keys first: a misspelt key is also a missing one, and its name is the clue.
        unknown = [key for key in table if key not in required + optional]
        if unknown:
            raise self.fail(where, f"unknown field '{unknown[0]}'; allowed: "
                                   f"{', '.join(required + optional)}")
        missing = [key for key in required if key not in table]
        if missing:
            raise self.fail(where, f"missing field '{missing[0]}'; required: {', '.join(required)}")

    def sets(self, table: Any) -> dict[str, tuple[str, ...]]:
        if not isinstance(table, dict):
            raise self.fail("language_sets", f"expected a table, got {_kind(table)}")
        return {name: self.codes(codes, f"language_sets.{name}") for name, codes in table.items()}

    def codes(self, codes: Any, where: str) -> tuple[str, ...]:
        if not isinstance(codes, list) or not codes:
            raise self.fail(where, f"{codes!r} is not a non-empty list of ISO 639 codes")
        for code in codes:
            if not isinstance(code, str) or not _LANGUAGE.match(code):
                raise self.fail(where, f"{code!r} is not an ISO 639 code (2 or 3 lower-case "
                                       "letters, e.g. 'en', 'haw')")
        if len(set(codes)) != len(codes):
            twice = next(c for c in codes if codes.count(c) > 1)
            raise self.fail(where, f"{twice!r} is listed twice")
        return tuple(codes)

    def rung(self, entry: Any, number: int) -> Rung:
        label = f"rung {number}"
        if isinstance(entry, dict) and isinstance(entry.get("id"), str):
            label = f"rung {entry['id']!r}"
        self.keys(entry, label, _RUNG_REQUIRED, _RUNG_OPTIONAL)
        field = _Fields(self, label, entry)
        rung_id = field.text("id", pattern=_ID, allowed="lower-case letters, digits, '.', '_', '-'")
        stage = field.choice("stage", STAGES)
        languages, any_language = self.rung_languages(field)
        english_only = field.flag("english_only")
        rung = Rung(
            id=rung_id, stage=stage,
            family=field.text("family", pattern=_ID, allowed="a lower-case name like 'qwen3'"),
            hub_id=field.text("hub_id"),
            parameters=field.count("parameters"),
            parameters_estimated=field.flag("parameters_estimated", default=False),
            licence=self.licence(entry["licence"], label),
            languages=languages, any_language=any_language, english_only=english_only,
            tools=field.flag("tools"),
            thinking=field.choice("thinking", THINKING),
            hub_config=self.hub_config(field),
            accuracy=self.accuracy(entry.get("accuracy"), label, stage),
            builds=self.builds(entry["builds"], label, stage),
        )
        self.check_rung(rung, label)
        return rung

    def rung_languages(self, field: _Fields) -> tuple[tuple[str, ...], bool]:
        value = field.table["languages"]
        if value == MULTILINGUAL:
            return (), True
        if isinstance(value, str):
            if value not in self.language_sets:
                raise field.bad("languages", value, "a list of ISO 639 codes, "
                                f"'{MULTILINGUAL}', or a [language_sets] name: "
                                f"{', '.join(self.language_sets) or '(none defined)'}")
            return self.language_sets[value], False
        return self.codes(value, f"{field.where}: 'languages'"), False

    def licence(self, table: Any, where: str) -> Licence:
        where = f"{where}: 'licence'"
        self.keys(table, where, _LICENCE_KEYS)
        field = _Fields(self, where, table)
        return Licence(field.text("name"), field.flag("osi"), field.url("url"))

    def accuracy(self, table: Any, where: str, stage: str) -> Accuracy | None:
        if table is None:
            if stage in _ACCURACY_STAGES:
                raise self.fail(where, f"missing field 'accuracy'; {stage} rungs cite one "
                                       f"(its value may be '{UNKNOWN}')")
            return None
        where = f"{where}: 'accuracy'"
        self.keys(table, where, _ACCURACY_KEYS)
        field = _Fields(self, where, table)
        value = table["value"]
        if value == UNKNOWN:
            number = None
        elif isinstance(value, (int, float)) and not isinstance(value, bool) \
                and math.isfinite(value) and value >= 0:
            number = float(value)
        else:
            raise field.bad("value", value, f"a number >= 0, or '{UNKNOWN}'")
        return Accuracy(field.text("metric"), number, field.text("benchmark"), field.url("source"))

    def hub_config(self, field: _Fields) -> Path | None:
        name = field.text("hub_config")
        if name == NO_CONFIG:
            return None
        path = self.configs / name / "config.json"
        if not path.is_file():
            raise field.bad("hub_config", name, f"a folder of {self.configs} holding config.json "
                            f"({path} does not exist), or '{NO_CONFIG}'")
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise field.bad("hub_config", name, f"a readable JSON config ({path}: {exc})") from None
        if not isinstance(config, dict):
            raise field.bad("hub_config", name, f"a JSON object in {path}")
        origin = config.get("_name_or_path")
        hub_id = field.table["hub_id"]
        if isinstance(origin, str) and origin != hub_id:
            raise field.bad("hub_config", name, f"the config of {hub_id!r} ({path} is "
                            f"{origin!r}'s)")
        return path

    def builds(self, table: Any, where: str, stage: str) -> tuple[Build, ...]:
        if not isinstance(table, dict) or not table:
            raise self.fail(where, f"'builds' must be a table of device kinds "
                                   f"({', '.join(BUILD_DEVICE_KINDS)}), got {table!r}")
        builds = []
        for kind, build in table.items():
            if kind not in BUILD_DEVICE_KINDS:
                raise self.fail(where, f"'builds.{kind}': {kind!r} is not a device kind; "
                                       f"allowed: {', '.join(BUILD_DEVICE_KINDS)}")
            builds.append(self.build(build, f"{where}: 'builds.{kind}'", stage, kind))
        return tuple(builds)

    def build(self, table: Any, where: str, stage: str, kind: str) -> Build:
        self.keys(table, where, _BUILD_REQUIRED, _BUILD_OPTIONAL)
        field = _Fields(self, where, table)
        backend = field.choice("backend", tuple(self.registry.names(stage)),
                               what=f"a {stage} backend")
        spec = self.registry.get(stage, backend)
        if kind not in spec.devices:
            raise field.bad("backend", backend, f"a backend that runs on {kind}; {backend} runs "
                            f"on {', '.join(spec.devices)}")
        size = table["download_bytes"]
        return Build(kind, backend, field.text("repo"), field.choice("precision", PRECISIONS),
                     None if size == UNKNOWN else field.count("download_bytes", unknown=True),
                     field.flag("download_estimated", default=False))

    # ----------------------------------------------------------------- consistency
    def check_rung(self, rung: Rung, where: str) -> None:
        named_en = [name for name in (rung.hub_id, *(b.repo for b in rung.builds))
                    if _ENGLISH_ONLY_NAME.search(name)]
        if named_en and not rung.english_only:
            raise self.fail(where, f"'english_only' = false, but {named_en[0]!r} is an English-"
                                   "only (.en) model; set it true and languages = [\"en\"]")
        if rung.english_only and (rung.any_language or rung.languages != ("en",)):
            shown = MULTILINGUAL if rung.any_language else list(rung.languages)
            raise self.fail(where, f"'languages' = {shown!r} contradicts english_only = true; "
                                   "allowed: [\"en\"]")
        if not rung.english_only and rung.languages == ("en",):
            raise self.fail(where, "'english_only' = false, but 'languages' is only [\"en\"]; "
                                   "set english_only = true or list the other languages")
        if rung.stage != "llm" and rung.tools:
            raise self.fail(where, f"'tools' = true on a {rung.stage} rung; only llm rungs call tools")
        if rung.stage != "llm" and rung.thinking != "none":
            raise self.fail(where, f"'thinking' = {rung.thinking!r} on a {rung.stage} rung; "
                                   "allowed: 'none'")

    def check_order(self, rungs: list[Rung]) -> None:
        """Within each stage and device kind, the rungs come smallest first."""
        for stage in STAGES:
            for kind in BUILD_DEVICE_KINDS:
                listed = [r for r in rungs if r.stage == stage and r.build(kind) is not None]
                for before, after in itertools.pairwise(listed):
                    if after.parameters < before.parameters:
                        raise self.fail(
                            f"rung {after.id!r}", f"'parameters' = {after.parameters:,} is out "
                            f"of order: it comes after {before.id!r} ({before.parameters:,}) among "
                            f"the {stage} rungs on {kind}; list rungs smallest first")


class _Fields:
    """Typed reads of one table's fields, each failing with the field's name and value."""

    def __init__(self, reader: _Reader, where: str, table: dict[str, Any]) -> None:
        self.reader = reader
        self.where = where
        self.table = table

    def bad(self, key: str, value: Any, allowed: str) -> ConfigError:
        return self.reader.fail(self.where, f"'{key}' = {value!r} is not allowed; expected "
                                            f"{allowed}")

    def text(self, key: str, pattern: re.Pattern[str] | None = None, allowed: str = "") -> str:
        value = self.table[key]
        if not isinstance(value, str) or not value.strip():
            raise self.bad(key, value, "a non-empty string")
        if pattern is not None and not pattern.match(value):
            raise self.bad(key, value, allowed)
        return value

    def url(self, key: str) -> str:
        return self.text(key, pattern=re.compile(r"^https://\S+$"), allowed="an https:// URL")

    def flag(self, key: str, default: bool | None = None) -> bool:
        value = self.table.get(key, default)
        if not isinstance(value, bool):
            raise self.bad(key, value, "true or false")
        return value

    def count(self, key: str, unknown: bool = False) -> int:
        value = self.table[key]
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise self.bad(key, value, "a whole number > 0" + (f", or '{UNKNOWN}'" if unknown else ""))
        return value

    def choice(self, key: str, choices: tuple[str, ...], what: str = "") -> str:
        value = self.table[key]
        if value not in choices:
            raise self.bad(key, value, f"{what + ': ' if what else 'one of '}{', '.join(choices)}")
        return value


def _kind(value: Any) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list", dict: "a table"}.get(type(value), type(value).__name__)

