"""Conversation mode: the policy reads a whole episode as one chat, at the cost of its new tokens.

In conversation mode an env's context is the chat of its episode so far: the system prompt, then
each observation as a user turn and each answer as an assistant turn, ending with the newest
observation and the assistant header. Three pieces make that cheap:

* :class:`ConversationWindow`: how much of the episode the context keeps, and the rule that
  bounds it (below).
* :class:`Conversation`: one env's episode as token ids, built turn by turn from pieces of the chat
  template (:meth:`ChatPrompts.turn_ids`); a sampled answer's ids are appended as they were
  sampled, never re-tokenized. ``context`` is exactly what the next decision acts on, and what
  :attr:`Decision.prompt_ids` records.
* :class:`ConversationCache`: one KV cache with a row per conversation, kept across turns. Each
  decision runs only the tokens its row does not hold yet (the previous answer, the end of its
  turn, the new observation, the assistant header), batched over the rows on top of the cache;
  the result is a :class:`BatchState`, so candidate scoring and the generate loop continue from
  it unchanged.

The window rule. A context grows by one turn per decision until a limit is reached; the next
decision then *rebuilds* it: the system prompt and the most recent turns are run again once, and
the context grows incrementally from there. So the tokens run per decision stay flat on average
however long the episode gets, and every context is an exact chat (no approximated KV):

* ``turns=N``: the context always holds at least the last ``N`` earlier turns (all of them early
  in an episode). When it would hold more than ``2N``, it is rebuilt with the last ``N``.
  ``turns=0`` is the newest observation alone (single-observation mode).
* ``max_tokens=T``: when the context would exceed ``T`` tokens, it is rebuilt too.

A rebuilt context holds the system prompt, the newest observation and the most recent earlier
turns that fit in ``T/2`` tokens (at most ``N`` of them): the token cap wins over ``turns``.
A change of system prompt within an episode also rebuilds the context.

Example:
    >>> from textgym import models
    >>> from textgym.policy import Policy
    >>> from textgym.policy.conversation import Conversation, ConversationWindow
    >>> policy = Policy(*models.load("tiny"), mode="score", seed=0)
    >>> chat = Conversation(ConversationWindow(turns=None))
    >>> [first] = policy.act(["Pole leans left."], ["Answer LEFT or RIGHT."], [["LEFT", "RIGHT"]],
    ...                      conversations=[chat])
    >>> [second] = policy.act(["Pole leans right."], ["Answer LEFT or RIGHT."], [["LEFT", "RIGHT"]],
    ...                       conversations=[chat])
    >>> second.prompt_ids[:len(first.prompt_ids)] == first.prompt_ids    # the chat so far, extended
    True
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from textgym.policy.kv_cache import (
    BatchState,
    Counters,
    PrefixCache,
    PrefixKV,
    alias_cache,
    append_in_place_cache,
    grow_in_place,
)
from textgym.policy.ragged_attention import RowGroups, ragged_attention, row_groups, supports_ragged

if TYPE_CHECKING:
    from textgym.policy.prompts import ChatPrompts

__all__ = ["Conversation", "ConversationCache", "ConversationWindow"]

#: ``history=`` value of the whole episode (up to the token cap).
FULL = "full"


@dataclass(frozen=True)
class ConversationWindow:
    """How much of an episode a conversation's context keeps (the rule is in the module docstring)."""

    turns: int | None = None
    """The context always holds at least this many earlier turns (an observation and its answer
    each), and at most twice as many before it is rebuilt. ``None``: the whole episode (up to
    ``max_tokens``); ``0``: the newest observation alone."""
    max_tokens: int = 4096
    """The most tokens a context holds; a context that would exceed it is rebuilt with the most
    recent turns that fit in half of it. Bounds memory (the KV cache) and compute per decision."""

    def __post_init__(self) -> None:
        if self.turns is not None and (isinstance(self.turns, bool) or int(self.turns) < 0):
            raise ValueError(f"turns must be >= 0 or None, got {self.turns!r}")
        if int(self.max_tokens) < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens!r}")

    @classmethod
    def from_history(cls, history: int | str | None, max_tokens: int = 4096) -> ConversationWindow | None:
        """The window of a ``history`` setting: ``None`` (no conversation: ``None``), ``"full"``
        (the whole episode) or ``N`` (at least the last ``N`` turns)."""
        if history is None:
            return None
        if history == FULL:
            return cls(None, max_tokens)
        if isinstance(history, bool) or not isinstance(history, int):
            raise ValueError(  # noqa: TRY004 - a bad setting value, as PolicyConfig reports it
                f"history must be None, 'full' or a number of turns, got {history!r}")
        return cls(history, max_tokens)


@dataclass
class _Turn:
    observation: str
    follow_ids: list[int] | None
    """The tokens after the previous answer (end of its turn, this observation, the assistant
    header); ``None`` for the episode's first turn."""
    answer_ids: list[int] | None = None


