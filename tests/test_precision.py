"""Acting precision: no deprecated transformers arguments in the hot paths."""

from __future__ import annotations

import copy
import warnings

from textgym.policy import Policy

SYSTEM = "You balance a pole on a cart. Answer with one word: LEFT or RIGHT."
OBSERVATIONS = ["Pole leans left.", "The cart is far to the right; the pole is falling over."]


def test_acting_and_evaluating_raise_no_future_warning(tiny_model_and_tokenizer):
    # transformers 5.x deprecates ``past_key_values`` (removed in 5.40) with a FutureWarning per call.
    model, tok = tiny_model_and_tokenizer
    score = Policy(copy.deepcopy(model), tok, mode="score", seed=0)
    generate = Policy(copy.deepcopy(model), tok, mode="generate", max_new_tokens=4, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        decisions = score.act(OBSERVATIONS, [SYSTEM] * 2, [["LEFT", "RIGHT"]] * 2)
        score.evaluate(decisions)
        score.act(OBSERVATIONS, [SYSTEM] * 2, [["LEFT", "RIGHT"]] * 2)  # the cached system prefix
        written = generate.act(OBSERVATIONS, [SYSTEM] * 2)
        generate.evaluate(written)
    assert [d.text for d in decisions] and all(d.answer_ids for d in written)
