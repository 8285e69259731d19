"""The GitHub Actions workflows (.github/workflows/): GitHub's schema accepts them, offline;
each has its Linux, macOS arm64 and Windows jobs, and each job runs what the project says it
runs (.ci/run; the README's `make test`; on Windows the Makefile's commands one by one),
builds the app and its download with packaging/build.py, self-tests it, and uploads it.
Also build.py's installer and self-test options, and the ``gpu`` marker the macOS job's
PARLEY_TEST_NO_GPU=1 relies on (tests/conftest.py).

The workflows themselves cannot run here (no macOS or Windows machine): these tests check
what they say, not that it works; packaging/README.md says what has run where.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def _check_jsonschema() -> str:
    found = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent))
    assert found, ("check-jsonschema is not installed beside this Python: it is in the dev "
                   "extra (make install-dev)")
    return found


def _schema_check(*paths: Path) -> subprocess.CompletedProcess:
    # Any download would go to a proxy that refuses connections: the check must not need one.
    refused = "http://127.0.0.1:9"
    env = {**os.environ, "HTTP_PROXY": refused, "HTTPS_PROXY": refused, "NO_PROXY": "",
           "http_proxy": refused, "https_proxy": refused, "no_proxy": ""}
    return subprocess.run([_check_jsonschema(), "--builtin-schema", "vendor.github-workflows",
                           *map(str, paths)], capture_output=True, text=True, env=env, timeout=120)


def _load(path: Path) -> dict:
    from ruamel.yaml import YAML  # check-jsonschema's YAML reader: YAML 1.2, `on` stays a key

    return YAML(typ="safe").load(path.read_text(encoding="utf-8"))


def _platform(runs_on: str) -> str:
    """The platform of a GitHub-hosted runner label."""
    if runs_on.startswith("ubuntu"):
        return "linux"
    if runs_on.startswith("windows"):
        return "windows"
    if runs_on.startswith("macos"):
        intel = runs_on == "macos-13" or runs_on.endswith(("-intel", "-large"))
        return "macos-x86_64" if intel else "macos-arm64"
    return runs_on


def _jobs_by_platform(workflow: dict) -> dict[str, dict]:
    return {_platform(job["runs-on"]): job for job in workflow["jobs"].values()}


def _runs(job: dict) -> str:
    return "\n".join(step.get("run", "") for step in job["steps"])


def _uses(job: dict, action: str) -> list[dict]:
    return [step for step in job["steps"] if step.get("uses", "").split("@")[0] == action]


def _ci() -> dict[str, dict]:
    assert WORKFLOWS, "no workflow in .github/workflows"
    return _jobs_by_platform(_load(ROOT / ".github" / "workflows" / "ci.yml"))


# ------------------------------------------------------------------ the schema, offline
def test_the_workflows_pass_githubs_workflow_schema_offline():
    assert WORKFLOWS
    result = _schema_check(*WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_schema_check_rejects_a_broken_workflow(tmp_path):
    broken = tmp_path / "broken.yml"
    text = (ROOT / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8")
    broken.write_text(text.replace("runs-on: macos-15", "run-on: macos-15"), encoding="utf-8")
    result = _schema_check(broken)
    assert result.returncode == 1 and "'runs-on' is a required property" in result.stdout, result.stdout


def test_ci_has_a_linux_a_macos_arm64_and_a_windows_job():
    assert {"linux", "macos-arm64", "windows"} <= _ci().keys(), sorted(_ci())


def test_the_newest_versions_run_weekly_apart_from_ci_and_report_what_they_ran_with():
    workflow = _load(ROOT / ".github" / "workflows" / "latest.yml")
    assert set(workflow["on"]) == {"schedule", "workflow_dispatch"}  # never gates a push
    (job,) = workflow["jobs"].values()
    assert job["env"]["PARLEY_CI_TARGET"] == "test-latest" and "bash .ci/run" in _runs(job)
    (upload,) = _uses(job, "actions/upload-artifact")
    assert upload["if"] == "always()" and upload["with"]["path"] == "build/latest-versions.txt"
    ci_run = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert 'make "$target"' in ci_run and 'target="${PARLEY_CI_TARGET:-test}"' in ci_run
    test_latest = _makefile_recipe("test-latest")
    assert any("LOCK=" in line and "install-dev" in line for line in test_latest), test_latest
    assert any("packaging/lock.py diff" in line for line in test_latest), test_latest


# ------------------------------------------------------------------ what each job runs
def test_the_linux_job_runs_ci_run_as_root_on_debian():
    linux = _ci()["linux"]
    assert "bash .ci/run" in _runs(linux)
    assert linux["container"].startswith("python:3.11-")  # apt-get as root, as .ci/run expects


def test_the_macos_job_runs_make_test_then_builds_signs_and_self_tests_the_dmg():
    macos = _ci()["macos-arm64"]
    runs = _runs(macos)
    assert re.search(r"^make test .*-m 'not package'", runs, re.MULTILINE), runs
    assert "packaging/build.py --installer --self-test" in runs
    assert "hdiutil attach" in runs and "--executable \"$mnt/Parley.app/Contents/MacOS/Parley\"" in runs
    assert macos["env"]["PARLEY_TEST_NO_GPU"] == "1"
    # The DMG script refuses an app without the microphone string or an ad-hoc signature.
    dmg_script = (ROOT / "packaging" / "macos" / "make_dmg.sh").read_text(encoding="utf-8")
    assert "NSMicrophoneUsageDescription" in dmg_script and "Signature=adhoc" in dmg_script


def _makefile_recipe(target: str) -> list[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    match = re.search(rf"^{re.escape(target)}:[^\n]*\n((?:\t[^\n]*\n)+)", text, re.MULTILINE)
    assert match, f"no {target} target in the Makefile"
    return [line.strip() for line in match.group(1).splitlines() if not line.strip().startswith("#")]


def test_the_windows_job_installs_what_the_makefile_installs():
    runs = _runs(_ci()["windows"])
    pip_lines = [line for target in ("$(VENV)/.installed", "$(VENV)/.installed-dev")
                 for line in _makefile_recipe(target) if "pip install" in line]
    assert len(pip_lines) == 3
    for line in pip_lines:
        wanted = line.split("pip install", 1)[1].replace("$(UPGRADE_FLAG)", "").replace(
            "$(CONSTRAINT_FLAG)", "-c packaging/requirements.lock.txt -c .ci/constraints-cpu.txt")
        assert "pip install " + " ".join(wanted.split()) in runs, f"the Windows job lacks: {wanted}"


def test_the_windows_job_runs_what_make_test_runs():
    runs = _runs(_ci()["windows"])
    recipe = _makefile_recipe("test")
    for command in recipe:
        command = command.removeprefix("PYRIGHT_PYTHON_IGNORE_WARNINGS=1 ").replace(" $(PYRIGHT_ARGS)", "")
        command = command.replace("$(BIN)/", ".venv/Scripts/")
        command = command.replace("$(PYTEST_ARGS)", "-ra -m 'not package'")
        assert command in runs, f"the Windows job lacks `make test`'s {command!r}"
    assert _ci()["windows"]["env"]["PYRIGHT_PYTHON_IGNORE_WARNINGS"] == "1"


def test_the_windows_job_builds_the_installer_installs_it_and_self_tests_both():
    windows = _ci()["windows"]
    runs = _runs(windows)
    assert "packaging/build.py --installer --self-test" in runs
    assert "/VERYSILENT" in runs and '--executable "$target\\Parley-console.exe"' in runs


@pytest.mark.parametrize("platform", ["linux", "macos-arm64", "windows"])
def test_every_job_caches_pip_and_the_tests_models_and_uploads_its_app(platform):
    job = _ci()[platform]
    caches = [step["with"]["path"] for step in _uses(job, "actions/cache")]
    pip_cached = "~/.cache/pip" in caches or any(
        step["with"].get("cache") == "pip" for step in _uses(job, "actions/setup-python"))
    assert pip_cached, caches
    test_cache = Path(os.environ["PARLEY_CACHE_DIR"])  # tests/conftest.py: under the checkout
    if test_cache.is_relative_to(ROOT):
        assert test_cache.relative_to(ROOT).as_posix() in caches, caches
    (upload,) = _uses(job, "actions/upload-artifact")
    assert upload["with"]["if-no-files-found"] == "error"
    wanted = {"linux": "Parley-linux-x86_64.tar.gz", "macos-arm64": "Parley-*.dmg",
              "windows": "Parley-*-setup.exe"}[platform]
    assert f"dist/{wanted}" in upload["with"]["path"].split()


# ------------------------------------------------------------------ build.py's options
def _build_module():
    """packaging/build.py (a script, not a package), loaded afresh."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_packaging_build", ROOT / "packaging" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_installer_on_linux_names_what_linux_has_instead(monkeypatch):
    build = _build_module()
    monkeypatch.setattr(build, "SYSTEM", "Linux")
    with pytest.raises(SystemExit, match=r"not on Linux; on Linux packaging/linux/install.sh"):
        build.make_installer()


