"""Gymnasium's classic-control and toy-text envs as text envs: renderers, prompts, action names.

Each renderer turns one observation into a short line a person can read: the numbers *and*
what they mean. What never changes (the goal, the legend, the answer format) is in the system
prompt, which a policy encodes once; the observation is paid for at every decision, so it stays
short (a CartPole observation is about 33 SmolLM2 tokens).

Every ``make_*`` function builds the real Gymnasium env and wraps it with :func:`textgym.wrap`.
What each env knows beyond that lives here too: its recommended training settings
(:data:`TRAINING_DEFAULTS`) and its scripted reference players (``scripted_*``,
:data:`REFERENCE_POLICIES`), registered with the env in :mod:`textgym.envs`.
They take the Gymnasium env's own kwargs (``is_slippery=``, ``map_name=``, ``natural=``,
``render_mode=`` ...), ``max_episode_steps`` (applied inside the text wrappers), a
``formatter`` that replaces the renderer, a ``system_prompt`` that replaces the default one,
and any other :func:`textgym.wrap` kwarg (``invalid_policy=``, ``history=`` ...).
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.toy_text.blackjack import deck as BLACKJACK_DECK

from textgym.registry import ReferencePlayer, TrainingDefaults
from textgym.wrappers.answer_format import generate_mode_defaults
from textgym.wrappers.text_observation import Renderer

__all__ = [
    "ACTION_NAMES",
    "BLACKJACK_STATES",
    "EXACT_RETURNS",
    "REFERENCE_POLICIES",
    "TRAINING_DEFAULTS",
    "AcrobotText",
    "BlackjackText",
    "CartPoleText",
    "DealerStream",
    "GridText",
    "MountainCarText",
    "TaxiText",
    "basic_strategy_hits",
    "blackjack_action_values",
    "blackjack_exact_return",
    "blackjack_greedy_table",
    "blackjack_value",
    "hit_bust_chance",
    "make_acrobot",
    "make_blackjack",
    "make_cartpole",
    "make_cliffwalking",
    "make_frozenlake",
    "make_mountaincar",
    "make_taxi",
    "planned_tabular",
    "pole_centring_potential",
    "pole_heading_potential",
    "pole_spin_potential",
    "scripted_acrobot",
    "scripted_blackjack",
    "scripted_cartpole",
    "scripted_mountaincar",
]

# Action names in the order of each Gymnasium env's action indices.
ACTION_NAMES: dict[str, list[str]] = {
    "CartPole-v1": ["LEFT", "RIGHT"],
    "MountainCar-v0": ["LEFT", "NONE", "RIGHT"],
    "Acrobot-v1": ["LEFT", "NONE", "RIGHT"],          # torque -1, 0, +1 on the middle joint
    "Blackjack-v1": ["STICK", "HIT"],
    "FrozenLake-v1": ["LEFT", "DOWN", "RIGHT", "UP"],
    "Taxi-v4": ["SOUTH", "NORTH", "EAST", "WEST", "PICKUP", "DROPOFF"],
    "CliffWalking-v1": ["UP", "RIGHT", "DOWN", "LEFT"],
}


def _side(value: float, dead_zone: float, negative: str, positive: str, zero: str) -> str:
    """A word for the sign of ``value``: ``zero`` inside the dead zone."""
    if abs(value) < dead_zone:
        return zero
    return positive if value > 0 else negative


# --------------------------------------------------------------------------- renderers

class CartPoleText(Renderer):
    """``Pole +0.09 rad, spin -0.23 turning left; cart at +0.02, velocity -0.15.``

    The episode fails when the cart leaves +-2.4 or the pole leans more than 0.21 rad. The four
    numbers are the full state; one direction word says which way the pole goes, and the pole
    comes first. Measured with the untrained SmolLM2-135M (``bench/probes/cartpole_prior.py``,
    160 random-play states): its preference for RIGHT follows that word (correlation +0.85 for the
    turning word), so RL sharpens a preference the model already has; with a word for every number
    ("leaning right", "moving left", "center"...) +0.11, and with the cart first +0.05 (the model
    reads none of them).

    Args:
        word: which direction the word names. ``"spin"``: where the pole turns (``turning
            left``); pushing that way balances for ~200 steps. ``"heading"``: where the pole is
            falling, the sign of ``angle + 0.3 * spin`` (its lean about 0.3 s ahead: ``falling
            left``); pushing that way balances for the whole 500 steps. ``"none"``: no direction
            word, the numbers only (the hard form: the policy must learn the sign rule from the
            numbers themselves; ``textgym benchmark`` trains on it).
        compact: the direction word first and the numbers in hundredths, as integers (each
            digit is a token: ~23 tokens instead of ~34). With the heading word the untrained
            model's greedy answer follows the word in 95% of random-play states, against 38%
            for the long form (``bench/probes/cartpole_prior_heading.py``).

    Example:
        >>> CartPoleText()([0.02, -0.15, 0.09, -0.23])
        'Pole +0.09 rad, spin -0.23 turning left; cart at +0.02, velocity -0.15.'
        >>> CartPoleText("heading")([0.02, -0.15, 0.09, -0.23])
        'Pole +0.09 rad, spin -0.23, falling right; cart at +0.02, velocity -0.15.'
        >>> CartPoleText("heading", compact=True)([0.02, -0.15, 0.09, -0.23])
        'Pole falling right: angle +9, spin -23; cart +2, velocity -15.'
        >>> CartPoleText("none")([0.02, -0.15, 0.09, -0.23])
        'Pole +0.09 rad, spin -0.23; cart at +0.02, velocity -0.15.'
        >>> CartPoleText("none", compact=True)([0.02, -0.15, 0.09, -0.23])
        'Pole: angle +9, spin -23; cart +2, velocity -15.'
    """

    WORDS = ("spin", "heading", "none")
    #: ``angle + LOOKAHEAD * spin``: the pole's lean this many seconds ahead, roughly.
    LOOKAHEAD = 0.3

    @classmethod
    def heading(cls, angle: float, spin: float) -> float:
        """The pole's lean about ``LOOKAHEAD`` seconds ahead: its sign is where the pole is falling."""
        return angle + cls.LOOKAHEAD * spin

    def __init__(self, word: str = "spin", compact: bool = False):
        if word not in self.WORDS:
            raise ValueError(f"word must be one of {self.WORDS}, got {word!r}")
        self.word = word
        self.compact = bool(compact)

    def constructor_kwargs(self) -> dict[str, Any]:
        return {"word": self.word, "compact": self.compact}

    def __call__(self, obs: Sequence[float]) -> str:
        x, velocity, angle, spin = (float(v) for v in obs)
        if self.compact:
            if self.word == "none":
                return (f"Pole: angle {round(100 * angle):+d}, spin {round(100 * spin):+d}; "
                        f"cart {round(100 * x):+d}, velocity {round(100 * velocity):+d}.")
            side = self.heading(angle, spin) if self.word == "heading" else spin
            words = "falling" if self.word == "heading" else "turning"
            cent = [round(100 * v) for v in (angle, spin, x, velocity)]
            return (f"Pole {words} {'left' if side < 0 else 'right'}: angle {cent[0]:+d}, spin {cent[1]:+d}; "
                    f"cart {cent[2]:+d}, velocity {cent[3]:+d}.")
        if self.word == "none":
            pole = f"Pole {angle:+.2f} rad, spin {spin:+.2f}"
        elif self.word == "heading":
            falling = "left" if self.heading(angle, spin) < 0 else "right"
            pole = f"Pole {angle:+.2f} rad, spin {spin:+.2f}, falling {falling}"
        else:
            pole = f"Pole {angle:+.2f} rad, spin {spin:+.2f} turning {'left' if spin < 0 else 'right'}"
        return f"{pole}; cart at {x:+.2f}, velocity {velocity:+.2f}."


