"""Decisions per second of an LLM policy on textgym/CartPole-v1, against a LlamaGym-style baseline.

Measured in one process, one after the other:

1. textgym ``score`` mode, 16 envs: one batched call per vector step, shared-prefix KV reused.
2. textgym ``score`` mode in conversation mode (``history="full"``), 16 envs: every prompt holds
   the whole episode so far (the same information as LlamaGym's prompts); each env's KV cache is
   kept across its turns, so a decision runs only its new tokens.
3. textgym ``generate`` mode, 16 envs, 8 new tokens (sampled; the ``word`` answer format, no stop
   string: most answers run to the limit).
4. textgym ``generate`` mode with the env's registered generate-mode defaults
   (``training_defaults(env, "generate")``: the JSON answer format prefilled with
   ``{"action": "``, stopped at the closing quote, its temperature): what
   ``textgym train cartpole --mode generate`` acts with.
5. the baseline, written the way LlamaGym acts: one env, one Hugging Face ``generate`` call per step
   on the whole conversation so far (every earlier turn re-sent), 32 new tokens, sampled.
6. conversation mode as episodes grow: 16 MountainCar envs (an untrained model plays all 200
   turns of every episode) in lockstep; tokens run per decision at each turn (the policy's
   counters), so turns 1, 50 and 200 can be compared.
7. re-scoring for an update (forward + backward through a LoRA adapter on the top 8 layers, as
   CartPole's training defaults; minibatches of 32): the single-observation decisions, the
   conversation decisions with a pass per conversation run (the trainers' path) and the same
   decisions one context each.
8. a plain torch matmul, for the FLOP/s the hardware gives (achieved model FLOP/s are
   ``2 x parameters x tokens run through the model / second``).

Peak memory is the process's resident set size (RSS, from /proc/self/statm sampled every 5 ms)
during each phase: it includes the model weights and Python, not only tensors.

Usage:
    python bench/throughput.py --json bench/results/throughput.json   # the full measurement
    python bench/throughput.py --decisions 32 --gen-decisions 16 --baseline-decisions 4 --turns 60 \
        --turn-envs 4 --rescore-decisions 64                                  # quick check
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch

import textgym
from textgym import models
from textgym.lora import LoraSettings, add_lora
from textgym.policy import Policy, PolicyConfig
from textgym.policy.conversation import Conversation
from textgym.policy.kv_cache import shared_prefix_length
from textgym.policy.rescoring import rescore_candidates
from textgym.registry import training_defaults
from textgym.rollout import Episode, collect, conversation_runs, decisions_of
from textgym.trainers.engine.optimization import minibatches

ENV_ID = "textgym/CartPole-v1"
TURNS_ENV_ID = "textgym/MountainCar-v0"  # 200-turn episodes: an untrained model never reaches the flag


class PeakRSS:
    """Highest resident set size of this process while the block runs (sampled in a thread)."""

    def __init__(self, interval: float = 0.005):
        self.interval = interval
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.peak = 0
        self._stop = threading.Event()

    def _rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._rss())
            time.sleep(self.interval)

    def __enter__(self):  # returns self
        self.peak = self._rss()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())


def matmul_flops(size: int = 1536, repeats: int = 5, seconds: float = 2.0) -> float:
    """Best FLOP/s of an fp32 ``size x size`` matmul (what the CPU delivers to dense linear algebra)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b  # warm-up
    best = 0.0
    for _ in range(repeats):
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / repeats:
            a @ b
            n += 1
        best = max(best, 2 * size ** 3 * n / (time.perf_counter() - start))
    return best


