"""The install lock: pyproject.toml's requirements are all pinned in
packaging/requirements.lock.txt, every install the project runs passes the lock to pip, and
the environment running these tests holds the locked versions (unless `make test-latest`
runs them, with PARLEY_UNLOCKED=1, on the newest versions)."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "packaging" / "requirements.lock.txt"


def _lock_module():
    spec = importlib.util.spec_from_file_location("_packaging_lock", ROOT / "packaging" / "lock.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up while being defined
    spec.loader.exec_module(module)
    return module


def test_every_requirement_of_pyproject_is_pinned_in_the_lock_within_its_range():
    assert _lock_module().check(LOCK) == []


def test_a_stale_lock_names_the_missing_package_and_the_pin_outside_its_range(tmp_path):
    lock = _lock_module()
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["numpy>=9"]\n'
                         '[project.optional-dependencies]\nextra = ["not-a-locked-package"]\n')
    problems = lock.check(LOCK, pyproject)
    assert len(problems) == 2, problems
    assert re.match(r"numpy \(dependencies\) asks for >=9, requirements\.lock\.txt pins 2\.", problems[0])
    assert problems[0].endswith("run `make lock`")
    assert problems[1].startswith("not-a-locked-package ([extra]) is not in requirements.lock.txt")


def test_a_lock_line_without_an_exact_pin_is_refused(tmp_path):
    lock = _lock_module()
    bad = tmp_path / "requirements.lock.txt"
    bad.write_text("numpy==2.0.0\nrequests>=2\n")
    with pytest.raises(ValueError, match=r"requirements\.lock\.txt:2: 'requests>=2' is not pinned with =="):
        lock.read_lock(bad)


def test_every_install_in_the_makefile_passes_the_lock():
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^LOCK \?= packaging/requirements\.lock\.txt$", text, re.MULTILINE)
    assert re.search(r"^CONSTRAINT_FLAG := \$\(addprefix -c ,\$\(LOCK\) ", text, re.MULTILINE)
    installs = [line for line in text.splitlines() if "pip install" in line]
    assert installs
    for line in installs:
        if "$(CONSTRAINT_FLAG)" not in line:  # then each package it names is pinned on the line
            named = [word for word in line.split("pip install", 1)[1].split() if not word.startswith("-")]
            assert named and all("==" in word for word in named), line


@pytest.mark.skipif(os.environ.get("PARLEY_UNLOCKED") == "1",
                    reason="make test-latest: the newest versions, not the lock's")
def test_this_environment_holds_the_locked_versions():
    lock = _lock_module()
    pinned = {pin.name: pin.version for pin in lock.read_lock(LOCK) if pin.applies_here()}
    wrong = []
    for name in ("numpy", "torch", "transformers", "huggingface-hub", "onnxruntime",
                 "faster-whisper", "pyside6-essentials", "aiohttp", "pytest"):
        installed = metadata.version(name)
        if lock.Version(installed).public != pinned[name].public:
            wrong.append(f"{name} {installed} (lock: {pinned[name]})")
    assert not wrong, f"installed without the lock: {wrong}"