class MountainCarText(Renderer):
    """``Car at -0.47 valley bottom, velocity +0.012 moving right.``

    Positions run from -1.20 (far left) to +0.60; the valley bottom is at -0.52 and the flag
    at +0.50.

    Example:
        >>> MountainCarText()([-0.9, -0.02])
        'Car at -0.90 left slope, velocity -0.020 moving left.'
    """

    def __call__(self, obs: Sequence[float]) -> str:
        position, velocity = float(obs[0]), float(obs[1])
        if position >= 0.5:
            where = "at the flag"
        elif abs(position + 0.52) < 0.1:
            where = "valley bottom"
        else:
            where = "right slope" if position > -0.52 else "left slope"
        moving = _side(velocity, 0.0005, "moving left", "moving right", "still")
        return f"Car at {position:+.2f} {where}, velocity {velocity:+.3f} {moving}."


class AcrobotText(Renderer):
    """``Upper link +0.03 rad, lower -0.05 rad; speeds -0.09, +0.10. Tip height -1.99, falling.``

    Angles are 0 when hanging straight down and positive counterclockwise; the lower link's
    angle is relative to the upper link. The tip height is in link lengths, from -2 (hanging)
    to +2; the goal is above +1.

    Example:
        >>> import math
        >>> AcrobotText()([math.cos(3.0), math.sin(3.0), 1.0, 0.0, 0.5, 0.0])
        'Upper link +3.00 rad, lower +0.00 rad; speeds +0.50, +0.00. Tip height +1.98, rising.'
    """

    def __call__(self, obs: Sequence[float]) -> str:
        cos1, sin1, cos2, sin2, speed1, speed2 = (float(v) for v in obs)
        angle1, angle2 = math.atan2(sin1, cos1), math.atan2(sin2, cos2)
        height = -cos1 - math.cos(angle1 + angle2)
        # d(height)/dt from the angular speeds: tells whether the swing is going up.
        rate = sin1 * speed1 + math.sin(angle1 + angle2) * (speed1 + speed2)
        trend = _side(rate, 0.05, "falling", "rising", "still")
        return (f"Upper link {angle1:+.2f} rad, lower {angle2:+.2f} rad; "
                f"speeds {speed1:+.2f}, {speed2:+.2f}. Tip height {height:+.2f}, {trend}.")


def hit_bust_chance(total: int, usable_ace: bool = False) -> float:
    """Chance that one more card takes a blackjack hand over 21.

    Gymnasium's Blackjack deals with replacement from its ``deck`` (1-9 and four 10-valued cards).
    A usable ace can drop from 11 to 1, so such a hand never busts on one card.

    Example:
        >>> round(hit_bust_chance(16), 3), hit_bust_chance(11), hit_bust_chance(16, usable_ace=True)
        (0.615, 0.0, 0.0)
    """
    if usable_ace:
        return 0.0
    return sum(total + card > 21 for card in BLACKJACK_DECK) / len(BLACKJACK_DECK)