def textgym_phase(model, tokenizer, model_name: str, mode: str, envs: int, decisions: int, new_tokens: int | None,
                  params: int, seed: int, history: str | None = None, label: str | None = None,
                  env_kwargs: dict | None = None, settings: dict | None = None) -> tuple[dict, list[Episode]]:
    settings = {**(settings or {}), **({"max_new_tokens": new_tokens} if new_tokens else {})}
    config = PolicyConfig.for_model(model_name, mode=mode, seed=seed, history=history, **settings)
    policy = Policy(model, tokenizer, config=config, name=model_name)
    venv = textgym.make_vec(ENV_ID, num_envs=envs, seed=seed, **(env_kwargs or {}))
    collect(policy, venv, steps=envs, seed=seed + 1000)  # warm-up: fills the prefix cache, allocators
    with PeakRSS() as memory:
        rollout = collect(policy, venv, steps=decisions, seed=seed)
    s = rollout.stats
    if label is None:
        label = f"textgym {mode} ({envs} envs" + (f", {new_tokens} new tokens" if mode == "generate" else "")
        label += f", conversation: history {history})" if history else ")"
    return {
        "mode": label,
        "decisions": s["decisions"], "seconds": s["seconds"],
        "decisions_per_s": s["decisions"] / s["seconds"],
        "tokens_per_decision": s["model_tokens"] / s["decisions"],
        "prompt_tokens_per_decision": s["prompt_tokens"] / s["decisions"],
        "prompt_length": s["prompt_tokens_total"] / s["decisions"],
        "answer_tokens_per_decision": s["answer_tokens"] / s["decisions"],
        "model_flops": 2 * params * s["model_tokens"] / s["seconds"],
        "peak_rss_bytes": memory.peak,
        "invalid_rate": sum(ep_step.parse is not None and not ep_step.parse["valid"]
                            for ep_step in rollout.steps + [st for ep in rollout.unfinished for st in ep.steps])
        / s["decisions"],
        "episode_length_mean": sum(ep.length for ep in rollout.episodes) / max(1, len(rollout.episodes)),
    }, rollout.episodes + rollout.unfinished


def turns_phase(model, tokenizer, model_name: str, envs: int, turns: int, seed: int, history: str) -> dict:
    """Conversation mode as episodes grow: ``envs`` MountainCar envs played in lockstep for
    ``turns`` turns, the tokens run per decision measured at every turn (the policy's counters)."""
    config = PolicyConfig.for_model(model_name, mode="score", seed=seed, history=history)
    policy = Policy(model, tokenizer, config=config, name=model_name)
    games = [textgym.make(TURNS_ENV_ID) for _ in range(envs)]
    conversations = [Conversation(policy.conversation_window) for _ in games]
    observations, infos = map(list, zip(*(g.reset(seed=seed + i) for i, g in enumerate(games))))
    systems = [info["system_prompt"] for info in infos]
    tokens, contexts, restarts = [], [], 0
    start = time.perf_counter()
    for _ in range(turns):
        before = policy.counters["prompt_tokens"]
        decisions = policy.act(observations, systems, [info["valid_actions"] for info in infos],
                               conversations=conversations)
        tokens.append((policy.counters["prompt_tokens"] - before) / envs)
        contexts.append(sum(len(d.prompt_ids) for d in decisions) / envs)
        for i, (game, decision) in enumerate(zip(games, decisions)):
            observations[i], _, terminated, truncated, infos[i] = game.step(decision.text)
            if terminated or truncated:  # (only after the last turn, unless a car reached the flag)
                observations[i], infos[i] = game.reset()
                conversations[i].restart()
                restarts += 1
    seconds = time.perf_counter() - start

    def at(values: list[float], turn: int) -> float:
        return values[min(turn, len(values)) - 1]

    def around(values: list[float], turn: int) -> float:  # mean of the 20 turns ending at `turn`
        chunk = values[max(0, min(turn, len(values)) - 20):min(turn, len(values))]
        return sum(chunk) / len(chunk)

    marks = sorted({t for t in (1, 50, 200) if t <= turns} | {turns})
    return {
        "mode": f"conversation as episodes grow ({envs} envs of {TURNS_ENV_ID}, score, history {history}, "
                f"max {policy.history_tokens} tokens)",
        "turns": turns, "decisions": turns * envs, "seconds": seconds, "decisions_per_s": turns * envs / seconds,
        "tokens_per_decision_at_turn": {t: at(tokens, t) for t in marks},
        "tokens_per_decision_20_turns_to": {t: around(tokens, t) for t in marks if t >= 20},
        "context_tokens_at_turn": {t: at(contexts, t) for t in marks},
        "tokens_per_decision_mean": sum(tokens[1:]) / max(1, len(tokens) - 1),
        "rebuilds": sum(c.rebuilds for c in conversations), "episode_restarts": restarts,
    }