def test_a_missing_inno_setup_says_how_to_install_it(monkeypatch, tmp_path):
    build = _build_module()
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("ProgramFiles(x86)", str(tmp_path))
    monkeypatch.setenv("ProgramFiles", str(tmp_path))
    with pytest.raises(SystemExit, match=r"Inno Setup 6 \(ISCC.exe\).*choco install innosetup"):
        build.inno_setup_compiler()
    iscc = tmp_path / "Inno Setup 6" / "ISCC.exe"
    iscc.parent.mkdir()
    iscc.write_bytes(b"")
    assert build.inno_setup_compiler() == iscc


def test_options_that_would_do_nothing_are_refused(capsys):
    build = _build_module()
    with pytest.raises(SystemExit) as exit_info:
        build.main(["--skip-build"])
    assert exit_info.value.code == 2 and "--skip-build leaves nothing to do" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        build.main(["--skip-build", "--executable", "Parley"])
    assert exit_info.value.code == 2 and "add --self-test" in capsys.readouterr().err


def test_a_self_test_of_a_missing_program_names_it(tmp_path):
    build = _build_module()
    missing = tmp_path / "Parley.app" / "Contents" / "MacOS" / "Parley"
    with pytest.raises(SystemExit, match=re.escape(str(missing)) + r" does not exist"):
        build.main(["--skip-build", "--self-test", "--executable", str(missing)])