class BlackjackText(Renderer):
    """``Your total 14: a hit busts you with chance 46%. Dealer shows 10.``

    The chance that one more card busts the hand (:func:`hit_bust_chance`) is spelled out, and
    "cannot bust you" when it is zero (a total of 11 or less, or a usable ace, which counts 11
    and can still drop to 1). The 135M model does not act on a bare two-digit total: with clean
    labels ("HIT up to 11, else STICK", 3 epochs at lr 1e-3) it stays at the majority answer
    with ``Your total 14. Dealer shows 10.`` and reaches 100% held-out accuracy in 2 epochs with
    this wording (``bench/probes/supervised_separability.py``).

    Example:
        >>> BlackjackText()((14, 1, 1))
        'Your total 14 with a usable ace: a hit cannot bust you. Dealer shows an ace.'
        >>> BlackjackText()((16, 10, 0))
        'Your total 16: a hit busts you with chance 62%. Dealer shows 10.'
    """

    def __call__(self, obs: Sequence[int]) -> str:
        total, dealer, usable_ace = int(obs[0]), int(obs[1]), bool(obs[2])
        hand = f"Your total {total}"
        if usable_ace:
            hand += " with a usable ace"
        if total > 21:  # only in the final observation
            hand += " (bust)"
        else:
            chance = hit_bust_chance(total, usable_ace)
            hand += (": a hit cannot bust you" if chance == 0
                     else f": a hit busts you with chance {chance:.0%}")
        card = "an ace" if dealer == 1 else str(dealer)
        return f"{hand}. Dealer shows {card}."


class GridText(Renderer):
    """A grid map with ``@`` at your cell, then your row and column.

    Example:
        >>> GridText(["S...", ".H.H", "...H", "H..G"])(6)
        'S...\\n.H@H\\n...H\\nH..G\\nYou: row 1, col 2.'

    Args:
        rows: the static map, one string per row, one character per cell.
        notes: optional ``{cell character: sentence}`` added when you stand on such a cell
            (e.g. ``{"H": "You fell into a hole."}``).
    """

    def __init__(self, rows: Sequence[str], notes: dict[str, str] | None = None):
        self.rows = [str(row) for row in rows]
        self.ncol = len(self.rows[0])
        self.notes = dict(notes or {})

    def constructor_kwargs(self) -> dict[str, Any]:
        return {"rows": list(self.rows), "notes": dict(self.notes)}

    def __call__(self, state: int | np.integer) -> str:
        row, col = divmod(int(state), self.ncol)
        lines = list(self.rows)
        under = lines[row][col]
        lines[row] = lines[row][:col] + "@" + lines[row][col + 1:]
        text = "\n".join(lines) + f"\nYou: row {row}, col {col}."
        if under in self.notes:
            text += " " + self.notes[under]
        return text


class TaxiText(Renderer):
    """The Taxi map with ``@`` at the taxi, where the passenger and destination are, legal moves.

    Example:
        >>> import gymnasium as gym
        >>> taxi = gym.make("Taxi-v4").unwrapped
        >>> print(TaxiText()(taxi.encode(3, 1, 2, 3)))
        +---------+
        |R: | : :G|
        | : | : : |
        | : : : : |
        | |@: | : |
        |Y| : |B: |
        +---------+
        Passenger at Y, destination B. Legal: SOUTH, NORTH, EAST.

    It reads states with a ``TaxiEnv`` of its own (``decode`` and ``action_mask``): Gymnasium's
    Taxi has one fixed map, whatever its kwargs (``is_rainy``, ``fickle_passenger``).
    """

    LANDMARKS = "RGYB"

    def __init__(self):
        from gymnasium.envs.toy_text.taxi import TaxiEnv

        self.taxi = TaxiEnv()
        self.rows = [b"".join(row).decode() for row in self.taxi.desc]

    def __call__(self, state: int | np.integer) -> str:
        taxi_row, taxi_col, passenger, destination = self.taxi.decode(int(state))
        lines = list(self.rows)
        row, col = taxi_row + 1, 2 * taxi_col + 1
        lines[row] = lines[row][:col] + "@" + lines[row][col + 1:]
        goal = self.LANDMARKS[destination]
        if passenger == 4:
            where = f"Passenger in the taxi, destination {goal}."
        elif passenger == destination:
            where = f"Passenger delivered at {goal}."
        else:
            where = f"Passenger at {self.LANDMARKS[passenger]}, destination {goal}."
        mask = self.taxi.action_mask(int(state))
        legal = [name for name, ok in zip(ACTION_NAMES["Taxi-v4"], mask) if ok]
        return "\n".join(lines) + f"\n{where} Legal: {', '.join(legal)}."


# --------------------------------------------------------------------------- env makers

def _split_env_kwargs(base_id: str, kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split kwargs into the Gymnasium env's constructor kwargs and :func:`textgym.wrap` kwargs."""
    from textgym.wrap import POLICY_KEYS, wrap

    creator = gym.envs.registration.load_env_creator(gym.spec(base_id).entry_point)
    env_keys = [k for k in inspect.signature(creator).parameters if k != "self"]
    wrap_keys = [k for k, p in inspect.signature(wrap).parameters.items()
                 if k != "env" and p.kind is not p.VAR_KEYWORD] + list(POLICY_KEYS)
    unknown = sorted(set(kwargs) - set(env_keys) - set(wrap_keys))
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {unknown} for the text {base_id}: it takes "
                        f"{base_id}'s own {env_keys} and textgym.wrap's {wrap_keys}")
    env_kwargs = {k: v for k, v in kwargs.items() if k in env_keys}
    wrap_kwargs = {k: v for k, v in kwargs.items() if k not in env_keys}
    return env_kwargs, wrap_kwargs