def rescoring_phase(policy: Policy, episodes: list[Episode], decisions: int, minibatch_size: int,
                    one_context_each: bool = False) -> dict:
    """Seconds per decision of re-scoring for an update (forward and backward), minibatches as the
    trainers make them; ``one_context_each``: conversation decisions without the pass per run."""
    chosen = decisions_of(episodes)[:decisions]
    kept, count = [], 0
    for episode in episodes:  # whole episodes, so conversation runs stay whole
        if count >= len(chosen):
            break
        kept.append(episode)
        count += episode.length
    groups = None if one_context_each else conversation_runs(kept)
    batch_decisions = decisions_of(kept)
    c = policy.config
    tokens_before = policy.counters["model_tokens"]
    start = time.perf_counter()
    for indices in minibatches(len(batch_decisions), minibatch_size, groups):
        batch = [batch_decisions[i] for i in indices.tolist()]
        if one_context_each:
            ev = rescore_candidates(policy.model, batch, shared_prefix_length([d.prompt_ids for d in batch]),
                                    temperature=c.temperature, normalization=c.normalization,
                                    tokenizer=policy.tokenizer, pad_id=policy.pad_id, device=policy.device,
                                    chunk_bytes=c.score_chunk_bytes, counters=policy.counters)
        else:
            ev = policy.evaluate(batch)
        ev.logprobs[ev.mask].sum().backward()
        policy.model.zero_grad(set_to_none=True)
    seconds = time.perf_counter() - start
    return {"decisions": len(batch_decisions), "seconds": seconds,
            "seconds_per_decision": seconds / len(batch_decisions),
            "tokens_per_decision": (policy.counters["model_tokens"] - tokens_before) / len(batch_decisions),
            "prompt_length": sum(len(d.prompt_ids) for d in batch_decisions) / len(batch_decisions)}


