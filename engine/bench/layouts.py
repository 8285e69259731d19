"""Layouts for ``parley-cli bench --layouts``: which device each stage runs on.

A layout is a named set of settings. ``SPEC`` is either a list, each ``;`` one layout and
each ``stage=device`` one setting (``all=X`` sets the global ``device``; a dotted key such
as ``stt.model=DIR`` sets that setting as is)::

    all=cpu;stt=mlx,llm=mlx;stt=cpu,llm=cuda:0,tts=cuda:1

or a TOML file with one table per layout, named by its key::

    [layouts.cpu]
    all = "cpu"

    [layouts.split]
    stt = "cpu"
    llm = "cuda:0"
    "llm.dtype" = "float16"

Everything here runs before any model loads: parsing, then ``resolve_layouts`` places
every stage of every layout (an unknown device, a device this machine lacks, a backend
that cannot run there) so a bad layout fails before the first one loads.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from engine.config import STAGES, EngineConfig
from engine.runtime.devices import DeviceInfo, discover_devices, parse_device
from engine.errors import ConfigError, ParleyError
from engine.models.placement import Placement, resolve_placements

ALL = "all"


@dataclass(frozen=True)
class Layout:
    """One layout: its label and the settings it overrides (``{"stt.device": "cpu"}``)."""

    label: str
    overrides: dict[str, str] = field(default_factory=dict)


def _setting(layout: str, key: str, value: str, seen: set[str]) -> tuple[str, str]:
    key, value = key.strip(), str(value).strip()
    if not key or not value:
        raise ConfigError(f"layout {layout!r}: expected STAGE=DEVICE, got {key!r}={value!r}")
    if "." in key:
        dotted = key
    elif key == ALL:
        dotted = "device"
    elif key in STAGES:
        dotted = f"{key}.device"
    else:
        raise ConfigError(f"layout {layout!r}: unknown stage {key!r}; stages are "
                          f"{ALL}, {', '.join(STAGES)} (or a dotted setting such as stt.model)")
    if dotted in seen:
        raise ConfigError(f"layout {layout!r} sets {key!r} twice")
    seen.add(dotted)
    if dotted == "device" or dotted.endswith(".device"):
        parse_device(value, dotted)  # DeviceError: not a device at all
    return dotted, value


def _layout(label: str, pairs: list[tuple[str, str]]) -> Layout:
    seen: set[str] = set()
    if not pairs:
        raise ConfigError(f"layout {label!r} sets nothing")
    return Layout(label, dict(_setting(label, k, v, seen) for k, v in pairs))


def parse_layouts(spec: str) -> list[Layout]:
    """``SPEC`` (a TOML file or ``a=x,b=y;c=z``) -> layouts, or a ParleyError."""
    spec = spec.strip()
    if spec.endswith(".toml") or Path(spec).is_file():
        return _toml_layouts(Path(spec))
    layouts = []
    for part in spec.split(";"):
        part = part.strip()
        if not part:
            raise ConfigError(f"--layouts {spec!r}: an empty layout (two ';' in a row, or one at "
                              "the end)")
        pairs = []
        for item in part.split(","):
            key, sep, value = item.partition("=")
            if not sep:
                raise ConfigError(f"layout {part!r}: expected STAGE=DEVICE, got {item.strip()!r}")
            pairs.append((key, value))
        layouts.append(_layout(part, pairs))
    _check_distinct(layouts)
    return layouts


def _toml_layouts(path: Path) -> list[Layout]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"--layouts: no such file: {path}") from None
    except OSError as exc:
        raise ConfigError(f"--layouts: cannot read {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--layouts: {path} is not valid TOML: {exc}") from None
    tables = data.get("layouts")
    if not isinstance(tables, dict) or not tables or set(data) != {"layouts"}:
        raise ConfigError(f"--layouts: {path} must hold only [layouts.NAME] tables, at least one")
    layouts = []
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise ConfigError(f"--layouts: {path}: layouts.{name} must be a table")
        flat = _flatten(table)
        layouts.append(_layout(name, list(flat.items())))
    _check_distinct(layouts)
    return layouts


def _flatten(table: dict, prefix: str = "") -> dict[str, str]:
    """``{"stt": {"model": "x"}}`` (TOML dotted keys) -> ``{"stt.model": "x"}``;
    ``stt = "cpu"`` stays a stage."""
    out: dict[str, str] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def _check_distinct(layouts: list[Layout]) -> None:
    labels = [layout.label for layout in layouts]
    for label in labels:
        if labels.count(label) > 1:
            raise ConfigError(f"--layouts: layout {label!r} is given twice")


@dataclass(frozen=True)
class ResolvedLayout:
    layout: Layout
    config: EngineConfig
    placements: dict[str, Placement]

    @property
    def label(self) -> str:
        return self.layout.label


def resolve_layouts(base: EngineConfig, layouts: list[Layout],
                    devices: list[DeviceInfo] | None = None, hub=None) -> list[ResolvedLayout]:
    """Each layout's config and placements; the first impossible one raises, naming it."""
    devices = devices if devices is not None else discover_devices()
    out = []
    for layout in layouts:
        try:
            config = base.with_overrides(layout.overrides)
            placements = resolve_placements(config, devices, hub=hub)
        except ParleyError as exc:
            exc.args = (f"layout {layout.label!r}: {exc}",)
            raise
        out.append(ResolvedLayout(layout, config, placements))
    return out