def _text_env(
    base_id: str,
    renderer: Callable[[gym.Env], Callable[[Any], str]],
    prompt: Callable[[gym.Env], str],
    *,
    formatter: Callable[[Any], str] | str | None,
    system_prompt: str | None,
    max_episode_steps: int | None,
    kwargs: dict[str, Any],
    base_wrapper: Callable[[gym.Env], gym.Env] | None = None,
) -> gym.Env:
    from textgym.wrap import wrap
    from textgym.wrappers.inner_time_limit import InnerTimeLimit

    env_kwargs, wrap_kwargs = _split_env_kwargs(base_id, kwargs)
    if env_kwargs.get("render_mode") == "ansi":   # the text the model sees, not the base env's
        wrap_kwargs["render_mode"] = env_kwargs.pop("render_mode")
    # The step limit goes on the base env, inside the text wrappers, so that EpisodeStats sees
    # truncations. The outer gym.make adds the env checker once.
    base = gym.make(base_id, max_episode_steps=-1, disable_env_checker=True, **env_kwargs)
    if base_wrapper is not None:
        base = base_wrapper(base)
    limit = gym.spec(base_id).max_episode_steps if max_episode_steps is None else max_episode_steps
    if limit is not None and limit > 0:
        base = InnerTimeLimit(base, limit)
    if "instructions" not in wrap_kwargs:  # the answer format's sentence ends the system prompt
        wrap_kwargs.setdefault("answer_format", "word")
    return wrap(
        base,
        actions=ACTION_NAMES[base_id],
        formatter=renderer(base.unwrapped) if formatter is None else formatter,
        system_prompt=prompt(base.unwrapped) if system_prompt is None else system_prompt,
        **wrap_kwargs,
    )


def _maker(base_id: str, renderer, prompt, default_max_steps: int | None = None):
    """A ``make_*`` function for ``base_id`` with the signature described in the module doc."""

    def make(formatter=None, system_prompt: str | None = None,
             max_episode_steps: int | None = None, **kwargs: Any) -> gym.Env:
        steps = default_max_steps if max_episode_steps is None else max_episode_steps
        return _text_env(base_id, renderer, prompt, formatter=formatter,
                         system_prompt=system_prompt, max_episode_steps=steps, kwargs=kwargs)

    make.__name__ = make.__qualname__ = "make_" + base_id.split("-")[0].lower()
    make.__doc__ = (
        f"The text version of Gymnasium's ``{base_id}``: actions "
        f"{', '.join(ACTION_NAMES[base_id])}.\n\n"
        "    Args:\n"
        "        formatter: replaces the renderer (``observation -> str`` or a format string).\n"
        "        system_prompt: replaces the default system prompt.\n"
        "        max_episode_steps: step limit (``-1``: none); default: Gymnasium's"
        + (f" ({default_max_steps} here)" if default_max_steps else "") + ".\n"
        f"        **kwargs: ``{base_id}``'s own kwargs, else :func:`textgym.wrap` kwargs.\n")
    return make


def _frozenlake_renderer(env) -> GridText:
    rows = ["".join("." if c == b"F" else c.decode() for c in row) for row in env.desc]
    return GridText(rows, notes={"H": "You fell into a hole.", "G": "You reached the goal."})


def _frozenlake_prompt(env) -> str:
    is_slippery = any(len(outcomes) > 1 for moves in env.P.values() for outcomes in moves.values())
    slippery = " The ice is slippery: you may slide sideways." if is_slippery else ""
    return ("Walk from S to the goal G on a frozen lake without stepping into a hole H. "
            f"Map: @ you, . ice; row 0 is the top, col 0 the left.{slippery}")


def _cliffwalking_renderer(env) -> GridText:
    nrow, ncol = env.shape
    rows = [["C" if env._cliff[r, c] else "." for c in range(ncol)] for r in range(nrow)]
    start_row, start_col = divmod(int(env.start_state_index), ncol)
    rows[start_row][start_col] = "S"
    rows[-1][-1] = "G"
    return GridText(["".join(row) for row in rows], notes={"G": "You reached the goal."})


def _cliffwalking_prompt(env) -> str:
    slippery = " The ground is slippery: you may slide sideways." if env.is_slippery else ""
    return ("Walk from S to the goal G. Each step costs -1; stepping onto the cliff C costs -100 "
            f"and sends you back to S. Map: @ you, . ground; row 0 is the top.{slippery}")


_make_cartpole = _maker(
    "CartPole-v1", lambda env: CartPoleText(),
    lambda env: ("Balance a pole on a cart. Push the cart LEFT or RIGHT to keep the pole upright "
                 "and the cart near the center."))


def pole_spin_potential(env: Any) -> float:
    """``-|pole angular velocity|`` (rad/s) of an unwrapped CartPole: a shaping potential."""
    return -abs(float(env.state[3]))


def pole_heading_potential(env: Any) -> float:
    """``-|angle + 0.3 * angular velocity|`` of an unwrapped CartPole (the pole's lean about 0.3 s
    ahead, the quantity :class:`CartPoleText`'s ``heading`` word names), in units of a push's
    effect: one push changes the angular velocity by about 0.29 rad/s, so this term by about
    0.09; dividing by 0.3 puts it on the spin potential's scale."""
    angle, spin = float(env.state[2]), float(env.state[3])
    return -abs(CartPoleText.heading(angle, spin)) / CartPoleText.LOOKAHEAD


def pole_centring_potential(env: Any) -> float:
    """The heading potential with the cart in it: ``-|angle + 0.3 * spin + 0.1 * x + 0.2 * velocity|
    / 0.3``. Pushing toward the sign of that sum balances the pole and brings the cart back (the
    cart's terms make the pole lean toward the centre first, the way a cart-pole is steered), so a
    policy that reads the sign a little off stays on the track instead of drifting off it: a rule
    0.1 rad off either way holds all 500 steps of 20 seeded episodes with the cart's terms, and
    without them drives the cart off the track in every one, after ~125 steps
    (``tests/test_envs.py``)."""
    x, velocity, angle, spin = (float(v) for v in env.state)
    toward_centre = CartPoleText.heading(angle, spin) + _CART_GAINS[0] * x + _CART_GAINS[1] * velocity
    return -abs(toward_centre) / CartPoleText.LOOKAHEAD


#: the cart's position and velocity gains in :func:`pole_centring_potential`
_CART_GAINS = (0.1, 0.2)
_POTENTIALS = {"spin": pole_spin_potential, "heading": pole_heading_potential,
               "centring": pole_centring_potential}