class Conversation:
    """One env's episode as a chat, in token ids: what a policy in conversation mode reads.

    The caller keeps one per env, passes it to :meth:`textgym.Policy.act` with each new observation
    (``conversations=``) and calls :meth:`restart` when the env starts a new episode. The policy
    adds the observation (:meth:`add_observation`), acts on :attr:`context` and records the answer
    (:meth:`add_answer`). Context lists are never changed in place, so a decision's ``prompt_ids``
    may share them.

    Args:
        window: how much of the episode the context keeps (default: the whole episode, up to
            4096 tokens).
    """

    def __init__(self, window: ConversationWindow | None = None):
        self.window = window if window is not None else ConversationWindow()
        self.rebuilds = 0
        """How many times a context was rebuilt by the window rule (all episodes)."""
        self.restart()

    def restart(self) -> None:
        """Forget the episode: the next observation starts a new conversation."""
        self.turns: list[_Turn] = []
        self.start = 0
        """Index in :attr:`turns` of the first turn the context holds."""
        self.context: list[int] = []
        """The token ids the next decision acts on (after :meth:`add_observation`)."""
        self.system_prompt: str | None = None
        self._answered: list[int] = []  # the context through the last answer

    def __len__(self) -> int:
        """Turns played in this episode (the pending one included)."""
        return len(self.turns)

    def add_observation(self, observation: str, system_prompt: str, prompts: ChatPrompts) -> list[int]:
        """Start the next turn with ``observation``; returns the context to act on (window applied)."""
        if self.turns and self.turns[-1].answer_ids is None:
            self.turns.pop()  # a turn that was never answered (its act call failed): replaced
        first = not self.turns
        follow = None if first else prompts.turn_ids(system_prompt, observation, after=self.turns[-1].answer_ids)
        self.turns.append(_Turn(observation, follow))
        t = len(self.turns) - 1
        window = self.window
        if first:
            self.start = 0
            self.context = prompts.prompt_ids(system_prompt, observation)
        else:
            extended = self._answered + follow
            too_many = window.turns is not None and t - self.start > 2 * window.turns
            if system_prompt != self.system_prompt or too_many or len(extended) > window.max_tokens:
                self._rebuild(system_prompt, prompts)
                self.rebuilds += 1
            else:
                self.context = extended
        self.system_prompt = system_prompt
        return self.context

    def add_answer(self, answer_ids: Sequence[int]) -> None:
        """Record the answer to the pending turn (it becomes part of the next context)."""
        if not self.turns or self.turns[-1].answer_ids is not None:
            raise RuntimeError("add_answer() without a pending observation")
        self.turns[-1].answer_ids = list(answer_ids)
        self._answered = self.context + self.turns[-1].answer_ids

    def _rebuild(self, system_prompt: str, prompts: ChatPrompts) -> None:
        """Rebuild the context from the system prompt and the most recent turns that fit in half
        the token cap (at most ``window.turns`` earlier ones)."""
        t = len(self.turns) - 1
        earliest = 0 if self.window.turns is None else max(0, t - self.window.turns)
        budget = self.window.max_tokens // 2
        # A turn rendered first costs about the system prefix more than as a follow-up: exact
        # enough to choose where to start.
        cost = len(prompts.system_prefix(system_prompt)) + len(self.turns[t].follow_ids or [])
        start = t
        while start > earliest:
            more = len(self.turns[start - 1].answer_ids) + len(self.turns[start - 1].follow_ids or [])
            if cost + more > budget:
                break
            cost += more
            start -= 1
        context = prompts.prompt_ids(system_prompt, self.turns[start].observation)
        for k in range(start + 1, t + 1):
            context = context + self.turns[k - 1].answer_ids + self.turns[k].follow_ids
        self.start = start
        self.context = context


