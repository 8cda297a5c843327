"""Shared fixtures: the seeded tiny model (built once per session), a fresh tiny policy per test
(on ``tiny_device``, the CPU unless a test parametrizes it), a minimal hand-written text env that
follows the text-env contract (docs/design.md §1), and the ``gpu`` marker's skip where torch sees
no CUDA device."""

from __future__ import annotations

import copy
import os
from typing import Any, ClassVar

import gymnasium as gym
import pytest

from textgym.spaces import TextSpace


def pytest_configure(config):
    # The tiny model's ops are too small to split across threads: with 2 threads on a busy machine
    # every op waits at a barrier (measured: a rollout test 0.6 s with 1 thread, 3-28 s with 2).
    # Tests of the real model raise it again (see test_e2e_smollm2.py). Override: TEXTGYM_TEST_THREADS.
    try:
        import torch
    except ImportError:  # torch-free installs still run the env tests
        return
    torch.set_num_threads(int(os.environ.get("TEXTGYM_TEST_THREADS", "1")))


def no_cuda_reason() -> str | None:
    """Why the ``gpu`` tests cannot run here (``None``: torch sees a CUDA device)."""
    try:
        import torch
    except ImportError:
        return "gpu test: torch is not installed"
    if torch.version.cuda is None:
        return f"gpu test: torch {torch.__version__} is built without CUDA"
    if not torch.cuda.is_available():
        return f"gpu test: torch {torch.__version__} sees no CUDA device"
    return None


def pytest_collection_modifyitems(config, items):
    # `pytest` alone (CI, `make test`) collects the gpu tests too: they skip, naming why, where
    # there is no CUDA device, and run where there is one (`pytest -m gpu`).
    gpu_tests = [item for item in items if item.get_closest_marker("gpu")]
    reason = no_cuda_reason() if gpu_tests else None
    for item in gpu_tests if reason else []:
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def _tiny_loaded():
    from textgym import models

    return models.load("tiny", device="cpu")


@pytest.fixture
def tiny_device():
    """The device of ``tiny_model_and_tokenizer`` and ``tiny_policy``: the CPU. A test gets them
    elsewhere by parametrizing it (``@pytest.mark.parametrize("tiny_device", ["cuda"])``), a
    module by overriding this fixture (tests/test_gpu.py)."""
    return "cpu"


@pytest.fixture
def tiny_model_and_tokenizer(_tiny_loaded, tiny_device):
    """``(model, tokenizer)`` of ``textgym.models.load("tiny")``: the model a private copy on
    ``tiny_device`` (a test that trains or switches it to training mode cannot change what the
    next test gets, in any order), the tokenizer shared by the session."""
    model, tokenizer = _tiny_loaded
    return copy.deepcopy(model).to(tiny_device), tokenizer


@pytest.fixture
def tiny_policy(tiny_model_and_tokenizer):
    """A score-mode :class:`textgym.Policy` on a private copy of the tiny model (safe to train) on
    ``tiny_device``, seed 0."""
    from textgym.policy import Policy

    model, tokenizer = tiny_model_and_tokenizer
    return Policy(copy.deepcopy(model), tokenizer, mode="score", seed=0, name="tiny")


class CountdownTextEnv(gym.Env):
    """A tiny text env: each episode lasts ``1 + seed % max_length`` steps (random length when
    reset without a seed); answering ``"GOOD"`` earns 1, ``"BAD"`` 0, anything else is invalid
    and earns -1."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    system_prompt = "Count down to zero. Answer with one word: GOOD or BAD."
    action_names: ClassVar[list[str]] = ["GOOD", "BAD"]

    def __init__(self, max_length: int = 4):
        self.observation_space = TextSpace(256)
        self.action_space = TextSpace(256)
        self.max_length = max_length
        self.remaining = 0
        self.invalid = 0

    def _obs(self) -> str:
        return f"{self.remaining} steps left."

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self.remaining = 1 + seed % self.max_length
        else:
            self.remaining = 1 + int(self.np_random.integers(self.max_length))
        self.invalid = 0
        return self._obs(), {"system_prompt": self.system_prompt, "valid_actions": list(self.action_names)}

    def step(self, action: str):
        name = action.strip().upper()
        valid = name in self.action_names
        self.invalid += not valid
        reward = 1.0 if name == "GOOD" else 0.0 if valid else -1.0
        self.remaining -= 1
        info = {"valid_actions": list(self.action_names),
                "parse": {"raw": action, "action": name if valid else None,
                          "action_name": name if valid else None, "parser": "keyword" if valid else None,
                          "valid": valid, "invalid_count": self.invalid,
                          "policy": None if valid else "penalty"}}
        return self._obs(), reward, self.remaining <= 0, False, info


@pytest.fixture
def countdown_env_cls():
    """The :class:`CountdownTextEnv` class (episode length ``1 + seed % max_length``)."""
    return CountdownTextEnv


@pytest.fixture
def empty_hub_cache(tmp_path, monkeypatch):
    """An empty Hugging Face hub cache (a fresh folder), so that models cached on this machine do
    not change what a test sees. Returns its path."""
    from huggingface_hub import constants

    cache = tmp_path / "hf-hub-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))  # read by huggingface_hub at import
    return cache


@pytest.fixture
def unreachable_hub(monkeypatch):
    """No ``HF_HUB_OFFLINE``, but ``HF_ENDPOINT`` points at a loopback port nobody listens on: the
    hub cannot be reached, as on a machine without network. Returns the endpoint URL."""
    import socket

    from huggingface_hub import constants

    with socket.socket() as probe:  # a free port, closed again: connections to it are refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    # made from ENDPOINT at import: a file's URL would still name huggingface.co (a real request)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                        endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    return endpoint


class HubWatch:
    """What a test asked of the hub: ``probes``, textgym.models' questions whether a model exists
    (``(url, timeout)`` each), and ``loads``, the model loads it attempted (each refused)."""

    def __init__(self) -> None:
        self.probes: list[tuple[str, float | None]] = []
        self.loads: list[str] = []


@pytest.fixture
def hub_watch(monkeypatch):
    """A :class:`HubWatch` over textgym.models: the probe of a model's ``config.json`` is recorded
    (and still asked), and a model load (where a download would start) is recorded and refused.
    What a slow failure stands for, with no clock: no load attempted, the hub asked at most once."""
    import huggingface_hub

    from textgym import models

    watch = HubWatch()
    probe = huggingface_hub.get_hf_file_metadata

    def recorded_probe(url, *args, timeout=None, **kwargs):
        watch.probes.append((url, timeout))
        return probe(url, *args, timeout=timeout, **kwargs)

    def refused_load(source, **options):
        watch.loads.append(str(source))
        raise AssertionError(f"{source} was loaded: a download would have started")

    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", recorded_probe)
    monkeypatch.setattr(models, "_load_pretrained", refused_load)
    return watch


@pytest.fixture
def cli():
    """Invoke the textgym app in-process; returns typer's Result (stdout and stderr kept apart)."""
    from typer.testing import CliRunner

    from textgym.cli.main import app

    runner = CliRunner()

    def invoke(*args: str, input: str | None = None):
        return runner.invoke(app, [str(a) for a in args], input=input)

    return invoke