def make_cartpole(formatter=None, system_prompt: str | None = None, max_episode_steps: int | None = None,
                  shaping: float = 0.0, word: str = "spin", potential: str | None = None,
                  compact: bool = False, **kwargs: Any) -> gym.Env:
    """The text version of Gymnasium's ``CartPole-v1``: actions LEFT, RIGHT.

    The reward stays CartPole's +1 per step unless ``shaping`` > 0: then every step also gets
    ``shaping * (phi(s') - phi(s))``, potential-based shaping (:class:`~textgym.wrappers.Potential`)
    that credits each push for what it does to the pole: with ``potential="spin"``,
    ``phi = -|pole angular velocity|`` (slowing the pole's rotation); with ``"heading"``,
    ``phi = -|angle + 0.3 * angular velocity| / 0.3`` (bringing its lean a moment ahead back to
    upright, which rewards the angle as well as the spin); with ``"centring"``, the heading plus
    ``0.1 * cart position + 0.2 * cart velocity`` (:func:`pole_centring_potential`: it also steers
    the cart back to the centre). One push changes the angular velocity by about 0.29 rad/s, so
    each decision gets its own signal instead of sharing the credit for a fall a few steps later.
    An episode's shaping terms add up to ``phi(last) - phi(first)``, a few tenths whatever happened
    in between (``phi`` of the fallen state is kept, not zeroed, so the push that let the pole fall
    is not paid for ending the episode). The env's own return is
    kept in ``info["reward_env"]``; trainers report that one.

    Args:
        formatter: replaces the renderer (``observation -> str`` or a format string).
        system_prompt: replaces the default system prompt.
        max_episode_steps: step limit (``-1``: none); default: Gymnasium's (500).
        shaping: weight of the shaping (0: none).
        word: the renderer's direction word (:class:`CartPoleText`): ``"spin"``, ``"heading"``,
            or ``"none"`` (the numbers only).
        potential: the shaping potential, ``"spin"``, ``"heading"`` or ``"centring"``; default:
            the one ``word`` names (``"centring"`` for the numbers only: the reward may say what
            the prompt does not; RL alone stopped at 187-191 steps with ``"heading"``, the cart
            drifting off the track, and reached 191-200 with ``"centring"``: docs/results.md).
        compact: the renderer's short form (:class:`CartPoleText`: the word first, integers).
        **kwargs: ``CartPole-v1``'s own kwargs, else :func:`textgym.wrap` kwargs.
    """
    if shaping < 0:
        raise ValueError(f"shaping must be >= 0, got {shaping}")
    if potential is None:
        potential = word if word in _POTENTIALS else "centring"
    if potential not in _POTENTIALS:
        raise ValueError(f"potential must be one of {tuple(_POTENTIALS)}, got {potential!r}")
    if formatter is None:
        formatter = CartPoleText(word, compact)
    if shaping:
        if "reward_terms" in kwargs:
            raise ValueError("give either shaping= or reward_terms=, not both")
        from textgym.wrappers import Potential, Scale

        kwargs["reward_terms"] = [Scale(1.0), Potential(_POTENTIALS[potential], zero_terminal=False,
                                                        weight=shaping, name=potential)]
    return _make_cartpole(formatter, system_prompt, max_episode_steps, **kwargs)

make_mountaincar = _maker(
    "MountainCar-v0", lambda env: MountainCarText(),
    lambda env: ("Drive a car out of a valley to the flag on the right hill at +0.50. The engine "
                 "is weak: push back and forth to build speed. NONE means no push."))

make_acrobot = _maker(
    "Acrobot-v1", lambda env: AcrobotText(),
    lambda env: ("Swing a hanging two-link chain up until its tip is above height +1.00. You push "
                 "only at the middle joint: LEFT is torque -1, RIGHT is +1 (counterclockwise), "
                 "NONE is 0."))

def _blackjack_prompt(env) -> str:
    return ("Play blackjack: finish closer to 21 than the dealer without going over. HIT takes "
            "a card, STICK stops.")


class DealerStream(gym.Wrapper):
    """Gymnasium's Blackjack with the dealer's drawn cards from a random stream of their own.

    Gymnasium draws every card from one stream: a hand that HITs once before it STICKs sees the
    dealer draw the cards a hand that STICKs at once would not have. Here the dealer draws from a
    second generator, seeded at each reset from the first, so hands reset with one seed meet the
    same cards in the same order whatever they do: the player's next card is the same, and so is
    the dealer's hand, whenever they stick (common random numbers, as in PEGASUS, Ng & Jordan
    2000). Each card is still drawn uniformly from the infinite deck, so every hand's distribution,
    and every policy's expected return, is Gymnasium's; only the pairing between hands changes.
    """

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        observation, info = self.env.reset(seed=seed, options=options)
        base = self.env.unwrapped
        self._dealer_random = np.random.default_rng(int(base.np_random.integers(2**63)))
        return observation, info

    def step(self, action):
        if int(action) != 0:   # HIT: the player's card, from Gymnasium's own stream
            return self.env.step(action)
        base = self.env.unwrapped   # STICK: the dealer plays out from the dealer's stream
        own, base.np_random = base.np_random, self._dealer_random
        try:
            return self.env.step(action)
        finally:
            base.np_random = own


def make_blackjack(formatter=None, system_prompt: str | None = None, max_episode_steps: int | None = None,
                   common_cards: bool = False, **kwargs: Any) -> gym.Env:
    """The text version of Gymnasium's ``Blackjack-v1``: actions STICK, HIT.

    Args:
        formatter: replaces the renderer (``observation -> str`` or a format string).
        system_prompt: replaces the default system prompt.
        max_episode_steps: step limit (``-1``: none); default: Gymnasium's.
        common_cards: the dealer draws from a stream of its own (:class:`DealerStream`): hands
            dealt from one seed then meet the same cards whatever they do, so GRPO's hands of a
            group compare HIT and STICK on the same deck. The same game in distribution.
        **kwargs: ``Blackjack-v1``'s own kwargs, else :func:`textgym.wrap` kwargs.
    """
    return _text_env("Blackjack-v1", lambda env: BlackjackText(), _blackjack_prompt, formatter=formatter,
                     system_prompt=system_prompt, max_episode_steps=max_episode_steps, kwargs=kwargs,
                     base_wrapper=DealerStream if common_cards else None)

