"""What a trainer prepares before its first update: the RNG seeds, the trainable model, the envs.

:func:`prepare_model` gives the policy's model the LoRA adapter the config describes (through
:mod:`textgym.lora`, its one owner), keeps training an adapter the model already has (a loaded
checkpoint; a warning names every ``lora_*`` field it disagrees with), or, with
``use_lora=False``, trains every weight.

Example:
    >>> import textgym
    >>> from textgym.trainers.engine.train_config import TrainConfig
    >>> policy = textgym.Policy(*textgym.models.load("tiny"), mode="score")
    >>> model = prepare_model(policy, TrainConfig())
    >>> model is policy.model, all("lora_" in n for n, p in model.named_parameters() if p.requires_grad)
    (True, True)
"""

from __future__ import annotations

import random
import warnings
from typing import Any

import numpy as np
import torch

from textgym import lora
from textgym.policy import Policy
from textgym.rollout import Envs
from textgym.trainers.engine.train_config import TrainConfig

__all__ = ["make_envs", "prepare_model", "seed_everything", "system_prompt_of"]


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global RNGs."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def prepare_model(policy: Policy, config: TrainConfig) -> torch.nn.Module:
    """The policy's model made trainable as ``config`` says (and set as ``policy.model``).

    Raises:
        ValueError: ``use_lora=False`` for a model that already has a LoRA adapter.
    """
    model = policy.model
    if not config.use_lora:
        if lora.is_peft_model(model):
            raise ValueError("use_lora=False but the policy's model already has a LoRA adapter")
        policy.parameters_to_train()  # also snapshots the frozen reference policy
        return model
    wanted = config.lora_settings()
    if not lora.is_peft_model(model):
        model = lora.add_lora(model, wanted, model_name=policy.name)
        policy.model = model
        return model
    # An adapter is already there (a loaded checkpoint): keep training it as it is.
    differences = lora.differences(model, wanted, model_name=policy.name)
    if differences:
        warnings.warn("the policy's model already has a LoRA adapter; training it as it is, not as the "
                      "config's lora_* fields describe (" + "; ".join(differences) + ")", stacklevel=3)
    for _, p in lora.adapter_parameters(model):
        p.requires_grad_(True)
    return model


def make_envs(env: str | Envs | None, config: TrainConfig, env_kwargs: dict[str, Any],
              policy: Policy | None = None) -> tuple[str | None, Envs | None]:
    """The env id and the vector env a trainer trains on: from an id, a vector env of
    ``config.num_envs`` seeded ``config.seed`` (``opponent="self"`` played by ``policy``:
    self-play); a vector env as it is (its spec's id, if any); ``None``: neither (a trainer
    driven through ``update()`` only, e.g. by ``textgym.Agent``)."""
    if env is None:
        return None, None
    if isinstance(env, str):
        import textgym
        from textgym.registry import with_learner

        return env, textgym.make_vec(env, num_envs=config.num_envs, seed=config.seed,
                                     **with_learner(env_kwargs, policy))
    return (env.spec.id if getattr(env, "spec", None) is not None else None), env


def system_prompt_of(envs: Envs | None) -> str:
    """The env's system prompt (what a warm start's demonstrations without one get; ``""``: no
    env, or an env without ``TextObservation``)."""
    try:
        return envs.envs[0].get_wrapper_attr("system_prompt")
    except AttributeError:
        return ""
