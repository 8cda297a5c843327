"""textgym.distributed: single-process rules in this process; collectives in 2 real processes
(torch's elastic launcher through textgym.distributed.launch, gloo on CPU, tests/distributed_worker.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from textgym import distributed

WORKER = str(Path(__file__).with_name("distributed_worker.py"))


def run_workers(scenario: str, out: Path, processes: int = 2) -> tuple[int, list[dict]]:
    """Launch the worker scenario in ``processes`` processes; (exit code, each rank's report)."""
    code = distributed.launch([WORKER, scenario, str(out)], processes=processes)
    reports = [json.loads(f.read_text()) for f in sorted(out.glob("rank*.json"))]
    return code, reports


# --- one process ---------------------------------------------------------------------------------


def test_split_evenly_gives_the_first_ranks_the_remainder():
    assert [distributed.split_evenly(10, 3, r) for r in range(3)] == [4, 3, 3]
    assert sum(distributed.split_evenly(7, 4, r) for r in range(4)) == 7
    with pytest.raises(ValueError, match="rank 2 is not in a world of 2"):
        distributed.split_evenly(10, 2, 2)


def test_episode_shards_are_disjoint_whole_groups_covering_the_update():
    shards = [distributed.episode_shard(24, 3, r, group_size=4) for r in range(3)]
    assert shards == [range(8), range(8, 16), range(16, 24)]
    shards = [distributed.episode_shard(20, 3, r, group_size=4) for r in range(3)]  # 5 groups
    assert [len(s) for s in shards] == [8, 8, 4]
    assert sorted(i for s in shards for i in s) == list(range(20))  # seeds update_seed + 0..19
    assert all(len(s) % 4 == 0 for s in shards)
    # one process plays the whole update: the seeds of a single-process run
    assert distributed.episode_shard(16, 1, 0) == range(16)


def test_episode_shard_refuses_partial_groups_and_idle_ranks():
    with pytest.raises(ValueError, match="not a whole number of groups of 4"):
        distributed.episode_shard(10, 2, 0, group_size=4)
    with pytest.raises(ValueError, match="1 groups of 4 episodes per update cannot be shared by 2"):
        distributed.episode_shard(4, 2, 0, group_size=4)


@pytest.mark.parametrize(("env", "message"), [
    ({"ACCELERATE_USE_DEEPSPEED": "true"}, "DeepSpeed from the accelerate config is not supported"),
    ({"ACCELERATE_USE_FSDP": "true"}, "FSDP from the accelerate config is not supported"),
    ({"ACCELERATE_MIXED_PRECISION": "bf16"}, "mixed_precision=bf16 .* not supported"),
    ({"ACCELERATE_DYNAMO_BACKEND": "INDUCTOR"}, "dynamo_backend=inductor"),
    ({"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "4"}, "trainer's gradient_accumulation_steps"),
])
def test_unsupported_accelerate_settings_are_refused_in_one_line(env, message):
    with pytest.raises(distributed.UnsupportedLaunch, match=message) as error:
        distributed.check_launch_config(env)
    assert "\n" not in str(error.value)


def test_supported_accelerate_settings_pass():
    distributed.check_launch_config({"ACCELERATE_USE_DEEPSPEED": "false", "ACCELERATE_MIXED_PRECISION": "no",
                                     "ACCELERATE_DYNAMO_BACKEND": "NO", "ACCELERATE_USE_CPU": "true"})
    distributed.check_launch_config({})


def test_launcher_environments_are_detected():
    assert not distributed.is_launched({})
    assert not distributed.is_launched({"WORLD_SIZE": "1", "RANK": "0"})
    assert distributed.is_launched({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"})  # torchrun
    assert distributed.is_launched({"OMPI_COMM_WORLD_SIZE": "4"})  # mpirun


def test_single_process_context_communicates_nothing():
    import torch

    ctx = distributed.init()
    assert (ctx.rank, ctx.world_size, ctx.is_main, ctx.is_distributed) == (0, 1, True, False)
    assert distributed.init() is ctx
    layer = torch.nn.Linear(3, 2)
    layer(torch.ones(1, 3)).sum().backward()
    before = [p.grad.clone() for p in layer.parameters()]
    assert ctx.average_gradients(layer.parameters(), weight=5) == 5.0
    assert all(torch.equal(p.grad, b) for p, b in zip(layer.parameters(), before))
    assert ctx.gather([1, 2]) == [1, 2]
    assert ctx.weighted_mean({"loss": 2.0}, weight=3) == {"loss": 2.0}
    assert ctx.agree_to_stop(True) and not ctx.agree_to_stop(False)
    assert ctx.broadcast_object("run") == "run"


def test_checksum_sees_one_changed_bit():
    import torch

    params = [torch.zeros(3), torch.ones(2, 2)]
    before = distributed.checksum(params)
    assert distributed.checksum([p.clone() for p in params]) == before
    params[1][0, 1] = torch.nextafter(torch.tensor(1.0), torch.tensor(2.0))
    assert distributed.checksum(params) != before


def test_docstring_example_runs():
    import doctest

    result = doctest.testmod(distributed)
    assert result.attempted > 0 and result.failed == 0


def test_the_cli_can_check_the_launch_without_importing_torch():
    code = ("import sys; from textgym import distributed; distributed.check_launch_config(); "
            "distributed.is_launched(); "
            "print([m for m in ('torch', 'accelerate', 'transformers') if m in sys.modules])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_launch_refuses_to_nest(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(RuntimeError, match="inside a launched process"):
        distributed.launch([WORKER, "exit", "."], processes=2)


# --- two processes -----------------------------------------------------------------------------


def test_two_processes_start_and_run_the_collectives(tmp_path):
    environ = dict(os.environ)
    code, (rank0, rank1) = run_workers("collectives", tmp_path)
    assert code == 0
    assert dict(os.environ) == environ  # the launcher restored this process's environment
    # two distinct processes, ranks 0 and 1 of one world, sharing the cores
    assert (rank0["rank"], rank1["rank"]) == (0, 1)
    assert len({rank0["pid"], rank1["pid"], os.getpid()}) == 3
    assert rank0["world_size"] == rank1["world_size"] == 2
    assert rank0["local_world_size"] == 2 and (rank0["local_rank"], rank1["local_rank"]) == (0, 1)
    cores = len(os.sched_getaffinity(0))
    expected_threads = int(os.environ.get("OMP_NUM_THREADS") or max(1, cores // 2))
    assert rank0["threads"] == rank1["threads"] == expected_threads
    assert rank0["device"].split(":")[0] == rank1["device"].split(":")[0] == "cpu"
    # records: every rank gets all of them, in rank order (rank 0 had 1 episode, rank 1 had 2)
    assert rank0["gathered"] == rank1["gathered"]
    assert [r["return_"] for r in rank0["gathered"]] == [0.0, 10.0, 11.0]
    assert rank0["gathered"][2] == {"return_": 11.0, "length": 2, "invalid_count": 1, "outcome": "win"}
    # loss 1 (weight 1) and 2 (weight 2); kl only on rank 1
    for report in (rank0, rank1):
        assert report["weighted_mean"]["loss"] == pytest.approx(5 / 3)
        assert report["weighted_mean"]["kl"] == pytest.approx(0.5)
        assert report["broadcast"] == "run-0"
    # only rank 1 asked to stop, at step 3: both ranks stop there
    assert rank0["stop_decisions"] == rank1["stop_decisions"] == [False, False, False, True]


def test_averaged_gradients_equal_the_one_process_gradient_and_weights_stay_identical(tmp_path):
    code, (rank0, rank1) = run_workers("gradients", tmp_path)
    assert code == 0
    # different initial adapters, identical after the broadcast from rank 0
    assert rank0["checksum_initial"] != rank1["checksum_initial"]
    assert rank0["checksum_broadcast"] == rank1["checksum_broadcast"] == rank0["checksum_initial"]
    for step, (a, b) in enumerate(zip(rank0["steps"], rank1["steps"])):
        assert a["reference_max"] > 1e-3, step  # a real gradient
        for name, total in (("halves", 8), ("five_three", 8)):
            # each rank alone is far from the whole batch's gradient; the weighted average is it
            assert a[f"{name}_local_diff"] > 100 * 1e-6 and b[f"{name}_local_diff"] > 100 * 1e-6
            for bucket in (distributed.BUCKET_BYTES, 4096):
                assert a[f"{name}_bucket{bucket}_diff"] < 1e-6, (step, name, bucket)
                assert b[f"{name}_bucket{bucket}_diff"] < 1e-6, (step, name, bucket)
            assert a[f"{name}_total_weight"] == b[f"{name}_total_weight"] == total
        # different data on each rank, the same weights after the averaged step
        assert a["local_grad_checksum"] != b["local_grad_checksum"]
        assert a["checksum_after_step"] == b["checksum_after_step"]
    assert rank0["steps"][-1]["checksum_after_step"] != rank0["checksum_broadcast"]


def test_launch_returns_the_failing_rank_exit_code(tmp_path):
    code = distributed.launch([WORKER, "exit", str(tmp_path)], processes=2)
    # rank 1 exited 3; rank 0, still running, was then stopped by the launcher (SIGTERM): the
    # cause is rank 1's failure, not rank 0's stop
    assert code == 3


def test_exit_process_runs_the_exit_handlers_and_keeps_the_exit_code(tmp_path):
    code = distributed.launch([WORKER, "exit_process", str(tmp_path)], processes=2)
    assert code == 4  # rank 0 ended with 0, rank 1 with 4
    # each rank's exit handlers ran (the process group's teardown is one of them)
    assert [(tmp_path / f"exit_handler{r}").read_text() for r in range(2)] == ["0", "1"]


def test_exit_process_without_a_process_group_is_sys_exit():
    with pytest.raises(SystemExit) as stop:
        distributed.exit_process(3)
    assert stop.value.code == 3


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_launcher_reaches_every_process(tmp_path, signum):
    driver = ("import sys; from textgym import distributed; "
              f"sys.exit(distributed.launch([{WORKER!r}, 'signal', {str(tmp_path)!r}], processes=2))")
    launcher = subprocess.Popen([sys.executable, "-c", driver])
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"ready{r}").exists() for r in range(2)):
            assert launcher.poll() is None and time.monotonic() < deadline, "workers never got ready"
            time.sleep(0.1)
        launcher.send_signal(signum)
        code = launcher.wait(timeout=60)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["signals"] for r in reports] == [[signum.name], [signum.name]]  # each got it once, and saved
    assert code == 128 + signum


@pytest.fixture(scope="module")
def trainer_reports(tmp_path_factory):
    """The trainers in 2 processes (tests/distributed_worker.py's "trainers" scenario): each rank's report."""
    out = tmp_path_factory.mktemp("trainers")
    code, reports = run_workers("trainers", out)
    assert code == 0
    return out, reports


@pytest.mark.slow  # every trainer trains in 2 processes (the module's trainer_reports)
def test_the_trainers_compute_the_one_process_update_of_the_global_batch(trainer_reports):
    _, (rank0, rank1) = trainer_reports
    for algorithm in ("reinforce", "ppo", "grpo", "reinforce-state-credit", "grpo-state-credit"):
        a, b = rank0[algorithm], rank1[algorithm]
        assert a["start_equal"] and b["start_equal"]
        assert a["local_decisions"] != b["local_decisions"] or algorithm.startswith("grpo")  # uneven ranks
        # the same optimizer steps (the plan is over the global batch), each with the gradient
        # of the whole batch's minibatch, averaged and clipped
        assert a["steps"] == b["steps"] and a["steps"][0] == a["steps"][1] >= 3, algorithm
        assert max(a["grad_max"]) > 1e-3, algorithm  # a real gradient
        # Equal up to float32 rounding: each gradient entry is a sum of at most ~10^3 products
        # (tokens x hidden units), summed in another order here (per shard, then the weighted
        # average); with rounding u = 2^-24 per operation and cancellation of up to ~10x that is
        # at most ~10^4 u = 6e-4 of the largest entry, below 2^-10 (measured: 2e-5 for GRPO).
        bound = 2**-10 * max(a["grad_max"])
        assert max(a["grad_diffs"] + b["grad_diffs"]) < bound, (algorithm, a["grad_diffs"], b["grad_diffs"])
        # Identical weights on both ranks. They are not compared with the 1-process trainer's
        # weights by a tolerance: AdamW divides each gradient by sqrt(v), so on a weight whose
        # gradient is as small as the summation's rounding (two shards summed, then averaged,
        # instead of one sum) the rounding decides a step of up to lr, on any CPU (GRPO: 2.3% of
        # how far the weights moved). Instead each trainer's weights must be exactly what a
        # fresh AdamW of the same settings makes of its recorded gradients and learning rates;
        # with the gradients equal up to rounding (above), the updates are the same computation.
        assert a["weights_checksum"] == b["weights_checksum"], algorithm
        assert a["weights_moved"] > 1e-3, algorithm  # the update did move the weights
        assert a["replayed_equal"] == b["replayed_equal"] == [True, True], algorithm
        # the same metrics on both ranks, those of the 1-process update (over all episodes)
        dp, single = a["metrics"]
        assert dp == b["metrics"][0], algorithm
        assert dp.keys() == single.keys() and dp["episodes"] == 8, algorithm
        for key, value in single.items():
            assert dp[key] == pytest.approx(value, rel=1e-4, abs=1e-6), (algorithm, key)
        assert a["world_size_metric"] == 2
    # Laid out by state: the same minibatches and steps, identical ranks. Only the first step is
    # taken from the same weights in both trainers: from there AdamW turns a rounding-sized
    # gradient (a state's row summed in one process, per rank here) into a step of up to lr on
    # that weight (above), so later gradients are not compared by the rounding bound.
    for algorithm in ("ppo-by-state", "grpo-by-state"):
        a, b = rank0[algorithm], rank1[algorithm]
        assert a["steps"] == b["steps"] and a["steps"][0] == a["steps"][1] >= 3, algorithm
        assert a["grad_diffs"][0] < 2**-10 * max(a["grad_max"]), algorithm
        assert a["weights_checksum"] == b["weights_checksum"] and a["weights_moved"] > 1e-3, algorithm
        assert a["replayed_equal"] == b["replayed_equal"] == [True, True], algorithm
        dp, single = a["metrics"]
        assert dp == b["metrics"][0] and dp["optimizer_steps"] == single["optimizer_steps"], algorithm
    for algorithm in ("reinforce", "grpo"):   # the state credit changed the update it was part of
        assert rank0[f"{algorithm}-state-credit"]["metrics"][1]["loss"] != rank0[algorithm]["metrics"][1]["loss"]


@pytest.mark.slow
def test_training_in_two_processes_stops_together_and_writes_once(trainer_reports):
    tmp_path, reports = trainer_reports
    rank0, rank1 = (report["train_loop"] for report in reports)
    # rank 1 alone asked to stop after update 2: both stopped there
    assert rank0["updates"] == rank1["updates"] == [1, 2]
    assert rank0["episodes_seen"] == rank1["episodes_seen"] == 12
    # each update's 6 episodes split 3 + 3, with the seeds one process would give them
    for update, base in enumerate(rank0["update_seeds"]):
        assert rank0["seeds"][update] == [base, base + 1, base + 2]
        assert rank1["seeds"][update] == [base + 3, base + 4, base + 5]
    assert rank0["checksum"] == rank1["checksum"]
    # the main process wrote one metrics line per update (over both ranks' episodes) and the checkpoint
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["update"] for m in lines] == [1, 2] and [m["episodes"] for m in lines] == [6, 12]
    assert all(m["world_size"] == 2 for m in lines)
    state = json.loads((tmp_path / "run" / "checkpoint" / "trainer_state.json").read_text())
    assert state["update_count"] == 2 and state["episodes_seen"] == 12
    assert rank0["resumed_checksum"] == rank1["resumed_checksum"] == rank0["checksum"]
    assert rank0["resumed_update_count"] == rank1["resumed_update_count"] == 2
    # the time cap came inside rank 1's rollout only: both dropped that update
    assert rank0["cut"] == rank1["cut"] == {"updates": 0, "stopped_by": "time_limit", "update_count": 2}