def _program(tmp_path: Path, report: dict, status: int) -> Path:
    """A stand-in for the built app: prints ``report`` as its self-test JSON."""
    program = tmp_path / f"app-{status}" / "Parley"
    program.parent.mkdir()
    program.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(report)}\nEOF\nexit {status}\n")
    program.chmod(0o755)
    return program


@pytest.mark.skipif(sys.platform == "win32", reason="the stand-in program is a shell script")
def test_the_report_carries_the_self_test_of_the_named_program(tmp_path):
    build = _build_module()
    passed = {"ok": True, "transcript": "One, two, three.", "reply": "Four!", "total_s": 2.5,
              "launch_to_first_reply_audio_s": 1.25}
    out = tmp_path / "reports" / "self-test.json"
    assert build.main(["--skip-build", "--self-test", "--executable",
                       str(_program(tmp_path, passed, 0)), "--report", str(out)]) == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["built"] is False and report["self_test"]["ok"] is True
    assert report["self_test_report"]["reply"] == "Four!" and report["self_test"]["exit_status"] == 0
    failed = {"ok": False, "error": "the reply is empty"}
    assert build.main(["--skip-build", "--self-test", "--executable",
                       str(_program(tmp_path, failed, 1)), "--report", str(out)]) == 1
    summary = json.loads(out.read_text(encoding="utf-8"))["self_test"]
    assert (summary["ok"], summary["exit_status"], summary["error"]) == (False, 1, "the reply is empty")


# ------------------------------------------------------------------ the gpu marker
def test_gpu_tests_skip_with_the_reason_where_no_gpu_computes(monkeypatch):
    from tests import conftest

    monkeypatch.setattr(conftest, "_NO_GPU", True)
    assert conftest._no_gpu_reason().startswith("PARLEY_TEST_NO_GPU=1: this machine's GPU cannot compute")
    monkeypatch.setattr(conftest, "_NO_GPU", False)
    reason = conftest._no_gpu_reason()
    assert reason is None or (reason.startswith("no GPU here (cuda:0: ") and "mps: " in reason), reason


@pytest.mark.gpu
def test_a_gpu_marked_test_gets_a_gpu_that_computes():
    import torch

    from engine.runtime.devices import discover_devices

    gpu = next(d for d in discover_devices() if d.available and d.device.kind in ("cuda", "mps"))
    x = torch.arange(4, dtype=torch.float32, device=str(gpu.device))
    assert float((x * 2).sum().cpu()) == 12.0
