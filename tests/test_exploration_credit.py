"""Exploration with an importance-weighted update, per-state credit and a fixed-size trust region
(the RL mechanisms of the trainers), on cases whose answers are known."""

import copy
import math

import pytest
import torch

from textgym.policy.sampling import sample_candidate, sample_next
from textgym.trainers import ReinforceConfig, make_trainer
from textgym.trainers.engine.loss_step import behaviour_logprobs
from textgym.trainers.engine.losses import (
    normalize,
    same_state_advantages,
    truncated_importance_weights,
)

SMALL = {"num_envs": 4, "episodes_per_update": 8, "lr": 1e-3}


def _weights(trainer):
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}


# --- 1. exploration: the behaviour distribution and its correction --------------------------------


def test_a_floor_of_one_samples_the_uniform_over_the_valid_actions():
    scores = torch.tensor([0.0, -30.0, -30.0, -30.0])  # the policy: the first action, surely
    generator = torch.Generator().manual_seed(0)
    counts = [0] * 4
    for _ in range(4000):
        k, logp, behaviour = sample_candidate(scores, 1.0, False, generator, floor=1.0)
        counts[k] += 1
        assert behaviour == pytest.approx(math.log(0.25), abs=1e-6)
    assert all(900 <= c <= 1100 for c in counts)  # 1000 expected each
    assert float(logp[0]) == pytest.approx(0.0, abs=1e-6)  # the policy itself is unchanged


def test_the_behaviour_probability_of_a_partial_floor_by_hand():
    scores = torch.tensor([1.0, 0.0, -1.0])
    pi = torch.softmax(scores, -1)
    generator = torch.Generator().manual_seed(1)
    for _ in range(20):
        k, logp, behaviour = sample_candidate(scores, 1.0, False, generator, floor=0.3)
        assert math.exp(behaviour) == pytest.approx(0.7 * float(pi[k]) + 0.3 / 3, rel=1e-6)
        assert torch.allclose(logp.exp(), pi)
    # greedy play and a floor of 0 draw from the policy itself: no behaviour recorded
    assert sample_candidate(scores, 1.0, True, generator, floor=0.3)[::2] == (0, None)
    assert sample_candidate(scores, 1.0, False, generator, floor=0.0)[2] is None


def test_the_importance_weight_is_pi_over_mu_truncated():
    pi = torch.tensor([[math.log(0.8)], [math.log(0.05)]])
    mu = torch.tensor([[math.log(0.5)], [math.log(0.25)]])
    mask = torch.ones(2, 1, dtype=torch.bool)
    assert torch.allclose(truncated_importance_weights(pi, mu, mask, cap=10.0), torch.tensor([[1.6], [0.2]]))
    assert torch.allclose(truncated_importance_weights(pi, mu, mask, cap=1.0), torch.tensor([[1.0], [0.2]]))


def test_top_p_records_the_log_probs_of_the_truncated_draw():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    generator = torch.Generator().manual_seed(0)
    for _ in range(30):
        token, logp, drawn = sample_next(logits, 1.0, 0.8, False, generator)
        t = int(token)
        assert t in (0, 1)  # 0.5 + 0.3 reaches top_p: the rest is never drawn
        assert float(logp) == pytest.approx(math.log([0.5, 0.3][t]), rel=1e-5)  # the policy's
        assert float(drawn) == pytest.approx(math.log([0.5, 0.3][t] / 0.8), rel=1e-5)  # the draw's
    assert sample_next(logits, 1.0, 1.0, False, generator)[2] is None


def test_generate_mode_decisions_record_the_top_p_draw(tiny_model_and_tokenizer):
    from textgym.policy import Policy

    model, tokenizer = tiny_model_and_tokenizer
    plain = Policy(model, tokenizer, mode="generate", seed=0, max_new_tokens=4).act(["hi"], ["sys"])[0]
    assert plain.behaviour_logprobs is None
    cut = Policy(model, tokenizer, mode="generate", seed=0, max_new_tokens=4, top_p=0.5).act(["hi"], ["sys"])[0]
    assert len(cut.behaviour_logprobs) == len(cut.token_logprobs)
    # the draw renormalises the kept mass (<= 1): each token is at least as likely under it
    assert all(b >= t - 1e-6 for b, t in zip(cut.behaviour_logprobs, cut.token_logprobs))


