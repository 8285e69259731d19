"""The Benchmark tab: device layouts compared."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.bench.panel import BenchPanel
    from app.core.window_api import WindowApi


def install(window: WindowApi) -> BenchPanel:
    """Add the Benchmark tab to ``window``: layouts compared on engines (and models) of
    its own, never while the desktop's models load; "Use this layout" applies the
    fastest layout's devices as the Settings tab's Apply does. Returns the ``BenchPanel``."""
    # Imported here, not at the top: the controller's module can be imported alone.
    from app.bench.controller import BenchController
    from app.bench.panel import BenchPanel
    from engine.errors import ParleyError

    c = window.controller
    bench = BenchController(lambda: c.config, window.widget,
                            blocked=lambda: "the models are loading" if c.busy else None)
    panel = BenchPanel(bench, lambda: c.config)
    window.add_tab("Benchmark", panel)
    c.devices_found.connect(panel.set_devices)

    def use_layout(overrides: dict) -> None:
        try:
            config = c.config.with_overrides(overrides)
        except ParleyError as exc:
            window.banner.show_message(f"Could not use the layout: {exc}")
            return
        window.apply_config(config, "Devices set from the Benchmark tab; applying…")

    panel.use_layout.connect(use_layout)
    window.on_close(bench.shutdown)
    return panel
