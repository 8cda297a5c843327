"""Re-scoring only the trained top of the model, from what the frozen layers gave while acting.

With a LoRA adapter on the top layers only (``lora_layers``), the layers below it never change:
the hidden state a prompt's tokens enter the first adapted layer with is the same while acting
and in every minibatch and epoch of the update. :func:`recording` keeps it while acting (a forward
pre-hook on that layer, :attr:`Decision.trunk`); :func:`rescore_top` then runs only the top
layers, the final norm and the output head, with grad, instead of the whole model. The shared
prompt prefix still goes through the top layers with grad once per minibatch (its lower-layer
states are recomputed without grad, once), so the gradient is the same as a full pass's.

Candidates of several tokens (``STICK``, ``turn left``) have their later tokens scored after the
prompt, laid out as a token trie (:class:`~textgym.policy.scoring.CandidateTrie`); the frozen
layers' output at those tokens is recorded as well (:attr:`TrunkRecord.candidates`), and the top
layers run the trie after the prompt with the same tree-shaped mask.

It applies to score-mode decisions outside conversation mode, on models whose decoder follows
transformers' layout (``layers``, ``rotary_emb``, ``norm``) with SDPA attention and no
sliding-window layers; :func:`find_trunk` says whether a model does. The first use on a model
compares the two paths on a few decisions and keeps to the full pass if they differ
(:class:`TopRescorer`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from textgym.policy.decision import Decision, TrunkRecord
from textgym.policy.scoring import CandidateTrie

__all__ = ["TopRescorer", "TopScores", "Trunk", "acting_trunk", "find_trunk", "own_records", "recording", "rescore_top",
           "trunk_records"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Trunk:
    """Where a model's trained top begins: ``layers[start:]`` have trainable weights, the ones
    below have none."""

    decoder: torch.nn.Module
    """The decoder stack (``layers``, ``rotary_emb``, ``norm``)."""
    start: int
    """Index of the first layer with a trainable weight (> 0)."""

    @property
    def top(self) -> Sequence[torch.nn.Module]:
        return self.decoder.layers[self.start:]


def find_trunk(model: torch.nn.Module) -> Trunk | None:
    """The model's frozen trunk, or ``None`` when re-scoring the top alone does not apply: no
    layer below the first trainable one, a decoder without transformers' usual parts, attention
    other than SDPA, or sliding-window layers."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa":
        return None
    if "sliding_attention" in (getattr(config, "layer_types", None) or ()):
        return None
    if getattr(config, "use_sliding_window", False) and getattr(config, "sliding_window", None):
        return None
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
    if decoder is None or not all(hasattr(decoder, name) for name in ("layers", "rotary_emb", "norm")):
        return None
    trained = [i for i, layer in enumerate(decoder.layers) if any(p.requires_grad for p in layer.parameters())]
    if not trained or trained[0] == 0:
        return None
    embeddings = getattr(decoder, "embed_tokens", None)
    if embeddings is not None and any(p.requires_grad for p in embeddings.parameters()):
        return None  # trained embeddings change what the lower layers give
    return Trunk(decoder, trained[0])


def acting_trunk(trunk: Trunk, acting: torch.nn.Module) -> Trunk | None:
    """``trunk``'s counterpart in ``acting``, a copy of the same model in another precision
    (:mod:`textgym.policy.precision`; its adapter merged, so nothing in it is trainable): the same
    layers, whose output entering ``trunk.start`` is then recorded in the copy's precision
    (``PolicyConfig.trunk_in_act_dtype``). ``None`` when the copy has no such decoder."""
    base = acting.get_base_model() if hasattr(acting, "get_base_model") else acting
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
    if decoder is None or len(getattr(decoder, "layers", ())) != len(trunk.decoder.layers):
        return None
    return Trunk(decoder, trunk.start)