def test_policy_exploring_records_the_draw_and_leaves_greedy_play_alone(tiny_policy):
    actions = [["A", "B", "C", "D"]] * 6
    with tiny_policy.exploring(1.0):
        sampled = tiny_policy.act(["obs"] * 6, ["sys"] * 6, actions)
        greedy = tiny_policy.act(["obs"] * 6, ["sys"] * 6, actions, greedy=True)
    assert all(d.behaviour_logprobs == [pytest.approx(math.log(0.25))] for d in sampled)
    assert all(d.behaviour_logprobs is None for d in greedy)
    assert len({d.action_index for d in greedy}) == 1
    assert tiny_policy.act(["obs"], ["sys"], actions[:1])[0].behaviour_logprobs is None  # the block ended
    with pytest.raises(ValueError, match="floor"), tiny_policy.exploring(1.5):
        pass


def test_a_floor_of_zero_leaves_the_update_unchanged_bit_for_bit(tiny_policy):
    """Without a floor nothing is recorded; and a behaviour equal to the policy weighs each unit by
    exactly 1: the same weights, bit for bit, as the uncorrected update."""
    trainer = make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0", config=SMALL)
    episodes = trainer.collect().episodes
    assert all(d.behaviour_logprobs is None for ep in episodes for d in ep.decisions)
    twin = make_trainer("reinforce", copy.deepcopy(tiny_policy), env="textgym/Bandit-v0", config=SMALL)
    twin.model.load_state_dict(trainer.model.state_dict())
    relabelled = copy.deepcopy(episodes)
    for ep in relabelled:
        for d in ep.decisions:
            d.behaviour_logprobs = [d.logprob]
    torch.manual_seed(3)
    trainer.update(episodes)
    torch.manual_seed(3)
    metrics = twin.update(relabelled)
    assert metrics["importance_weight"] == 1.0
    assert all(torch.equal(a, b) for a, b in zip(_weights(trainer).values(), _weights(twin).values()))


def test_behaviour_log_probs_fall_back_to_the_acting_ones():
    from types import SimpleNamespace as D

    acting = torch.tensor([[-0.1, -0.2], [-0.3, 0.0]])
    mask = torch.tensor([[True, True], [True, False]])
    assert behaviour_logprobs([D(behaviour_logprobs=None)] * 2, acting, mask) is None
    out = behaviour_logprobs([D(behaviour_logprobs=None), D(behaviour_logprobs=[-1.5])], acting, mask)
    assert torch.equal(out, torch.tensor([[-0.1, -0.2], [-1.5, 0.0]]))


@pytest.mark.parametrize("algorithm", ["reinforce", "grpo", "ppo"])
def test_an_exploring_rollout_trains_with_importance_weights_at_most_the_cap(algorithm, tiny_policy):
    config = {**SMALL, "explore_floor": 0.5, "importance_cap": 0.9}
    if algorithm == "grpo":
        config["group_size"] = 2
    trainer = make_trainer(algorithm, tiny_policy, env="textgym/Bandit-v0", config=config)
    rollout = trainer.collect()
    assert all(d.behaviour_logprobs is not None for ep in rollout.episodes for d in ep.decisions)
    metrics = trainer.update(rollout.episodes, rollout.stats)
    assert 0.0 < metrics["importance_weight"] <= 0.9 and math.isfinite(metrics["loss"])


def test_importance_floor_is_the_least_weight_of_an_exploration_draw(tiny_policy):
    """A floor draw of an action the policy gives ~0 weighs ``pi / mu`` (~0: it cannot teach that
    action); ``importance_floor`` raises it to the floor, never above the cap, never at padding."""
    from textgym.trainers.engine.losses import truncated_importance_weights

    policy_lp = torch.log(torch.tensor([[0.002, 0.9, 0.3]]))
    drawn_lp = torch.log(torch.tensor([[0.07, 0.5, 0.3]]))
    mask = torch.tensor([[True, True, False]])
    plain = truncated_importance_weights(policy_lp, drawn_lp, mask, cap=1.0)
    assert torch.allclose(plain, torch.tensor([[0.002 / 0.07, 1.0, 0.0]]))
    floored = truncated_importance_weights(policy_lp, drawn_lp, mask, cap=1.0, floor=0.5)
    assert torch.allclose(floored, torch.tensor([[0.5, 1.0, 0.0]]))
    with pytest.raises(ValueError, match="importance_floor"):
        ReinforceConfig(importance_floor=0.8, importance_cap=0.5)
    # through the update: floor = cap = 1 makes every exploration draw weigh exactly 1
    config = {**SMALL, "explore_floor": 0.5, "importance_cap": 1.0, "importance_floor": 1.0}
    trainer = make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0", config=config)
    rollout = trainer.collect()
    assert trainer.update(rollout.episodes, rollout.stats)["importance_weight"] == pytest.approx(1.0)


