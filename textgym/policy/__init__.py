"""An LLM policy that acts for a batch of text envs in one call, and re-scores its decisions for training.

Two modes:

* ``score``: the log-likelihood of each valid action's text as the continuation of the chat prompt
  (the lamorel/TWOSOME approach: the answer is always a valid action). The chosen action is sampled
  from ``softmax(score / temperature)`` while training and is the argmax when ``greedy``.
* ``generate``: free text sampled token by token (temperature, top-p, max new tokens, stop strings);
  the env's ``ParseAction`` wrapper turns it into an action.

Speed: the prompt's shared prefix (the chat header and system prompt, identical for every env of a
task) is run through the model once and its KV cache is kept across calls; each call runs only the
per-env suffixes (the observation), batched on top of it, and then scores the candidate actions (or
samples tokens) on that KV cache. Every :class:`Decision` keeps the exact prompt and answer token ids
and their log-probs, so training never re-tokenizes sampled text.

The package, one module per concern: ``config`` (:class:`PolicyConfig`), ``decision``
(:class:`Decision`, :class:`Evaluation`), ``prompts`` (chat prompts), ``kv_cache`` (the shared-prefix
KV cache and batched prompt runs), ``scoring`` (candidate tries, score mode), ``sampling`` (token
and candidate draws, the generate loop), ``rescoring`` (:meth:`Policy.evaluate`), ``reference``
(the reference weights), ``persistence`` (build from a model name, save, load) and ``policy``
(:class:`Policy`, which composes them).

Example:
    >>> from textgym import models
    >>> from textgym.policy import Policy
    >>> model, tokenizer = models.load("tiny")
    >>> policy = Policy(model, tokenizer, mode="score", seed=0)
    >>> [d] = policy.act(["Pole leans left."], ["Answer LEFT or RIGHT."], [["LEFT", "RIGHT"]])
    >>> d.text in ("LEFT", "RIGHT")
    True
    >>> ev = policy.evaluate([d])        # with grad: what a trainer differentiates
    >>> abs(ev.logprobs[0, 0].item() - d.logprob) < 1e-4
    True
"""

import importlib
from typing import TYPE_CHECKING, Any

# PolicyConfig is torch-free (``textgym --help`` reads it); the rest imports torch on first use.
from textgym.policy.config import PolicyConfig

if TYPE_CHECKING:
    from textgym.policy.decision import Decision, Evaluation
    from textgym.policy.policy import Policy

_LAZY = {"Decision": "textgym.policy.decision", "Evaluation": "textgym.policy.decision",
         "Policy": "textgym.policy.policy"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Decision", "Evaluation", "Policy", "PolicyConfig"]