make_frozenlake = _maker("FrozenLake-v1", _frozenlake_renderer, _frozenlake_prompt)

make_taxi = _maker(
    "Taxi-v4", lambda env: TaxiText(),
    lambda env: ("Drive the taxi (@) to the passenger, PICKUP, drive to the destination, DROPOFF. "
                 "R, G, Y, B are the stops; | is a wall."))

# Gymnasium registers CliffWalking without a step limit; a text agent needs one.
make_cliffwalking = _maker("CliffWalking-v1", _cliffwalking_renderer, _cliffwalking_prompt,
                           default_max_steps=200)


# --------------------------------------------------------------------------- scripted players
# Reference players for ``textgym eval --baseline scripted``: they read the Gymnasium state
# (``env.unwrapped``) and answer with an action name, parsed like a model's answer.


def scripted_cartpole(env: gym.Env, seed: int | None = None) -> ReferencePlayer:
    """A PD controller on the pole angle and cart position: push toward where the pole falls."""
    names = ACTION_NAMES["CartPole-v1"]

    def player(info: dict[str, Any]) -> str:
        x, x_dot, theta, theta_dot = (float(v) for v in env.unwrapped.state)
        # the centring potential's form (pole_centring_potential), with smaller cart gains
        return names[int(CartPoleText.heading(theta, theta_dot) + 0.01 * x + 0.1 * x_dot > 0)]

    return player


def basic_strategy_hits(total: int, dealer: int, usable_ace: bool) -> bool:
    """Basic strategy without doubling or splitting: whether to HIT. It is the best hit/stick
    policy of Blackjack-v1 (its :func:`blackjack_value` is the optimum's, -0.0466 a hand)."""
    if usable_ace:
        return total <= 17 or (total == 18 and dealer in (9, 10, 1))
    if total <= 11:
        return True
    if total == 12:
        return dealer not in (4, 5, 6)
    return total <= 16 and dealer not in (2, 3, 4, 5, 6)


def scripted_blackjack(env: gym.Env, seed: int | None = None) -> ReferencePlayer:
    """Basic strategy without doubling or splitting (:func:`basic_strategy_hits`)."""
    from gymnasium.envs.toy_text.blackjack import sum_hand, usable_ace

    stick, hit = ACTION_NAMES["Blackjack-v1"]

    def player(info: dict[str, Any]) -> str:
        base = env.unwrapped
        take = basic_strategy_hits(sum_hand(base.player), int(base.dealer[0]), bool(usable_ace(base.player)))
        return hit if take else stick

    return player


# Blackjack-v1 computed exactly: cards drawn with replacement from ``BLACKJACK_DECK`` (so the
# dealer's hidden card can be drawn when needed), the dealer draws below 17 (a usable ace counts
# 11), a natural pays like any win (``natural=False``), the player may hit at any total.

def _dealer_finals(showing: int) -> dict[int, float]:
    """The dealer's final score (17-21, or 0 when bust) with its probability, given the card it shows."""
    finals: dict[int, float] = {}

    def draw(hard: int, ace: bool, p: float) -> None:
        total = hard + 10 if ace and hard + 10 <= 21 else hard
        if total >= 17:
            score = total if total <= 21 else 0
            finals[score] = finals.get(score, 0.0) + p
            return
        for card in BLACKJACK_DECK:
            draw(hard + card, ace or card == 1, p / len(BLACKJACK_DECK))

    draw(showing, showing == 1, 1.0)
    return finals


@functools.cache
def _stick_value(total: int, showing: int) -> float:
    """Expected return of sticking at ``total`` (<= 21) against the dealer showing ``showing``."""
    return sum(p * ((total > final) - (total < final)) for final, p in _dealer_finals(showing).items())


def _hand_values(hits: Callable[[int, int, bool], bool] | None) -> Callable[[int, bool, int], float]:
    """The expected return of a hand (its hard total, whether it holds an ace, the dealer's card)
    played by ``hits`` from here on, or by the best hit/stick policy when ``hits`` is ``None``."""
    @functools.cache
    def value(hard: int, ace: bool, showing: int) -> float:
        if hard > 21:
            return -1.0
        usable = ace and hard + 10 <= 21
        total = hard + 10 if usable else hard
        hit = sum(value(hard + card, ace or card == 1, showing) for card in BLACKJACK_DECK) / len(BLACKJACK_DECK)
        stick = _stick_value(total, showing)
        if hits is None:
            return max(hit, stick)
        return hit if hits(total, showing, usable) else stick

    return value


def blackjack_value(hits: Callable[[int, int, bool], bool] | None = None) -> float:
    """The exact expected return of a Blackjack-v1 policy that sees what the text env shows
    (``hits(total, dealer_card, usable_ace) -> True`` to HIT), or of the best such policy when
    ``hits`` is ``None``. No sample of hands: what a sampled mean estimates.

    Example:
        >>> round(blackjack_value(), 4)                                  # the best hit/stick policy
        -0.0466
        >>> round(blackjack_value(lambda total, dealer, ace: total < 17), 4)   # "stick at 17+"
        -0.0793
    """
    value = _hand_values(hits)
    n = len(BLACKJACK_DECK)
    return sum(value(a + b, a == 1 or b == 1, showing) for a in BLACKJACK_DECK for b in BLACKJACK_DECK
               for showing in BLACKJACK_DECK) / n ** 3