def baseline_phase(model, tokenizer, decisions: int, new_tokens: int, params: int, seed: int) -> dict:
    """LlamaGym's way: the whole conversation re-sent to ``model.generate`` at every step."""
    env = textgym.make(ENV_ID)
    torch.manual_seed(seed)
    obs, info = env.reset(seed=seed)
    messages = [{"role": "system", "content": info["system_prompt"]}, {"role": "user", "content": obs}]
    tokens = prompt_tokens = invalid = 0
    with PeakRSS() as memory:
        start = time.perf_counter()
        for _ in range(decisions):
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            input_ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
            with torch.no_grad():
                out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                                     max_new_tokens=new_tokens, do_sample=True, temperature=1.0, top_p=1.0,
                                     pad_token_id=tokenizer.pad_token_id)
            answer_ids = out[0, input_ids.shape[1]:]
            answer = tokenizer.decode(answer_ids, skip_special_tokens=True)
            # generate() runs the prompt once and every new token but the last through the model
            tokens += input_ids.shape[1] + len(answer_ids) - 1
            prompt_tokens += input_ids.shape[1]
            obs, _reward, terminated, truncated, info = env.step(answer)
            invalid += not info["parse"]["valid"]
            messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": obs}]
            if terminated or truncated:
                obs, info = env.reset()
                messages = [{"role": "system", "content": info["system_prompt"]},
                            {"role": "user", "content": obs}]
        seconds = time.perf_counter() - start
    return {
        "mode": f"baseline: LlamaGym-style (1 env, full conversation, {new_tokens} new tokens)",
        "decisions": decisions, "seconds": seconds, "decisions_per_s": decisions / seconds,
        "tokens_per_decision": tokens / decisions, "prompt_tokens_per_decision": prompt_tokens / decisions,
        "prompt_length": prompt_tokens / decisions,
        "model_flops": 2 * params * tokens / seconds, "peak_rss_bytes": memory.peak,
        "invalid_rate": invalid / decisions,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="model name, hub id or folder")
    parser.add_argument("--envs", type=int, default=16, help="sub-envs in the textgym runs")
    parser.add_argument("--decisions", type=int, default=512, help="decisions measured in score mode")
    parser.add_argument("--gen-decisions", type=int, default=128, help="decisions measured in generate mode")
    parser.add_argument("--gen-tokens", type=int, default=8, help="new tokens per decision in generate mode")
    parser.add_argument("--baseline-decisions", type=int, default=32, help="decisions of the baseline")
    parser.add_argument("--baseline-tokens", type=int, default=32, help="new tokens per baseline decision")
    parser.add_argument("--history", default="full", help="conversation mode's history setting ('full' or N)")
    parser.add_argument("--turns", type=int, default=200, help="turns of the episode-growth measurement")
    parser.add_argument("--turn-envs", type=int, default=16, help="envs of the episode-growth measurement")
    parser.add_argument("--rescore-decisions", type=int, default=512, help="decisions re-scored per variant")
    parser.add_argument("--rescore-minibatch", type=int, default=32, help="decisions per re-scored minibatch")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--sdpa-gqa", action="store_true",
                        help="set TRANSFORMERS_SDPA_FORCE_GQA=1: CPU attention reads the grouped KV heads "
                             "instead of copying them per query head (the copy grows with the context)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None,
                        help="also write the figures to this file (the recorded run: "
                             "bench/results/throughput.json)")
    args = parser.parse_args(argv)
    if args.sdpa_gqa:
        os.environ["TRANSFORMERS_SDPA_FORCE_GQA"] = "1"
    if args.threads:
        torch.set_num_threads(args.threads)

    model, tokenizer = models.load(args.model)
    params = models.num_parameters(model)
    history = int(args.history) if args.history.isdigit() else args.history
    print(f"model {args.model}: {params / 1e6:.1f}M parameters, {next(model.parameters()).dtype}, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}", flush=True)
    print("running score ...", flush=True)
    score, score_episodes = textgym_phase(model, tokenizer, args.model, "score", args.envs, args.decisions, 1,
                                          params, args.seed)
    print("running score in conversation mode ...", flush=True)
    conversation, conversation_episodes = textgym_phase(model, tokenizer, args.model, "score", args.envs,
                                                        args.decisions, 1, params, args.seed, history=history)
    print("running generate ...", flush=True)
    generate, _ = textgym_phase(model, tokenizer, args.model, "generate", args.envs, args.gen_decisions,
                                args.gen_tokens, params, args.seed)
    print("running generate with the env's generate-mode defaults ...", flush=True)
    generate_defaults = training_defaults(ENV_ID, "generate")
    generate_env, _ = textgym_phase(
        model, tokenizer, args.model, "generate", args.envs, args.gen_decisions, None, params, args.seed,
        label=f"textgym generate ({args.envs} envs, env defaults: JSON prefill, stop, "
              f"{generate_defaults.policy.get('max_new_tokens')} max)",
        env_kwargs=dict(generate_defaults.env_kwargs), settings=dict(generate_defaults.policy))
    print("running baseline ...", flush=True)
    baseline = baseline_phase(model, tokenizer, args.baseline_decisions, args.baseline_tokens, params, args.seed)
    rows = [score, conversation, generate, generate_env, baseline]
    print(json.dumps({"runs": rows}), flush=True)  # kept even if a later phase fails
    print("running conversation as episodes grow ...", flush=True)
    turns = turns_phase(model, tokenizer, args.model, args.turn_envs, args.turns, args.seed, history)
    print(json.dumps({"turns": turns}), flush=True)
    print("running re-scoring ...", flush=True)
    # The last phase that runs the model: the adapter can be added to it in place.
    lora_model = add_lora(model, LoraSettings(layers=8), model_name=args.model)
    rescoring_policy = Policy(lora_model, tokenizer, config=PolicyConfig.for_model(args.model, mode="score"),
                              name=args.model)
    size = args.rescore_minibatch
    rescoring = {
        "single observation": rescoring_phase(rescoring_policy, score_episodes, args.rescore_decisions, size),
        "conversation, a pass per run": rescoring_phase(rescoring_policy, conversation_episodes,
                                                        args.rescore_decisions, size),
        "conversation, one context each": rescoring_phase(rescoring_policy, conversation_episodes,
                                                          args.rescore_decisions, size, one_context_each=True),
    }
    matmul = matmul_flops()

    print()
    print(f"{'run':<62} {'dec/s':>7} {'tok/dec':>8} {'prompt':>7} {'GFLOP/s':>8} {'peak RSS':>9} {'invalid':>7}")
    for r in rows:
        print(f"{r['mode']:<62} {r['decisions_per_s']:>7.2f} {r['tokens_per_decision']:>8.1f} "
              f"{r['prompt_length']:>7.1f} {r['model_flops'] / 1e9:>8.1f} "
              f"{r['peak_rss_bytes'] / 2**30:>7.2f}GB {r['invalid_rate']:>7.0%}")
    print(f"{'plain torch matmul (fp32 1536x1536)':<62} {'':>7} {'':>8} {'':>7} {matmul / 1e9:>8.1f}")
    ratios = {
        "score_vs_baseline_decisions_per_s": score["decisions_per_s"] / baseline["decisions_per_s"],
        "conversation_vs_score_decisions_per_s": conversation["decisions_per_s"] / score["decisions_per_s"],
        "conversation_vs_baseline_decisions_per_s": conversation["decisions_per_s"] / baseline["decisions_per_s"],
        "generate_vs_baseline_decisions_per_s": generate["decisions_per_s"] / baseline["decisions_per_s"],
        "generate_vs_score_decisions_per_s": generate["decisions_per_s"] / score["decisions_per_s"],
        "generate_env_defaults_vs_score_decisions_per_s": generate_env["decisions_per_s"] / score["decisions_per_s"],
        "score_model_flops_vs_matmul": score["model_flops"] / matmul,
        "generate_model_flops_vs_matmul": generate["model_flops"] / matmul,
        "baseline_model_flops_vs_matmul": baseline["model_flops"] / matmul,
    }
    print()
    print(f"score mode    : {ratios['score_vs_baseline_decisions_per_s']:.1f}x the baseline's decisions/s, "
          f"{ratios['score_model_flops_vs_matmul']:.0%} of matmul FLOP/s")
    print(f"conversation  : {ratios['conversation_vs_score_decisions_per_s']:.0%} of score mode's decisions/s, "
          f"{ratios['conversation_vs_baseline_decisions_per_s']:.1f}x the baseline's")
    print(f"generate mode : {ratios['generate_vs_baseline_decisions_per_s']:.1f}x the baseline's decisions/s, "
          f"{ratios['generate_model_flops_vs_matmul']:.0%} of matmul FLOP/s")
    print(f"generate mode : {ratios['generate_vs_score_decisions_per_s']:.0%} of score mode's decisions/s "
          f"({args.gen_tokens} new tokens); with the env's generate defaults "
          f"{ratios['generate_env_defaults_vs_score_decisions_per_s']:.0%}")
    print(f"baseline      : {ratios['baseline_model_flops_vs_matmul']:.0%} of matmul FLOP/s")
    print(f"peak RSS of the whole process (ru_maxrss): "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GB")
    print("tok/dec: tokens run through the model per decision (prompt after prefix-cache reuse + answer);"
          " prompt: full prompt length in tokens; FLOP/s = 2 x parameters x tok/dec x dec/s")
    print()
    print(turns["mode"] + f": {turns['decisions_per_s']:.2f} dec/s, {turns['rebuilds']} rebuilds")
    for t, value in turns["tokens_per_decision_at_turn"].items():
        mean20 = turns["tokens_per_decision_20_turns_to"].get(t)
        print(f"  turn {t:>4}: {value:7.1f} tokens run per decision"
              + (f" ({mean20:.1f} on average over turns {max(1, t - 19)}-{t})" if mean20 is not None else "")
              + f", context {turns['context_tokens_at_turn'][t]:.0f} tokens")
    print()
    print(f"re-scoring for an update (forward + backward, LoRA on the top 8 layers, minibatches of {size}):")
    for label, r in rescoring.items():
        print(f"  {label:<32} {r['seconds_per_decision'] * 1000:7.1f} ms/decision, "
              f"{r['tokens_per_decision']:7.1f} tokens/decision (prompt {r['prompt_length']:.0f})")
    result = {"model": args.model, "parameters": params, "threads": torch.get_num_threads(),
              "runs": rows, "turns": turns, "rescoring": rescoring, "matmul_flops": matmul, "ratios": ratios,
              "argv": sys.argv[1:]}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
