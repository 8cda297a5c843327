"""One process of the multi-process tests in test_distributed.py (started by textgym.distributed.launch).

Usage: ``python tests/distributed_worker.py SCENARIO OUT_DIR``. Each rank writes what it saw to
``OUT_DIR/rank<r>.json``; the test compares the ranks' reports.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass
class EpisodeSummary:
    """The per-episode record a trainer gathers for its metrics."""

    return_: float
    length: int
    invalid_count: int
    outcome: str | None


def collectives(ctx, report: dict) -> None:
    import torch

    report.update(pid=os.getpid(), local_rank=ctx.local_rank, world_size=ctx.world_size,
                  local_world_size=ctx.local_world_size, device=str(ctx.device),
                  threads=torch.get_num_threads(), omp_num_threads=os.environ.get("OMP_NUM_THREADS"))
    # uneven record counts: rank r has r + 1 episodes
    mine = [EpisodeSummary(10.0 * ctx.rank + i, i + 1, ctx.rank, "win" if i % 2 else None)
            for i in range(ctx.rank + 1)]
    report["gathered"] = [asdict(s) for s in ctx.gather(mine)]
    stats = {"loss": 1.0 + ctx.rank, **({"kl": 0.5} if ctx.rank == 1 else {})}
    report["weighted_mean"] = ctx.weighted_mean(stats, weight=ctx.rank + 1)
    report["broadcast"] = ctx.broadcast_object(f"run-{ctx.rank}")
    # only rank 1 asks to stop, at step 3
    decisions = []
    for step in range(6):
        stop = ctx.agree_to_stop(ctx.rank == 1 and step == 3)
        decisions.append(stop)
        if stop:
            break
    report["stop_decisions"] = decisions
    ctx.barrier()


def gradients(ctx, report: dict) -> None:
    import torch

    from textgym import distributed
    from textgym.lora import add_lora
    from textgym.policy import Policy

    policy = Policy.from_pretrained("tiny", seed=0)
    torch.manual_seed(100 + ctx.rank)  # a different LoRA initialisation on each rank
    policy.model = add_lora(policy.model, model_name="tiny")
    params = [p for p in policy.model.parameters() if p.requires_grad]
    report["checksum_initial"] = distributed.checksum(params)
    ctx.broadcast_parameters(params)
    report["checksum_broadcast"] = distributed.checksum(params)

    # A fixed global batch of 8 score-mode decisions, the same on every rank (same weights, seed).
    observations = [f"Room {i}: the door is {'open' if i % 2 else 'shut'}." for i in range(8)]
    actions = [["go north", "go south", "open the door"]] * 8
    decisions = policy.act(observations, ["You are in a house."] * 8, actions)
    advantages = torch.linspace(-1.0, 1.0, 8)

    def backward(indices: list[int]) -> None:
        for p in params:
            p.grad = None
        evaluation = policy.evaluate([decisions[i] for i in indices])
        loss = -(advantages[indices] * evaluation.logprobs[:, 0]).mean()  # REINFORCE
        loss.backward()

    def flat_grads() -> torch.Tensor:
        return torch.cat([p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel())
                          for p in params])

    # several steps, so the LoRA A matrices get gradients too (B starts at zero)
    optimizer = torch.optim.AdamW(params, lr=1e-2)
    report["steps"] = []
    for step in range(3):
        backward(list(range(8)))  # the 1-process gradient of the whole batch
        reference = flat_grads().clone()
        result = {"reference_max": float(reference.abs().max())}
        for name, split in (("halves", [range(4), range(4, 8)]), ("five_three", [range(5), range(5, 8)])):
            mine = list(split[ctx.rank])
            for bucket_bytes in (distributed.BUCKET_BYTES, 4096):  # one bucket; many buckets
                backward(mine)
                if bucket_bytes == distributed.BUCKET_BYTES:
                    result[f"{name}_local_diff"] = float((flat_grads() - reference).abs().max())
                total = ctx.average_gradients(params, weight=len(mine), bucket_bytes=bucket_bytes)
                result[f"{name}_bucket{bucket_bytes}_diff"] = float((flat_grads() - reference).abs().max())
                result[f"{name}_total_weight"] = total
        # the step: each rank on its own, different decisions, then the averaged gradient
        own = list(range(4)) if ctx.rank == 0 else list(range(4, 8))
        backward(own)
        result["local_grad_checksum"] = distributed.checksum([flat_grads()])
        ctx.average_gradients(params, weight=len(own))
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        result["checksum_after_step"] = distributed.checksum(params)
        report["steps"].append(result)
        policy.clear_cache()


def trainers(ctx, report: dict) -> None:
    """Each algorithm's own update path on a fixed global batch: this rank's shard in the
    2-process trainer, the whole batch in a 1-process trainer beside it (same start weights, same
    minibatch permutation). Every optimizer step's gradient (after the average and the clipping)
    and the weights after the update are reported."""
    import copy

    import torch

    import textgym
    from textgym import distributed
    from textgym.distributed import ProcessContext
    from textgym.rollout import collect
    from textgym.trainers import make_trainer

    base, tokenizer = textgym.models.load("tiny")

    def make(algorithm, config, process):
        """A trainer from the same start weights, recording what each optimizer step received:
        every group's gradients (after the average and the clipping) and learning rate."""
        policy = textgym.Policy(copy.deepcopy(base), tokenizer, mode="score", seed=0)
        trainer = make_trainer(algorithm, policy, env=None, config=config, process=process)
        steps: list = []
        trainer.optimizer.register_step_pre_hook(lambda optimizer, args, kwargs: steps.append([
            ([None if p.grad is None else p.grad.detach().clone() for p in g["params"]], g["lr"])
            for g in optimizer.param_groups]))
        return trainer, steps

    def flat(tensors):
        return torch.cat([t.detach().reshape(-1) for t in tensors])

    def step_grads(steps):
        return [flat(g if g is not None else torch.zeros(p.numel())
                     for (grads, _), group in zip(step, start.optimizer.param_groups)
                     for g, p in zip(grads, group["params"])) for step in steps]

    def replay(steps):
        """The trainer's start weights stepped by a fresh AdamW of the same settings on the
        recorded gradients and learning rates: what the update must have produced."""
        groups = [{**{k: v for k, v in g.items() if k != "params"},
                   "params": [torch.nn.Parameter(p.detach().clone()) for p in g["params"]]}
                  for g in start.optimizer.param_groups]
        optimizer = torch.optim.AdamW(groups)
        for step in steps:
            for (grads, lr), group in zip(step, optimizer.param_groups):
                group["lr"] = lr
                for p, g in zip(group["params"], grads):
                    p.grad = g
            optimizer.step()
        return flat(p for g in optimizer.param_groups for p in g["params"])

    # Minibatches shuffled one by one: every step is one process's computation up to the order of
    # its sums. Laid out by state (the default), a state met on both ranks is one row in one process
    # and a row on each rank here: the same minibatches, other roundings ("-by-state" variants).
    common = {"num_envs": 4, "episodes_per_update": 8, "minibatch_size": 6, "epochs": 2, "seed": 3,
              "lr": 1e-2, "max_grad_norm": 0.5, "minibatch_by_state": False}
    # state credit: batch-wide states for REINFORCE (gathered from every rank), states within
    # each group for GRPO (a group stays in one process)
    variants = (("reinforce", "reinforce", {}), ("ppo", "ppo", {}), ("grpo", "grpo", {"group_size": 2}),
                ("reinforce-state-credit", "reinforce", {"state_credit": 1.0}),
                ("grpo-state-credit", "grpo", {"group_size": 2, "state_credit": 1.0}),
                ("ppo-by-state", "ppo", {"minibatch_by_state": True}),
                ("grpo-by-state", "grpo", {"group_size": 2, "minibatch_by_state": True}))
    for name, algorithm, extra in variants:
        group = extra.get("group_size", 1)
        # The global batch: every rank plays the same 8 Blackjack episodes (1 to 3 decisions each)
        # with the same untrained policy; GRPO's come in groups of 2 from one seed.
        player = textgym.Policy(copy.deepcopy(base), tokenizer, mode="score", seed=0)
        venv = textgym.make_vec("textgym/Blackjack-v1", num_envs=group)
        episodes = []
        for g in range(8 // group):
            episodes += collect(player, venv, schedule=[[100 + g]] * group).episodes if group > 1 else \
                collect(player, venv, episodes=1, seed=100 + g).episodes
        shard = distributed.episode_shard(8, ctx.world_size, ctx.rank, group)

        config = {**common, **extra}
        data_parallel, dp_steps = make(algorithm, config, ctx)
        single, single_steps = make(algorithm, config, ProcessContext())
        start, _ = make(algorithm, config, ProcessContext())  # never updated
        params = data_parallel.optimized_parameters()
        start_equal = distributed.checksum(params) == distributed.checksum(single.optimized_parameters())
        torch.manual_seed(11)  # the minibatch permutation (rank 0's, in the data-parallel trainer)
        dp_metrics = data_parallel.update(episodes[shard.start:shard.stop])
        torch.manual_seed(11)
        single_metrics = single.update(episodes)
        weights = flat(params)
        single_weights = flat(single.optimized_parameters())
        dp_grads, single_grads = step_grads(dp_steps), step_grads(single_steps)
        keys = ("loss", "policy_loss", "value_loss", "kl", "entropy", "advantage_std", "return_mean",
                "episodes", "decisions", "optimizer_steps", "epochs", "groups_with_signal", "explained_variance")
        report[name] = {
            "start_equal": start_equal,
            "local_decisions": sum(len(ep.steps) for ep in episodes[shard.start:shard.stop]),
            "steps": [len(dp_grads), len(single_grads)],
            "grad_diffs": [float((a - b).abs().max()) for a, b in zip(dp_grads, single_grads)],
            "grad_max": [float(b.abs().max()) for b in single_grads],
            "weights_checksum": distributed.checksum(params),
            "replayed_equal": [torch.equal(weights, replay(dp_steps)),
                               torch.equal(single_weights, replay(single_steps))],
            "weights_diff": float((weights - single_weights).abs().max()),
            "weights_moved": float((single_weights - flat(start.optimized_parameters())).abs().max()),
            "metrics": [{k: m[k] for k in keys if k in m} for m in (dp_metrics, single_metrics)],
            "world_size_metric": dp_metrics.get("world_size"),
        }


def train_loop(ctx, report: dict, out: Path) -> None:
    """Trainer.train in 2 processes: the episodes each rank plays, a stop only rank 1 asks for,
    the metrics and checkpoint files (written by rank 0), a resume of that checkpoint, and a
    rollout cut by the time cap on rank 1 only."""
    import textgym
    from textgym import distributed
    from textgym.trainers import make_trainer

    config = {"num_envs": 4, "episodes_per_update": 6, "minibatch_size": 8, "seed": 5, "lr": 1e-2,
              "checkpoint_every": 1}
    policy = textgym.Policy.from_pretrained("tiny", mode="score", seed=0)
    trainer = make_trainer("reinforce", policy, env="textgym/Bandit-v0", config=config,
                           out_dir=out / "run")
    seeds: list = []
    collect = trainer.collect

    def collect_and_record(stop=None):
        rollout = collect(stop=stop)
        seeds.append(sorted(ep.seed for ep in rollout.episodes))
        return rollout

    trainer.collect = collect_and_record
    # only rank 1 asks to stop, after the second update
    history = trainer.train(updates=10, callback=lambda m: not (ctx.rank == 1 and m["update"] == 2))
    report["updates"] = [m["update"] for m in history]
    report["seeds"] = seeds
    report["update_seeds"] = [trainer.rollout_seed(u) for u in range(2)]
    report["episodes_seen"] = trainer.episodes_seen
    report["checksum"] = distributed.checksum(trainer.optimized_parameters())
    ctx.barrier()  # rank 0 has written everything
    resumed = textgym.trainers.Trainer.resume(out / "run" / "checkpoint", process=ctx)
    report["resumed_checksum"] = distributed.checksum(resumed.optimized_parameters())
    report["resumed_update_count"] = resumed.update_count
    # a time cap only rank 1 reaches, inside its rollout: both ranks drop the update
    resumed_collect = resumed.collect
    resumed.collect = lambda stop=None: resumed_collect(stop=(lambda: True) if ctx.rank == 1 else stop)
    history = resumed.train(updates=1, seconds=3600)
    report["cut"] = {"updates": len(history), "stopped_by": resumed.stopped_by,
                     "update_count": resumed.update_count}


def wait_for_signal(rank: int, report: dict, out: Path) -> None:
    """Stand in for a trainer: on SIGINT/SIGTERM finish the update (a short sleep), save, exit 0."""
    received: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    (out / f"ready{rank}").touch()
    deadline = time.monotonic() + 60
    while not received and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # finishing the update
    report["signals"] = [signal.Signals(s).name for s in received]


def main() -> None:
    scenario, out = sys.argv[1], Path(sys.argv[2])
    if scenario == "exit":  # rank 1 exits with 3 before any set-up; rank 0 runs until stopped
        if os.environ["RANK"] == "0":
            time.sleep(120)
        sys.exit(3 * int(os.environ["RANK"]))
    if scenario == "signal":  # no process group needed (and no torch import: a quicker test)
        report = {"rank": int(os.environ["RANK"])}
        wait_for_signal(report["rank"], report, out)
        (out / f"rank{report['rank']}.json").write_text(json.dumps(report))
        return
    from textgym import distributed

    ctx = distributed.init()
    if scenario == "exit_process":  # after a collective, rank r ends with exit_process(4 * r)
        import atexit

        atexit.register(lambda: (out / f"exit_handler{ctx.rank}").write_text(str(ctx.rank)))
        ctx.agree_to_stop(False)
        distributed.exit_process(4 * ctx.rank)
    report: dict = {"rank": ctx.rank}
    if scenario == "collectives":
        collectives(ctx, report)
    elif scenario == "gradients":
        gradients(ctx, report)
    elif scenario == "trainers":  # one launch for both (a launch costs seconds)
        trainers(ctx, report)
        report["train_loop"] = {}
        train_loop(ctx, report["train_loop"], out)
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    (out / f"rank{ctx.rank}.json").write_text(json.dumps(report))
    distributed.exit_process(0)


if __name__ == "__main__":
    main()