def test_the_rollout_kl_of_exploration_draws_is_the_rollout_policy_s():
    """Draws from the floor's mixture mu, weighed by pi_old / mu, estimate KL(pi_old || pi_new)
    (what the metric, the alarms and ``target_kl`` read); unweighed, the floor's draws of an answer
    the policy had all but ruled out, and the update lifted, swamp it."""
    from textgym.policy import Evaluation
    from textgym.trainers.engine.kl import rollout_kl

    old = torch.tensor([0.9, 0.1 - 1e-9, 1e-9], dtype=torch.float64)
    new = torch.tensor([0.85, 0.15 - 1e-4, 1e-4], dtype=torch.float64)
    mu = 0.5 * old + 0.5 / 3
    exact = float((old * (old / new).log()).sum())
    drawn = torch.multinomial(mu, 200_000, replacement=True, generator=torch.Generator().manual_seed(0))
    column = lambda p: p.log()[drawn].float().unsqueeze(1)
    mask = torch.ones(len(drawn), 1, dtype=torch.bool)
    ev = Evaluation(logprobs=column(new), mask=mask, old_logprobs=column(old), entropy=torch.zeros(len(drawn)),
                    hidden=torch.zeros(len(drawn), 1))
    # each draw's term, its spread giving the estimate's standard error
    ratio = (new / old)[drawn]
    terms = (old / mu)[drawn] * (ratio - ratio.log() - 1)
    stderr = float(terms.std()) / len(drawn) ** 0.5
    assert abs(rollout_kl(ev, column(mu)) - exact) < 4 * stderr < 0.1 * exact
    assert rollout_kl(ev) > 1000 * exact  # unweighed: the floor's draws of the third answer


# --- 2. per-state credit ------------------------------------------------------------------------


def test_same_state_advantages_by_hand():
    values = torch.tensor([1.0, 0.0, -1.0, 4.0, 2.0])
    out = same_state_advantages(["a", "b", "a", "c", "a"], values)
    assert torch.allclose(out, torch.tensor([1.0 - 2 / 3, 0.0, -1.0 - 2 / 3, 0.0, 2.0 - 2 / 3]))
    with pytest.raises(ValueError, match="keys"):
        same_state_advantages(["a"], values)


def test_same_state_advantages_weighted_by_hand():
    # the state value under a policy that plays the first action 3 times in 4: 0.75 * 1 + 0.25 * -1 = 0.5
    values = torch.tensor([1.0, -1.0, 4.0])
    out = same_state_advantages(["a", "a", "b"], values, weights=torch.tensor([0.75, 0.25, 1.0]))
    assert torch.allclose(out, torch.tensor([0.5, -1.5, 0.0]))
    # two actions that tie get no push, however the policy spreads over them
    tied = same_state_advantages(["a", "a", "a"], torch.tensor([1.0, 1.0, -1.0]), weights=torch.tensor([0.9, 0.05, 0.05]))
    assert torch.allclose(tied[:2], torch.tensor([0.1, 0.1])) and tied[2] == pytest.approx(-1.9)


def _advantages_seen_by(algorithm_module, monkeypatch) -> list:
    """The advantages each call of ``algorithm_module``'s clipped surrogate receives, as they come."""
    seen = []
    original = algorithm_module.clipped_surrogate

    def spy(logprobs, old, advantages, *args, **kwargs):
        seen.append(advantages.detach().clone())
        return original(logprobs, old, advantages, *args, **kwargs)

    monkeypatch.setattr(algorithm_module, "clipped_surrogate", spy)
    return seen