def blackjack_action_values() -> dict[tuple[int, int, bool], tuple[float, float]]:
    """``(HIT, STICK)`` expected returns in each of :data:`BLACKJACK_STATES`, the best hit/stick
    policy playing the rest of the hand: how much a wrong answer in a state costs there.

    Example:
        >>> hit, stick = blackjack_action_values()[(16, 10, False)]   # hard 16 against a 10
        >>> round(hit, 3), round(stick, 3)
        (-0.569, -0.576)
    """
    value = _hand_values(None)
    n = len(BLACKJACK_DECK)
    return {(total, showing, usable): (
                sum(value(total - 10 * usable + card, usable or card == 1, showing) for card in BLACKJACK_DECK) / n,
                _stick_value(total, showing))
            for total, showing, usable in BLACKJACK_STATES}


#: Every state a Blackjack hand can reach before its last decision, as the text env shows it
#: (total, dealer's card, usable ace): hard totals 4-21, soft totals 12-21.
BLACKJACK_STATES: tuple[tuple[int, int, bool], ...] = tuple(
    (total, dealer, usable) for usable in (False, True) for total in range(12 if usable else 4, 22)
    for dealer in range(1, 11))


def blackjack_greedy_table(policy: Any, env_kwargs: dict[str, Any] | None = None) -> dict[tuple[int, int, bool], bool]:
    """Whether ``policy``'s greedy answer is HIT in each of :data:`BLACKJACK_STATES`, read as the
    text env (made with ``env_kwargs``) renders it: one batch, acting as evaluation does
    (``Policy.evaluating``)."""
    import textgym
    from textgym.wrappers.text_observation import TextObservation

    env = textgym.make("textgym/Blackjack-v1", **(env_kwargs or {}))
    try:
        wrapper = env
        while not isinstance(wrapper, TextObservation):
            wrapper = wrapper.env
        texts = [wrapper.observation((total, dealer, int(usable))) for total, dealer, usable in BLACKJACK_STATES]
        system = env.get_wrapper_attr("system_prompt")
        _, info = env.reset(seed=0)
        valid = list(info["valid_actions"])
    finally:
        env.close()
    with policy.evaluating():
        decisions = policy.act(texts, [system] * len(texts), [valid] * len(texts), greedy=True)
    return {state: decision.text.strip().upper() == "HIT" for state, decision in zip(BLACKJACK_STATES, decisions)}


def blackjack_exact_return(policy: Any, env_kwargs: dict[str, Any] | None = None) -> float:
    """The exact expected return per hand of ``policy``'s greedy play on ``textgym/Blackjack-v1``
    (:func:`blackjack_value` of :func:`blackjack_greedy_table`): what a mean over sampled hands
    estimates, without the luck of the deal (2,000 hands have a standard error of about 0.021)."""
    table = blackjack_greedy_table(policy, env_kwargs)
    return blackjack_value(lambda total, dealer, usable: table[(total, dealer, usable)])


#: The envs whose greedy play has an exact expected return (``textgym.registry.exact_return``).
EXACT_RETURNS: dict[str, str] = {"Blackjack-v1": "textgym.envs.classic:blackjack_exact_return"}


def scripted_mountaincar(env: gym.Env, seed: int | None = None) -> ReferencePlayer:
    """Push in the direction of motion: builds momentum until the car climbs out (~120 steps)."""
    left, _, right = ACTION_NAMES["MountainCar-v0"]
    return lambda info: right if env.unwrapped.state[1] >= 0 else left


def scripted_acrobot(env: gym.Env, seed: int | None = None) -> ReferencePlayer:
    """Torque along the second joint's angular velocity: pumps energy into the swing."""
    left, _, right = ACTION_NAMES["Acrobot-v1"]
    return lambda info: right if env.unwrapped.state[3] > 0 else left


def _value_iteration(transitions: dict, gamma: float = 0.99, tol: float = 1e-8) -> np.ndarray:
    """Greedy policy (action per state) of the MDP ``P[s][a] = [(prob, s2, reward, done), ...]``."""
    n_states, n_actions = len(transitions), len(transitions[0])
    values = np.zeros(n_states)
    for _ in range(10_000):
        q = np.array([[sum(p * (r + (0.0 if done else gamma * values[s2]))
                           for p, s2, r, done in transitions[s][a])
                       for a in range(n_actions)] for s in range(n_states)])
        new = q.max(axis=1)
        if np.max(np.abs(new - values)) < tol:
            break
        values = new
    return q.argmax(axis=1)


def planned_tabular(env: gym.Env, seed: int | None = None) -> ReferencePlayer:
    """The optimal policy of a toy-text MDP (FrozenLake, Taxi, CliffWalking) by value iteration on
    its transition table ``P`` (discount 0.99); the state is ``env.unwrapped.s``."""
    plan = _value_iteration(env.unwrapped.P)
    names = list(env.get_wrapper_attr("action_names"))
    return lambda info: names[int(plan[int(env.unwrapped.s)])]


#: The reference players of each env by name (``textgym eval --baseline NAME``): ``"scripted"``,
#: and ``"optimal"`` where the scripted player is the best policy (Blackjack: basic strategy, whose
#: exact expected return is the optimum's, :func:`blackjack_value`).
REFERENCE_POLICIES: dict[str, dict[str, str]] = {
    "CartPole-v1": {"scripted": "textgym.envs.classic:scripted_cartpole"},
    "MountainCar-v0": {"scripted": "textgym.envs.classic:scripted_mountaincar"},
    "Acrobot-v1": {"scripted": "textgym.envs.classic:scripted_acrobot"},
    "Blackjack-v1": {"scripted": "textgym.envs.classic:scripted_blackjack",
                     "optimal": "textgym.envs.classic:scripted_blackjack"},
    "FrozenLake-v1": {"scripted": "textgym.envs.classic:planned_tabular"},
    "Taxi-v4": {"scripted": "textgym.envs.classic:planned_tabular"},
    "CliffWalking-v1": {"scripted": "textgym.envs.classic:planned_tabular"},
}

