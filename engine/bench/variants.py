"""The settings a bench measures side by side: ``--variant`` sets and ``--compare`` values.

``parley-cli bench INPUT`` (``engine.cli.converse``) and ``parley-cli bench --quality``
(``engine.bench.quality``) read them the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.config import EngineConfig
from engine.errors import ParleyError


def bench_variants(config: EngineConfig, compare: list[str],
                   sets: Sequence[str] = ()) -> list[tuple[str, EngineConfig]]:
    """``--variant k=v,k2=v2`` (each a full set) and ``--compare key=a,b`` (cartesian)
    -> [(label, config), ...]."""
    variants = [("", config)]
    if sets:
        variants = []
        for spec in sets:
            pairs = [item.partition("=") for item in spec.split(",")]
            if any(not sep or not key for key, sep, _v in pairs):
                raise ParleyError(f"--variant {spec!r}: expected KEY=VALUE[,KEY=VALUE]")
            variants.append((spec, config.with_overrides({k: v for k, _s, v in pairs})))
    for spec in compare:
        key, sep, values = spec.partition("=")
        if not sep or not values:
            raise ParleyError(f"--compare {spec!r}: expected KEY=VALUE1,VALUE2 "
                              "(e.g. turns.speculative=false,true)")
        variants = [(f"{label} {key}={value}".strip(), cfg.with_overrides({key: value}))
                    for label, cfg in variants for value in values.split(",")]
    return variants