def _one_countdown_update(policy, countdown_env_cls, monkeypatch, **config):
    """One REINFORCE update on 4 Countdown envs (states "N steps left." recur across episodes):
    the advantages its loss saw (one minibatch, sorted), each decision's normalised return-to-go
    (gamma 1, computed by hand) and its state's key, in rollout order."""
    import textgym.trainers.algorithms.reinforce as reinforce_module
    from textgym.vector import TextVectorEnv

    seen = _advantages_seen_by(reinforce_module, monkeypatch)
    venv = TextVectorEnv([countdown_env_cls() for _ in range(4)])
    trainer = make_trainer("reinforce", policy, env=venv, config=ReinforceConfig(**SMALL, minibatches=1, **config))
    rollout = trainer.collect()
    trainer.update(rollout.episodes, rollout.stats)
    returns = []
    for ep in rollout.episodes:
        running, to_go = 0.0, []
        for step in reversed(ep.steps):
            running += float(step.reward)
            to_go.insert(0, running)
        returns += to_go
    keys = [tuple(d.prompt_ids) for ep in rollout.episodes for d in ep.decisions]
    assert len(set(keys)) < len(keys)  # some states recur
    (advantages,) = seen  # one minibatch: every decision, in the update's shuffled order
    return advantages.sort().values, normalize(torch.tensor(returns)), keys


def test_reinforce_adds_the_same_state_advantage_to_the_batch_normalised_return(
        tiny_policy, countdown_env_cls, monkeypatch):
    """Each decision's advantage is its normalised return-to-go plus state_credit x (that minus
    the mean over its state's decisions)."""
    advantages, norm, keys = _one_countdown_update(tiny_policy, countdown_env_cls, monkeypatch, state_credit=0.5)
    by_state = {k: norm[[i for i, key in enumerate(keys) if key == k]].mean() for k in set(keys)}
    expected = norm + 0.5 * (norm - torch.stack([by_state[k] for k in keys]))
    assert torch.allclose(advantages, expected.sort().values, atol=1e-5)


def test_reinforce_state_baseline_uses_each_state_s_mean_and_rebn_for_lone_states(
        tiny_policy, countdown_env_cls, monkeypatch):
    """``baseline="state"``: a decision's advantage is its normalised return-to-go minus the mean
    over its state's decisions in the batch; a state seen once keeps its normalised return."""
    advantages, norm, keys = _one_countdown_update(tiny_policy, countdown_env_cls, monkeypatch, baseline="state")
    expected = torch.stack([
        norm[i] - norm[[j for j, other in enumerate(keys) if other == key]].mean() if keys.count(key) > 1
        else norm[i] for i, key in enumerate(keys)])
    assert torch.allclose(advantages, expected.sort().values, atol=1e-5)