class ConversationCache:
    """One KV cache for a batch of conversations, a row each, kept across their turns.

    Each call appends one block of columns: every row's new tokens, left-padded to the block's
    width (padding is masked), with explicit per-row position ids, so each row's last token is the
    block's last column and the next-token logits line up. A row's *live* columns are always
    contiguous at its right end (but for those paddings): the shared prefix (the system prompt's
    tokens, from the policy's :class:`PrefixCache`, run once) followed by its turns. A row whose
    conversation no longer extends what it holds (a new episode, a window rebuild) masks its old
    columns, gets the shared prefix's KV copied into the columns just before the new block, and
    runs its context again after it. When dead (masked) columns make the cache more than half as
    wide again as its longest row, it is compacted: each row's live columns are gathered to the
    right (positions were applied by the model already, so moving a column changes nothing).

    Because live columns are contiguous, a model whose attention is SDPA attends per group of rows
    from their first live column only (:mod:`textgym.policy.ragged_attention`): a row pays for its
    own context, not for the longest one in the batch.

    Rows follow the order of the conversations passed; a conversation missing from a call loses
    its row (it is rebuilt if it comes back), a new one takes a row.

    Args:
        ragged: attend per row group from the first live column (when the model's attention is
            SDPA); ``False``: plain SDPA over the whole width (the same result, more work).
    """

    def __init__(self, ragged: bool = True) -> None:
        self.ragged = ragged
        self.conversations: list[Conversation] = []
        self.kv: PrefixKV | None = None
        self.mask: torch.Tensor | None = None
        self.held: list[list[int]] = []
        """Per row: the context ids its cache columns hold (in order, dead columns excluded)."""
        self.shared: list[bool] = []
        """Per row: whether its first columns hold the shared prefix."""
        self.prefix: list[int] = []
        self.version: Hashable = None
        self.compactions = 0
        self.reruns = 0
        """Rows whose context was run again from the shared prefix (new episodes and rebuilds)."""
        self.attended = 0
        """Query-key pairs attended by the calls so far (per layer and head), ragged or not."""
        self._relocate: set[int] = set()  # reset rows that still need the shared prefix's KV
        self._buffers: PrefixKV | None = None  # where self.kv lives, with room to grow
        self._supports_ragged: dict[int, bool] = {}

    def clear(self) -> None:
        """Drop every row (the next call starts from the shared prefix)."""
        self.conversations, self.kv, self.mask, self.held, self.shared = [], None, None, [], []
        self._relocate, self._buffers = set(), None

    @property
    def width(self) -> int:
        """Columns of the cache (shared prefix, blocks, dead columns)."""
        return 0 if self.mask is None else int(self.mask.shape[1])

    def run(self, model: torch.nn.Module, conversations: Sequence[Conversation], contexts: Sequence[list[int]],
            prefix: list[int], *, version: Hashable, prefix_cache: PrefixCache, pad_id: int,
            device: torch.device, counters: Counters) -> BatchState:
        """Bring every row up to its conversation's context; the state after the last token.

        Args:
            model: the causal LM.
            conversations: one per row, in the order of the batch.
            contexts: each conversation's context (its :attr:`Conversation.context`).
            prefix: the tokens every row starts with when it can (the system prompt's prefix).
            version: the weights' version: a cache computed with other weights is dropped.
            prefix_cache: where the shared prefix's KV comes from.
            pad_id: the padding token.
            device: the model's device.
            counters: running totals (``prompt_tokens``, ``model_tokens``, ``padded_tokens``).
        """
        if version != self.version or list(prefix) != self.prefix:
            self.clear()
            self.version, self.prefix = version, list(prefix)
        self._arrange(model, conversations, prefix_cache, device, counters)
        news = [self._new_tokens(row, context) for row, context in enumerate(contexts)]
        self._relocate_prefix(model, prefix_cache, device, counters)
        self._compact_if_sparse()
        rows, width = len(news), max(len(new) for new in news)
        ids = torch.full((rows, width), pad_id, dtype=torch.long)
        block = torch.zeros((rows, width), dtype=torch.long)
        positions = torch.zeros((rows, width), dtype=torch.long)
        for row, new in enumerate(news):
            start = len(self.held[row])
            ids[row, width - len(new):] = torch.tensor(new)
            block[row, width - len(new):] = 1
            positions[row] = start
            positions[row, width - len(new):] = torch.arange(start, start + len(new))
        real = sum(len(new) for new in news)
        counters["prompt_tokens"] += real
        counters["model_tokens"] += real
        counters["padded_tokens"] += rows * width - real
        mask = torch.cat([self.mask, block.to(device)], dim=1)
        groups = self._row_groups(model, mask)
        self.attended += width * (mask.shape[1] * rows if groups is None
                                  else sum((end - first) * (mask.shape[1] - column) for first, end, column in groups))
        if self.kv is None:
            cache = alias_cache(model, None)
        else:  # the new block is written into preallocated room after the cache (no copy of it)
            self._buffers = grow_in_place(self.kv, self._buffers, width)
            cache = append_in_place_cache(self.kv, self._buffers)
        with ragged_attention(model) if groups is not None else contextlib.nullcontext():
            out = model(input_ids=ids.to(device), attention_mask=mask, position_ids=positions.to(device),
                        cache=cache, use_cache=True, logits_to_keep=1,
                        **({"row_groups": groups} if groups is not None else {}))
        self.kv = tuple((layer.keys, layer.values) for layer in out.cache.layers)
        self.mask = mask
        self.held = list(contexts)
        # Scoring and generation continue on a cache of their own (they select rows and append
        # sampled tokens); it aliases these columns and never writes into them.
        return BatchState(cache=alias_cache(model, self.kv), attention_mask=mask,
                          next_position=torch.tensor([len(c) for c in contexts], device=device),
                          last_logits=out.logits[:, -1].float())

    def _row_groups(self, model: torch.nn.Module, mask: torch.Tensor) -> RowGroups | None:
        """The row groups for ragged attention, or ``None`` for plain attention over every column."""
        if not self.ragged:
            return None
        supported = self._supports_ragged.get(id(model))
        if supported is None:
            supported = self._supports_ragged[id(model)] = supports_ragged(model)
        if not supported:
            return None
        # Merging a row into the group before it is worth up to one turn's columns per row (a
        # separate SDPA call per row costs more than that).
        return row_groups(mask, min_saving=64)

    # --- rows -------------------------------------------------------------------------------

    def _arrange(self, model: torch.nn.Module, conversations: Sequence[Conversation], prefix_cache: PrefixCache,
                 device: torch.device, counters: Counters) -> None:
        """Make row ``i`` the row of ``conversations[i]`` (copying rows only when the set or order changed)."""
        where = {id(c): i for i, c in enumerate(self.conversations)}
        index = [where.get(id(c), -1) for c in conversations]
        if self.kv is not None and index == list(range(len(self.conversations))):
            return
        n = len(conversations)
        if self.mask is None or all(i < 0 for i in index):
            kv = prefix_cache.get(model, self.prefix, self.version, device, counters) if self.prefix else None
            self.kv = None if kv is None else tuple((k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)) for k, v in kv)
            self.mask = torch.ones((n, len(self.prefix)), dtype=torch.long, device=device)
            self.held = [self.prefix] * n
            self.shared = [True] * n
        else:
            take = torch.tensor([max(i, 0) for i in index], device=device)  # a new row copies row 0, then resets
            if self.kv is not None:
                self.kv = tuple((k.index_select(0, take), v.index_select(0, take)) for k, v in self.kv)
            self.mask = self.mask.index_select(0, take)
            self.held = [self.held[max(i, 0)] for i in index]
            self.shared = [self.shared[max(i, 0)] for i in index]
            for row, i in enumerate(index):
                if i < 0:
                    self._reset(row)
        self.conversations = list(conversations)

    def _reset(self, row: int) -> None:
        """Mask all the row's columns; it holds the shared prefix again once
        :meth:`_relocate_prefix` has copied it (when its context starts with it)."""
        self.mask[row] = 0
        if self.shared[row]:
            self.held[row] = self.prefix
            self._relocate.add(row)
        else:
            self.held[row] = []

    def _new_tokens(self, row: int, context: list[int]) -> list[int]:
        """The tokens of ``context`` the row does not hold yet (the row is reset when the context
        does not extend what it holds)."""
        held = self.held[row]
        if len(context) > len(held) and context[:len(held)] == held:
            return context[len(held):]
        self.reruns += 1
        self._reset(row)
        if context[:len(self.held[row])] != self.held[row]:  # it does not start with the shared prefix
            self.shared[row] = False
            self._relocate.discard(row)
            self._reset(row)
        return context[len(self.held[row]):]

    def _relocate_prefix(self, model: torch.nn.Module, prefix_cache: PrefixCache, device: torch.device,
                         counters: Counters) -> None:
        """Copy the shared prefix's KV into the last columns of each reset row, so its live columns
        stay contiguous (its old ones are all masked)."""
        rows, self._relocate = sorted(self._relocate), set()
        if not rows:
            return
        n, width = len(self.prefix), self.width
        if n > width or self.kv is None:  # no room: these rows run their context from the start
            for row in rows:
                self.shared[row] = False
                self.held[row] = []
            return
        kv = prefix_cache.get(model, self.prefix, self.version, device, counters)
        owned = self._buffers is not None and self.kv[0][0].data_ptr() == self._buffers[0][0].data_ptr()
        if not owned:  # e.g. rows still expanded from the prefix cache's tensors: never write into those
            self.kv = tuple((k.clone(), v.clone()) for k, v in self.kv)
        index = torch.tensor(rows, device=device)
        for (keys, values), (prefix_k, prefix_v) in zip(self.kv, kv):
            keys[index, :, width - n:] = prefix_k
            values[index, :, width - n:] = prefix_v
        self.mask[index, width - n:] = 1

    def _compact_if_sparse(self) -> None:
        live = self.mask.sum(dim=1)
        width = int(live.max())
        if self.width * 2 <= width * 3 or self.kv is None:
            return
        # Live columns last, in their order (a stable sort of the 0/1 mask), cut to the longest row.
        order = torch.sort(self.mask, dim=1, stable=True).indices[:, self.width - width:]
        self.kv = tuple((k.gather(2, order[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[3])),
                         v.gather(2, order[:, None, :, None].expand(-1, v.shape[1], -1, v.shape[3])))
                        for k, v in self.kv)
        self.mask = self.mask.gather(1, order)
        self.compactions += 1
