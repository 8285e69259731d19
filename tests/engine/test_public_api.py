"""``engine`` exports Engine, EngineConfig and load_config, and importing it costs nothing."""

import json
import subprocess
import sys

import pytest

import engine

# Modules that only ``Engine`` needs: the streaming core, the stages, the backends, numpy.
HEAVY = ("engine.engine", "engine.units", "engine.pipeline", "engine.stages", "engine.models",
         "engine.backends", "engine.runtime", "engine.audio", "numpy")


def _loaded_after(code: str) -> list[str]:
    """The heavy modules in sys.modules after ``code`` runs in a fresh interpreter."""
    script = (f"import sys, json\n{code}\n"
              f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'numpy' "
              f"or m.startswith({HEAVY!r}))))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_public_names_import_from_the_package():
    from engine import Engine, EngineConfig, load_config
    from engine.config import EngineConfig as ConfigClass
    from engine.config import load_config as config_loader
    from engine.engine import Engine as EngineClass

    assert (Engine, EngineConfig, load_config) == (EngineClass, ConfigClass, config_loader)
    assert sorted(engine.__all__) == ["Engine", "EngineConfig", "load_config"]
    assert set(engine.__all__) <= set(dir(engine))


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Pipeline'"):
        engine.Pipeline  # noqa: B018


@pytest.mark.parametrize("code", ["import engine", "import engine.errors",
                                  "from engine import EngineConfig, load_config"])
def test_importing_the_package_or_its_config_loads_no_pipeline(code):
    assert _loaded_after(code) == []


def test_asking_for_engine_loads_the_pipeline():
    loaded = _loaded_after("from engine import Engine")
    assert "engine.engine" in loaded and "engine.units.unit" in loaded