def test_grpo_compares_a_state_s_decisions_within_its_group_only(tiny_policy, monkeypatch):
    """GRPO's state credit (GiGPO): a decision's advantage is its episode's group advantage plus its
    normalised return-to-go minus the mean over the decisions in the same state *of its group*
    (members share the seed, hence the cards to come); the same hand in another group is not
    compared with it."""
    import textgym.trainers.algorithms.grpo as grpo_module
    from textgym.trainers import GRPOConfig
    from textgym.trainers.engine.losses import group_advantages

    seen = _advantages_seen_by(grpo_module, monkeypatch)
    G = 4
    config = GRPOConfig(num_envs=8, episodes_per_update=96, group_size=G, lr=1e-3, minibatches=1, epochs=1,
                        explore_floor=0.5, state_credit=1.0)
    trainer = make_trainer("grpo", tiny_policy, env="textgym/Blackjack-v1", config=config)
    rollout = trainer.collect()
    trainer.update(rollout.episodes, rollout.stats)
    episodes = rollout.episodes
    returns = torch.tensor([float(ep.return_) for ep in episodes])
    episode_adv = group_advantages(returns.view(-1, G)).view(-1)
    rows = [(i // G, tuple(d.prompt_ids), i) for i, ep in enumerate(episodes) for d in ep.decisions]
    to_go = normalize(torch.tensor([float(sum(s.reward for s in ep.steps[t:])) for ep in episodes
                                    for t in range(len(ep.steps))]))

    def with_anchors(scope):
        key = [(group if scope == "group" else 0, prompt) for group, prompt, _ in rows]
        return torch.stack([episode_adv[ep] + to_go[n] - to_go[[m for m, k in enumerate(key) if k == key[n]]].mean()
                            for n, (_, _, ep) in enumerate(rows)])

    advantages = torch.cat(seen)  # one minibatch, one epoch (in chunks): every decision once
    assert torch.allclose(advantages.sort().values, with_anchors("group").sort().values, atol=1e-5)
    # the case tells the two apart: some hand recurs in two groups with different outcomes
    assert not torch.allclose(with_anchors("group"), with_anchors("batch"), atol=1e-3)


def test_state_credit_off_leaves_the_advantages_unchanged(tiny_policy):
    trainer = make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0", config=SMALL)
    advantages = torch.tensor([0.3, -0.3])
    assert trainer.with_state_credit([], torch.zeros(2), advantages) is advantages


# --- 3. the trust region: steps per update, KL stop --------------------------------------------


@pytest.mark.parametrize("max_length", [2, 12])
def test_an_update_takes_the_configured_number_of_steps_whatever_the_episode_length(
        max_length, tiny_policy, countdown_env_cls):
    from textgym.vector import TextVectorEnv

    venv = TextVectorEnv([countdown_env_cls(max_length=max_length) for _ in range(4)])
    trainer = make_trainer("reinforce", tiny_policy, env=venv,
                           config=ReinforceConfig(**SMALL, minibatches=3, epochs=2))
    rollout = trainer.collect()
    metrics = trainer.update(rollout.episodes, rollout.stats)
    assert metrics["decisions"] >= 6
    assert metrics["optimizer_steps"] == 6 and metrics["epochs"] == 2


def test_target_kl_stops_the_epochs_of_an_update_that_exceeds_it(tiny_policy):
    config = ReinforceConfig(**{**SMALL, "lr": 0.5}, minibatches=4, epochs=5, target_kl=1e-4)
    trainer = make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0", config=config)
    metrics = trainer.train(updates=1)[0]
    assert metrics["optimizer_steps"] < 20 and metrics["epochs"] < 5


def test_reinforce_clips_its_ratio_by_default():
    assert ReinforceConfig().clip_eps == 0.2
    assert ReinforceConfig(clip_eps=None).clip_eps is None
    assert ReinforceConfig().clip_eps_high is None   # symmetric unless set
    with pytest.raises(ValueError, match="clip_eps_high"):
        ReinforceConfig(clip_eps=None, clip_eps_high=0.28)


@pytest.mark.parametrize("algorithm", ["reinforce", "grpo", "ppo"])
def test_clip_higher_reaches_every_algorithm_s_surrogate(algorithm, tiny_policy, monkeypatch):
    import importlib

    module = importlib.import_module(f"textgym.trainers.algorithms.{algorithm}")
    seen = []
    original = module.clipped_surrogate

    def spy(*args, **kwargs):
        seen.append(kwargs.get("clip_eps_high"))
        return original(*args, **kwargs)

    monkeypatch.setattr(module, "clipped_surrogate", spy)
    config = {**SMALL, "clip_eps_high": 0.28, **({"group_size": 2} if algorithm == "grpo" else {})}
    make_trainer(algorithm, tiny_policy, env="textgym/Bandit-v0", config=config).train(updates=1)
    assert seen and set(seen) == {0.28}


# --- 4. the benchmark's exact return, through the registry ---------------------------------------


def test_blackjack_exact_return_of_a_policy_that_reads_its_total():
    """A policy that hits below 17, reading the total from the text the env renders, has the exact
    expected return of "stick at 17+"; the registry hands the function out by env id."""
    import contextlib
    import re
    from types import SimpleNamespace

    from textgym import registry
    from textgym.envs.classic import blackjack_value

    class StickAt17:
        evaluating = staticmethod(contextlib.nullcontext)

        def act(self, texts, systems, valid, greedy=False):
            assert greedy
            totals = [int(re.search(r"total (\d+)", text).group(1)) for text in texts]
            return [SimpleNamespace(text="HIT" if total < 17 else "STICK") for total in totals]

    exact = registry.exact_return("textgym/Blackjack-v1")
    assert exact(StickAt17()) == pytest.approx(blackjack_value(lambda total, dealer, ace: total < 17))
    assert registry.exact_return("cartpole") is None


def test_the_rl_suite_s_rows_are_also_full_s_and_record_their_start():
    from textgym.benchmark import SUITES, Target, gain_summary, rl_gain

    rl, full = SUITES["rl"], SUITES["full"]
    assert {row.name for row in rl.rows} <= {row.name for row in full.rows} and rl.seeds == 3
    blackjack = next(row for row in rl.rows if row.env == "blackjack")
    assert blackjack.settings["sft_player"] == "none"  # the gain is RL's alone
    assert blackjack.target.met({"return_mean": -0.1, "exact_return": -0.05}) is True
    assert Target(exact_return_at_least=-0.06).met({"return_mean": 0.0}) is None  # no exact return: not known
    gain = rl_gain({"return_mean": -0.05, "return_stderr": 0.03, "exact_return": -0.05},
                   {"return_mean": -1.0, "return_stderr": 0.04, "exact_return": -1.0})
    assert gain == {"return": 0.95, "return_stderr": 0.05, "paired": False, "exact_return": 0.95}
    assert gain_summary([gain, None]) == {}  # a run without its start: no gain claimed


def test_family_rows_measure_plain_reinforce_and_the_rl_row_the_family_s_default():
    """The quick and full suites' family_relationships rows keep what they measured (plain
    REINFORCE: REINFORCE's own defaults for the fields the family's tree sets); the ``rl`` row
    is the family's score-mode default, the tree."""
    from textgym.cli import training
    from textgym.cli.benchmarking import _plan

    from textgym.benchmark import _PLAIN_REINFORCE, SUITES
    from textgym.envs.reasoning import SCORE_TREE_REINFORCE
    from textgym.trainers import ReinforceConfig

    untouched = ReinforceConfig()
    assert _PLAIN_REINFORCE == {name: getattr(untouched, name) for name in SCORE_TREE_REINFORCE}
    seen = set()
    for suite in ("quick", "full", "rl"):
        for row in SUITES[suite].rows:
            if row.env != "reasoning_gym/family_relationships":
                continue
            config = training._trainer_config(_plan(row, "smollm2-135m").config)
            tree = row.name.endswith("-rl")
            expected = SCORE_TREE_REINFORCE if tree else _PLAIN_REINFORCE
            assert {name: getattr(config, name) for name in expected} == expected, (suite, row.name)
            assert config.episodes_per_update == (64 if tree else 32)
            seen.add(suite)
    assert seen == {"quick", "full", "rl"}


def test_evaluations_list_episode_returns_by_seed_and_the_gain_pairs_them(countdown_env_cls):
    """Episodes end out of seed order; ``episode_returns`` lists them by seed, so two evaluations
    on the same seeds compare episode by episode, and the RL gain's error is the paired one."""
    import contextlib
    from types import SimpleNamespace

    from textgym.benchmark import gain_summary, rl_gain
    from textgym.outcomes import mean_and_stderr
    from textgym.trainers.engine.evaluation import evaluate_greedy

    class Always:
        evaluating = staticmethod(contextlib.nullcontext)

        def __init__(self, answer):
            self.answer = answer

        def act(self, texts, systems, valid, greedy=False):
            return [SimpleNamespace(text=self.answer) for _ in texts]

    ended = []
    good = evaluate_greedy(Always("GOOD"), [countdown_env_cls(max_length=4) for _ in range(2)], episodes=6,
                           seed=2, on_episodes=lambda episodes: ended.extend(ep.seed for ep in episodes))
    assert ended != sorted(ended)  # seed 4 (1 step) ends before seed 3 (4 steps)
    assert good["episode_returns"] == [1.0 + s % 4 for s in range(2, 8)]  # GOOD at every step: the length
    bad = evaluate_greedy(Always("BAD"), [countdown_env_cls(max_length=4) for _ in range(2)], episodes=6, seed=2)
    assert bad["episode_returns"] == [0.0] * 6
    gain = rl_gain(good, bad)
    assert gain["paired"] and gain["return"] == pytest.approx(good["return_mean"])
    assert gain["return_stderr"] == pytest.approx(mean_and_stderr(good["episode_returns"])[1])
    # other seeds are other episodes: the independent-means bound
    elsewhere = evaluate_greedy(Always("BAD"), [countdown_env_cls(max_length=4)], episodes=6, seed=3)
    assert rl_gain(good, elsewhere)["paired"] is False
    assert gain_summary([gain, gain])["paired"] is True


def test_state_baseline_compares_actions_within_a_state_only():
    """``baseline="state"``: a state that wins whatever is done gets no credit for its action; in a
    state seen twice the better action gets the positive advantage; a lone state keeps ReBN's."""
    from textgym.trainers.engine.losses import normalize

    returns = torch.tensor([1.0, 1.0, -1.0, 0.0, 0.5])
    keys = ["win", "win", "s", "s", "alone"]
    normalized = normalize(returns)
    out = same_state_advantages(keys, normalized, fallback=normalized)
    assert out[0] == 0 and out[1] == 0                       # the winning state: no credit either way
    assert out[3] > 0 > out[2] and torch.isclose(out[2], -out[3])
    assert torch.isclose(out[4], normalized[4])              # alone: the batch-normalised return