@contextlib.contextmanager
def recording(trunk: Trunk | None) -> Iterator[list[torch.Tensor]]:
    """Within this block, every forward pass appends the hidden states entering the trunk's first
    trained layer (``[B, T, H]``) to the yielded list (nothing when ``trunk`` is ``None``)."""
    seen: list[torch.Tensor] = []
    if trunk is None:
        yield seen
        return

    def keep(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        seen.append(args[0] if args else kwargs["hidden_states"])

    handle = trunk.decoder.layers[trunk.start].register_forward_pre_hook(keep, with_kwargs=True)
    try:
        yield seen
    finally:
        handle.remove()


def _run_top(trunk: Trunk, hidden: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
             cache: object) -> torch.Tensor:
    """The top layers over ``hidden`` ``[B, T, H]`` (the trunk's output), attending to ``cache``
    and themselves as ``mask`` ``[B, 1, T, past + T]`` (bool, True = attend) says."""
    embeddings = trunk.decoder.rotary_emb(hidden, position_ids=positions)
    for layer in trunk.top:
        out = layer(hidden, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True,
                    position_embeddings=embeddings)
        hidden = out[0] if isinstance(out, tuple) else out
    return hidden


@dataclass
class TopScores:
    """What :func:`rescore_top` gives per decision."""

    logits: torch.Tensor
    """``[B, V]``: the next-token logits at the last prompt position (the candidates' first tokens)."""
    hidden: torch.Tensor
    """``[B, H]``: the last hidden state there."""
    later: list[list[torch.Tensor]]
    """Per decision, per candidate, the log-probs of its tokens after the first (float32; empty
    for a one-token candidate)."""


def rescore_top(model: torch.nn.Module, trunk: Trunk, decisions: Sequence[Decision], prefix_hidden: torch.Tensor,
                device: torch.device) -> TopScores:
    """Every decision's candidates scored by the top layers alone from its trunk record (see the
    module doc), with grad. The decisions share a prefix whose trunk output is ``prefix_hidden``
    ``[1, P, H]`` (:meth:`TopRescorer.prefix_output`), and every record starts at or before its end."""
    from transformers import DynamicCache

    prefix_length = prefix_hidden.shape[1]
    rows = len(decisions)
    cache = DynamicCache(config=model.config)
    mask = torch.ones((1, 1, prefix_length, prefix_length), dtype=torch.bool, device=device).tril()
    _run_top(trunk, prefix_hidden, mask, torch.arange(prefix_length, device=device)[None], cache)
    suffixes = [d.trunk.hidden[prefix_length - d.trunk.start:] for d in decisions]
    width = max(len(s) for s in suffixes)
    size = prefix_hidden.shape[-1]
    padded = prefix_hidden.new_zeros((rows, width, size))
    positions = torch.full((rows, width), prefix_length, dtype=torch.long, device=device)
    real = torch.zeros((rows, width), dtype=torch.bool, device=device)
    for r, suffix in enumerate(suffixes):
        n = len(suffix)
        padded[r, width - n:] = suffix
        positions[r, width - n:] = torch.arange(prefix_length, prefix_length + n, device=device)
        real[r, width - n:] = True
    # a row's own tokens see the prefix, and its real tokens up to themselves (padding sees the prefix only)
    own = real[:, None, :] & torch.ones((width, width), dtype=torch.bool, device=device).tril()[None]
    mask = torch.cat([torch.ones((rows, width, prefix_length), dtype=torch.bool, device=device), own], dim=-1)
    rows_cache = DynamicCache(config=model.config)
    for i in range(trunk.start, len(trunk.decoder.layers)):
        keys, values = cache.layers[i].keys, cache.layers[i].values
        rows_cache.update(keys.expand(rows, -1, -1, -1), values.expand(rows, -1, -1, -1), i)
    hidden = _run_top(trunk, padded, mask[:, None], positions, rows_cache)
    last = trunk.decoder.norm(hidden[:, -1])
    later = _later_tokens_top(model, trunk, decisions, rows_cache, prefix_length, real, positions[:, -1] + 1, padded)
    return TopScores(logits=model.get_output_embeddings()(last), hidden=last, later=later)


def _later_tokens_top(model: torch.nn.Module, trunk: Trunk, decisions: Sequence[Decision], cache: object,
                      prefix_length: int, real: torch.Tensor, next_position: torch.Tensor,
                      prompts: torch.Tensor) -> list[list[torch.Tensor]]:
    """Per decision, per candidate, the log-probs of its later tokens: the top layers over each
    row's candidate trie (its recorded trunk output), after the prompt held in ``cache`` (the
    shared prefix, then each row's suffix, ``real`` marking its real columns), each trie token
    seeing the prompt and its own ancestors, at ``next_position`` plus its depth. The records enter
    in the dtype of ``prompts``, the prompts' own input to the top layers."""
    tries = [CandidateTrie(d.candidates) for d in decisions]
    empty = torch.zeros(0, device=real.device)
    later = [[empty] * len(d.candidates) for d in decisions]
    width = max(len(t.tokens) for t in tries)
    if not width:
        return later
    rows, device = len(decisions), real.device
    inputs = prompts.new_zeros((rows, width, prompts.shape[-1]))
    depths = torch.zeros((rows, width), dtype=torch.long)
    ancestry = torch.zeros((rows, width, width), dtype=torch.bool)
    columns = torch.zeros((rows, width), dtype=torch.bool)
    for r, (d, trie) in enumerate(zip(decisions, tries)):
        n = len(trie.tokens)
        if n:
            inputs[r, :n] = d.trunk.candidates
            depths[r, :n] = torch.tensor(trie.depths)
            ancestry[r, :n, :n] = trie.ancestry()
            columns[r, :n] = True
    columns, depths = columns.to(device), depths.to(device)
    # a trie token sees the shared prefix, its row's real prompt tokens and its ancestors; padding
    # columns the prefix only (a row that sees nothing would be NaN under SDPA)
    seen = torch.cat([torch.ones((rows, width, prefix_length), dtype=torch.bool, device=device),
                      real[:, None, :] & columns[:, :, None], ancestry.to(device)], dim=-1)
    positions = torch.where(columns, next_position[:, None] + depths, prefix_length)
    hidden = _run_top(trunk, inputs, seen[:, None], positions, cache)
    logits = model.get_output_embeddings()(trunk.decoder.norm(hidden)).float()  # [B, W, V]
    logp = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    for r, (d, trie) in enumerate(zip(decisions, tries)):
        for k, cand in enumerate(d.candidates):
            if len(cand) > 1:
                later[r][k] = logp[r, trie.columns(cand), cand[1:]]
    return later


def own_records(model: torch.nn.Module, trunk: Trunk, decisions: Sequence[Decision]) -> list[Decision]:
    """Copies of ``decisions`` whose trunk records are made again by ``model`` itself (no grad, one
    pass each): for the check of the top path against the full pass where the records came from
    a lower-precision acting copy (``PolicyConfig.trunk_in_act_dtype``). The copy's rounding is
    the same order as acting's own and varies per decision (on SmolLM2 in bf16 the top path's gap
    to the full pass exceeded the acting copy's in 14 of 40 samples of 8 decisions:
    bench/trunk_check.py), so only records in the model's own precision tell a decoder the top
    path cannot run (errors of the logits' own size) from rounding: on them the two paths agree
    to float noise."""
    device = next(model.parameters()).device
    copies = []
    for d in decisions:
        with torch.no_grad(), recording(trunk) as seen:
            model(input_ids=torch.tensor([d.prompt_ids], device=device), use_cache=False,
                  logits_to_keep=1)
        record = TrunkRecord(layer=trunk.start, start=d.trunk.start, hidden=seen[-1][0, d.trunk.start:])
        trie = CandidateTrie(d.candidates or [])
        if trie.tokens:  # each candidate after the prompt as one causal sequence: its trie columns
            record.candidates = record.hidden.new_zeros((len(trie.tokens), record.hidden.shape[-1]))
            for cand in d.candidates:
                if len(cand) > 1:
                    with torch.no_grad(), recording(trunk) as seen:
                        model(input_ids=torch.tensor([d.prompt_ids + cand[:-1]], device=device), use_cache=False,
                              logits_to_keep=1)
                    record.candidates[trie.columns(cand)] = seen[-1][0, len(d.prompt_ids):]
        copies.append(dataclasses.replace(d, trunk=record))
    return copies


class TopRescorer:
    """Decides, per model, whether re-scoring runs the top layers alone (:func:`rescore_top`).

    The first time a model's trunk applies, both paths score a few decisions without grad; if the
    log-probs or hidden states differ by more than float noise, the full pass is kept for that
    model (logged once).
    """

    def __init__(self, prefixes: int = 4) -> None:
        self._verdicts: dict[int, bool] = {}
        self._prefixes: OrderedDict[tuple[int, tuple[int, ...]], torch.Tensor] = OrderedDict()
        self._prefix_slots = prefixes

    def prefix_output(self, model: torch.nn.Module, trunk: Trunk, prefix: Sequence[int],
                      device: torch.device) -> torch.Tensor:
        """The trunk's output for ``prefix`` (``[1, P, H]``, no grad). The frozen layers never
        change, so it is computed once per model and prefix (the latest few are kept)."""
        key = (id(model), tuple(prefix))
        if key in self._prefixes:
            self._prefixes.move_to_end(key)
            return self._prefixes[key]
        with torch.no_grad(), recording(trunk) as seen:
            model(input_ids=torch.tensor([list(prefix)], device=device), use_cache=False, logits_to_keep=1)
        self._prefixes[key] = seen[-1]
        while len(self._prefixes) > self._prefix_slots:
            self._prefixes.popitem(last=False)
        return seen[-1]

    def trunk_for(self, model: torch.nn.Module, decisions: Sequence[Decision], prefix_length: int) -> Trunk | None:
        """The trunk to re-score ``decisions`` from, or ``None`` for the full pass."""
        if not decisions or prefix_length < 1 or any(d.trunk is None or d.candidates is None or d.trunk.start > prefix_length
                                or not _records_candidates(d) for d in decisions):
            return None
        trunk = find_trunk(model)
        if trunk is None or any(d.trunk.layer != trunk.start for d in decisions):
            return None
        return trunk if self._verdicts.get(id(model), True) else None

    def needs_check(self, model: torch.nn.Module) -> bool:
        return id(model) not in self._verdicts

    def record_check(self, model: torch.nn.Module, same: bool) -> None:
        self._verdicts[id(model)] = same
        if not same:
            logger.warning("re-scoring the top layers alone did not reproduce the full pass for this model; "
                           "the update runs the whole model")


def _records_candidates(decision: Decision) -> bool:
    """Whether the decision's record holds what its candidates' later tokens need: nothing for
    one-token candidates, else their trie's columns."""
    if all(len(c) == 1 for c in decision.candidates):
        return True
    recorded = decision.trunk.candidates
    return recorded is not None and len(recorded) == len(CandidateTrie(decision.candidates).tokens)


def trunk_records(seen: list[torch.Tensor], trunk: Trunk | None, rows: Sequence[int], lengths: Sequence[int],
                  start: int, later: Sequence[torch.Tensor],
                  later_at: Sequence[tuple[int, int, int] | None]) -> list[TrunkRecord | None]:
    """Per decision, its :class:`TrunkRecord` from the batch's recorded trunk output (the last pass
    in ``seen``, left-padded rows ending in the same column): decision ``i`` is batch row
    ``rows[i]`` and its prompt has ``lengths[i]`` tokens, the first ``start`` of them run earlier.
    ``later``: the recorded passes over the candidates' later tokens, ``later_at`` per batch row
    where its trie ran (:attr:`~textgym.policy.scoring.ScoredBatch.later_at`)."""
    if trunk is None or not seen:
        return [None] * len(rows)
    batch = seen[-1]
    records = []
    for r, n in zip(rows, lengths):
        at = later_at[r]
        candidates = later[at[0]][at[1], :at[2]] if at is not None else None
        records.append(TrunkRecord(layer=trunk.start, start=start, hidden=batch[r, batch.shape[1] - (n - start):],
                                   candidates=candidates))
    return records