# --------------------------------------------------------------------------- training defaults
# Budgets in updates, so the default run does the same work on any machine; small, frequent updates
# show a trend early. The measurements behind them (smollm2-135m, score mode, LoRA, 2-core CPU) are
# in docs/results.md.

# Generate mode (every env): the JSON answer format, prefilled with '{"action": "' and stopped at
# the closing quote, sampled at temperature 0.7 (the untrained model then names a valid action
# ~80-90% of the time: bench/probes/generate_prior.py), and a bonus of 0.5 for a valid answer that
# fades over the first steps of each env while the invalid penalty (-1) stays.
GENERATE_TEMPERATURE = 0.7


def _generate(format_bonus_steps: int, **overrides: Any) -> dict[str, Any]:
    """An env's ``modes["generate"]`` settings: the JSON format and its shaping, then ``overrides``."""
    tables = generate_mode_defaults("json", temperature=GENERATE_TEMPERATURE, format_bonus=0.5,
                                    format_bonus_steps=format_bonus_steps)
    for name, value in overrides.items():
        tables[name] = {**tables.get(name, {}), **value} if isinstance(value, dict) else value
    return tables


#: The recommended training settings of each env (``textgym train`` starts from them).
TRAINING_DEFAULTS: dict[str, TrainingDefaults] = {
    "CartPole-v1": TrainingDefaults(
        # The heading word ("falling left/right": the sign of angle + 0.3 x spin), its shaping
        # potential and state centering: the greedy check passed 195 after 2 updates (the spin
        # word alone: 194 sampled at update 7, greedy ~200 at most; docs/results.md, "The
        # default run"). A greedy check after every update, 8 episodes capped at 200 steps (195 over
        # 200 steps, CartPole-v0's threshold), stops the run once solved.
        updates=12, until=195.0, check_every=1, check_episodes=8, check_max_steps=200,
        num_envs=8, lr=2e-4,
        trainer={
            # one optimizer step per 32 decisions, as measured (not a fixed number per update)
            "episodes_per_update": 16, "minibatch_size": 32, "minibatches": None,
            # credit a push for the next few steps only: with the shaping, that is what makes the
            # advantage follow the right push
            "gamma": 0.3,
            "warmup_updates": 2,      # keeps Adam's first, largest steps small
            "metrics_window": 16,
            "lora_layers": 8,         # an adapter on the top 8 layers only: ~5 instead of ~3 decisions/s
            # the untrained policy's preference follows the heading word, but its shared lean
            # toward one action swings from update to update; centring removes that part of the
            # gradient, so what is learned is to follow the word
            "state_centering": 0.8,
        },
        # the heading word and the shaping that credits each push for what it does to the heading
        env_kwargs={"shaping": 1.0, "word": "heading"},
        # generate mode: the format is learned first (the bonus fades over ~5 updates' steps),
        # then the same rule as in score mode, more slowly: a budget of 75 updates (1,200 episodes)
        modes={"generate": _generate(200, updates=75)},
    ),
    "Blackjack-v1": TrainingDefaults(
        # A warm start on basic strategy's 1,000 hands (6 epochs at lr 1e-3), no RL update: the
        # greedy table's exact expected return -0.0536, -0.0466 (basic strategy itself, the
        # optimum), -0.0475 at seeds 0-2 (blackjack_value; bench/blackjack_exact.py); on the 2,000
        # held-out hands -0.0675, -0.0585, -0.061, where basic strategy scores -0.0585.
        # REINFORCE alone (80 updates with the KL penalty and entropy bonus below, the default
        # until this warm start): -0.071 to -0.116 in expectation. docs/results.md, "Blackjack".
        updates=0, num_envs=16, lr=2e-4, sft_player="scripted", sft_episodes=1000, sft_epochs=6,
        trainer={
            # one-to-three-step episodes with noisy outcomes: many episodes per update
            "episodes_per_update": 64, "metrics_window": 128, "sft_lr": 1e-3,
            # RL (--updates N): plain REINFORCE settles on always STICK (-0.17); a KL penalty and a
            # small entropy bonus keep both answers sampled in every state
            "kl_coef": 0.2, "entropy_coef": 0.01,
        },
        # 280 states met again and again: each is scored once per update (bench/score_memo.py:
        # 4.4x faster rollouts of 256 hands from an empty memo, 21x once it holds the states)
        policy={"score_memo_bytes": 64 * 2**20},
        # generate mode keeps the settings it was measured with: 16 REINFORCE updates from the
        # untrained model, no penalty or bonus (~6 steps of each env per update: the format bonus
        # fades over ~10 updates)
        modes={"generate": _generate(64, updates=16, sft_player="none",
                                     trainer={"kl_coef": 0.0, "entropy_coef": 0.0})},
    ),
    "FrozenLake-v1": TrainingDefaults(
        updates=16, num_envs=8, lr=2e-4,
        # the reward comes at the goal only, many steps later: a long horizon
        trainer={"episodes_per_update": 16, "gamma": 0.99, "metrics_window": 32},
        modes={"generate": _generate(200)},
    ),
    # no tuned score-mode settings (the generic ones apply); generate mode answers in JSON
    "MountainCar-v0": TrainingDefaults(modes={"generate": _generate(400)}),
    "Acrobot-v1": TrainingDefaults(modes={"generate": _generate(400)}),
    "Taxi-v4": TrainingDefaults(modes={"generate": _generate(400)}),
    "CliffWalking-v1": TrainingDefaults(modes={"generate": _generate(400)}),
}
