"""Hardening 2 (issue #34): what a fault sweep and a newcomer found, one test (or more) per item.

Most tests start from one finished tiny Bandit run (one update of 8 episodes, made once for the
module) copied into the test's folder, so each costs milliseconds unless it trains again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_cli_runs import FAST, finished_bandit_run, lines_of, one_error_line, snapshot


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished tiny Bandit run (1 update, 8 episodes): copy it before changing it."""
    return finished_bandit_run(tmp_path_factory.mktemp("finished"), FAST)


@pytest.fixture
def run(finished_run, tmp_path):
    """A private copy of :func:`finished_run`."""
    return Path(shutil.copytree(finished_run, tmp_path / "run"))


def write_fast(folder: Path, extra: str = "") -> Path:
    """The fast config (1 update of 8 one-step episodes of the tiny model) in ``folder``."""
    path = folder / "fast.toml"
    path.write_text(FAST + extra)
    return path


def edit_config(run: Path, old: str, new: str) -> None:
    path = run / "config.toml"
    text = path.read_text()
    assert old in text, text
    path.write_text(text.replace(old, new))


# --- 2. resume keeps what the checkpoint trained -------------------------------------------------

@pytest.mark.parametrize("old, new, named", [
    ('env = "textgym/Bandit-v0"', 'env = "textgym/CartPole-v1"', "env 'textgym/CartPole-v1'"),
    ('algo = "reinforce"', 'algo = "grpo"', "algo 'grpo'"),
    ('mode = "score"', 'mode = "generate"', "mode 'generate'"),
    ('temperature = 1.0', 'temperature = 0.3', "temperature=0.3"),
    ('seed = 0', 'seed = 5', "seed=5"),
    ('[trainer]\n', '[trainer]\nlora_layers = 1\n', "lora_layers=1"),
])
def test_resume_refuses_a_config_toml_edited_away_from_the_checkpoint(cli, run, old, new, named):
    edit_config(run, old, new)
    before = snapshot(run)
    line = one_error_line(cli("train", "--resume", run, "--episodes", 16))
    assert "cannot resume" in line and named in line and "checkpoint was trained with" in line, line
    assert snapshot(run) == before


def test_resume_records_what_a_session_changed(cli, run):
    result = cli("train", "--resume", run, "--episodes", 16)
    assert result.exit_code == 0, result.output
    assert "this session changes episodes 8 -> 16" in result.stdout
    assert [line["changed"] for line in lines_of(run / "resumes.jsonl")] == [{"episodes": [8, 16]}]
    assert lines_of(run / "resumes.jsonl")[0]["resumed_at_update"] == 1
    assert [m["update"] for m in lines_of(run / "metrics.jsonl")] == [1, 2]


def test_resume_continues_with_an_edited_algorithm_setting_and_records_it(cli, run):
    """A new ``lr`` and ``gamma`` in config.toml apply from the next update (the optimizer's
    learning rate too, though its state was saved with the old one) and are recorded."""
    from safetensors.torch import load_file

    edit_config(run, "lr = 0.0003", "lr = 0.002")
    edit_config(run, "gamma = 1.0", "gamma = 0.5")
    moments = load_file(run / "checkpoint" / "optimizer.safetensors")
    result = cli("train", "--resume", run, "--episodes", 16, "--act-dtype", "bfloat16")
    assert result.exit_code == 0, result.output
    assert ("this session changes episodes 8 -> 16, lr 0.0003 -> 0.002, gamma 1.0 -> 0.5, act_dtype "
            "'float32' -> 'bfloat16'") in result.stdout
    line, = lines_of(run / "resumes.jsonl")
    assert line["changed"] == {"episodes": [8, 16], "gamma": [1.0, 0.5], "lr": [0.0003, 0.002],
                               "act_dtype": ["float32", "bfloat16"]}
    assert json.loads((run / "checkpoint" / "policy.json").read_text())["act_dtype"] == "bfloat16"
    state = json.loads((run / "checkpoint" / "trainer_state.json").read_text())
    assert (state["config"]["lr"], state["config"]["gamma"], state["update_count"]) == (0.002, 0.5, 2)
    assert [m["lr"] for m in lines_of(run / "metrics.jsonl")] == [0.0003, 0.002]
    assert moments.keys() == load_file(run / "checkpoint" / "optimizer.safetensors").keys()
    # the next resume finds the checkpoint and config.toml agreeing: nothing more to record
    assert cli("train", "--resume", run, "--episodes", 24).exit_code == 0
    assert [line["changed"] for line in lines_of(run / "resumes.jsonl")][1:] == [{"episodes": [16, 24]}]


def test_resume_takes_algorithm_settings_from_a_config_file(cli, run, tmp_path):
    changes = tmp_path / "changes.toml"
    changes.write_text("[trainer]\nentropy_coef = 0.05\n")
    result = cli("train", "--resume", run, "--config", changes, "--episodes", 16)
    assert result.exit_code == 0, result.output
    assert [line["changed"] for line in lines_of(run / "resumes.jsonl")] == [
        {"episodes": [8, 16], "entropy_coef": [0.0, 0.05]}]
    assert "entropy_coef = 0.05" in (run / "config.toml").read_text()
    changes.write_text("[trainer]\nlora_r = 4\n")
    line = one_error_line(cli("train", "--resume", run, "--config", changes, "--episodes", 24))
    assert "lora_r=4" in line and "keeps its seeds and adapter shape" in line, line


def test_resume_may_change_the_step_limit_and_nothing_else_of_the_env(cli, tmp_path):
    """Longer episodes once a policy reaches the old limit: ``--max-episode-steps`` on resume
    applies to the envs the run plays from then on; another env setting is still refused."""
    run = tmp_path / "run"
    config = write_fast(tmp_path).read_text().replace("episodes = 8", "episodes = 4")
    (tmp_path / "short.toml").write_text(config.replace("episodes_per_update = 8", "episodes_per_update = 4"))
    result = cli("train", "cartpole", "--config", tmp_path / "short.toml", "--out", run, "--check-every", "0",
                 "--num-envs", 4, "--max-episode-steps", 2, "--quiet")
    assert result.exit_code == 0, result.output
    result = cli("train", "--resume", run, "--episodes", 8, "--max-episode-steps", 3)
    assert result.exit_code == 0, result.output
    assert "max_episode_steps 2 -> 3" in result.stdout
    assert [line["changed"] for line in lines_of(run / "resumes.jsonl")] == [
        {"episodes": [4, 8], "max_episode_steps": [2, 3]}]
    assert [m["length_mean"] for m in lines_of(run / "metrics.jsonl")] == [2.0, 2.5]  # window of 8
    state = json.loads((run / "checkpoint" / "trainer_state.json").read_text())
    assert state["env_kwargs"]["max_episode_steps"] == 3
    edit_config(run, "word = \"heading\"", "word = \"none\"")
    line = one_error_line(cli("train", "--resume", run, "--episodes", 12))
    assert "[env_kwargs] word='none'" in line and "keeps its env settings but max_episode_steps" in line, line


# --- 3. an env that raises mid-run -----------------------------------------------------------------

def test_an_env_that_raises_mid_run_keeps_the_completed_updates_and_names_env_and_seed(cli, tmp_path):
    config = tmp_path / "fast.toml"
    config.write_text(FAST.replace("episodes = 8", "episodes = 40") + "[env_kwargs]\nraise_at = 5\n")
    run = tmp_path / "run"
    # 8 sub-envs play one 2-step episode each per update: each raises at its 5th step, in update 3
    result = cli("train", "faultenvs:fault/Raise-v0", "--config", config, "--out", run, "--check-every", "0",
                 "--quiet")
    line = one_error_line(result)
    assert "env fault/Raise-v0 raised RuntimeError: the simulator crashed" in line, line
    assert "with seed 10020000, sub-env 0" in line and "at step 1 of the episode" in line, line   # update 3's first seed
    assert "updates 1-2 are saved" in line and f"textgym train --resume {run}" in line, line
    state = json.loads((run / "checkpoint" / "trainer_state.json").read_text())
    assert state["update_count"] == 2
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"].startswith("failed: EnvError") and summary["updates"] == 2
    assert summary["checkpoint"] == str(run / "checkpoint") and summary["checkpoint_update"] == 2


# --- 4. export never writes into a run folder ------------------------------------------------------

def test_export_refuses_to_write_into_another_run_folder(cli, finished_run, run, tmp_path):
    starting = tmp_path / "starting"           # a run before its first checkpoint: only its lock
    starting.mkdir()
    (starting / ".textgym.lock").write_text("")
    for out, where in ((run / "checkpoint", f"inside the run folder {run.resolve()}"),
                       (run / "exports" / "mine", f"inside the run folder {run.resolve()}"),
                       (run, f"is the run folder {run.resolve()}"),
                       (starting / "export", "inside the run folder")):
        before = snapshot(out.parent if out != run else run)
        line = one_error_line(cli("export", finished_run, "--out", out, "--force"))
        assert where in line and "export to a folder of its own" in line, line
        assert snapshot(out.parent if out != run else run) == before


# --- 5. a chat template that does not render the messages ----------------------------------------

@pytest.mark.parametrize("template, reason", [
    ("You are a helpful assistant. Answer LEFT.", "does not render the messages"),
    ("{% for m in messages %}{{ m['role'] }}: {% endfor %}", "does not render the messages"),
    ("{{ messages[5]['content'] }}", "fails to render a user message"),
])
def test_a_chat_template_that_does_not_render_the_messages_is_refused(cli, tmp_path, template, reason):
    from textgym.policy import PolicyConfig

    path = tmp_path / "template.jinja"
    path.write_text(template)
    line = one_error_line(cli("train", "bandit", "--model", "tiny", "--chat-template", path, "--out",
                              tmp_path / "run"))
    assert f"chat template {path}: the chat template {reason}" in line, line
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match=reason):   # a config.toml's [policy] table, the Python API
        PolicyConfig(chat_template=template)
    # a template that renders the messages, also one refusing the system role, is fine
    PolicyConfig(chat_template="{% for m in messages %}{% if m['role'] == 'system' %}"
                               "{{ raise_exception('no system role') }}{% endif %}{{ m['content'] }}{% endfor %}")


# --- 6. a failed save leaves no checkpoint.tmp; a stale one is removed --------------------------

def test_a_checkpoint_save_that_fails_leaves_no_temporary_and_names_the_file(tiny_policy, tmp_path, monkeypatch):
    import errno

    import torch

    from textgym.trainers.state import checkpoint as ckpt

    optimizer = torch.optim.AdamW([p for p in tiny_policy.model.parameters()][:1], lr=0.1)
    path = tmp_path / "checkpoint"
    ckpt.save_checkpoint(path, policy=tiny_policy, optimizers={"policy": optimizer}, state={"update_count": 1})

    def disk_full(tensors, filename, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt, "save_file", disk_full)
    with pytest.raises(OSError, match="No space left on device") as error:
        ckpt.save_checkpoint(path, policy=tiny_policy, optimizers={"policy": optimizer}, state={"update_count": 2})
    assert error.value.errno == errno.ENOSPC and str(path) in str(error.value)
    assert not (tmp_path / "checkpoint.tmp").exists()          # no half-written folder fills the disk
    assert ckpt.read_state(path)["update_count"] == 1           # the previous checkpoint stays


def test_resume_removes_a_stale_checkpoint_tmp(cli, run):
    (run / "checkpoint.tmp").mkdir()
    (run / "checkpoint.tmp" / "optimizer.safetensors").write_bytes(b"\0" * 1000)
    result = cli("train", "--resume", run, "--episodes", 16)
    assert result.exit_code == 0, result.output
    assert "removed checkpoint.tmp" in result.stdout
    assert not (run / "checkpoint.tmp").exists()
    assert json.loads((run / "checkpoint" / "trainer_state.json").read_text())["update_count"] == 2


# --- 7. never save non-finite weights ------------------------------------------------------------

def test_blown_up_weights_are_never_saved(tiny_policy, tmp_path):
    import torch

    from textgym.trainers.state import checkpoint as ckpt

    trainer_free = {"policy": torch.optim.AdamW([next(tiny_policy.model.parameters())], lr=0.1)}
    path = tmp_path / "checkpoint"
    ckpt.save_checkpoint(path, policy=tiny_policy, optimizers=trainer_free, state={"update_count": 1})
    layer = tiny_policy.model.model.layers[0].self_attn
    with torch.no_grad():   # finite, but its products overflow: what --lr 1e30 does to a LoRA B
        layer.q_proj.weight.fill_(1e30)
        layer.k_proj.weight.fill_(1e30)
    with pytest.raises(ckpt.NonFiniteWeightsError, match="outputs are NaN or inf"):
        ckpt.save_checkpoint(path, policy=tiny_policy, optimizers=trainer_free, state={"update_count": 2})
    with torch.no_grad():
        layer.q_proj.weight.fill_(float("nan"))
    with pytest.raises(ckpt.NonFiniteWeightsError, match="q_proj.weight holds NaN or inf"):
        ckpt.save_checkpoint(path, policy=tiny_policy, optimizers=trainer_free, state={"update_count": 2})
    assert ckpt.read_state(path)["update_count"] == 1 and not (tmp_path / "checkpoint.tmp").exists()


def test_a_run_whose_weights_blow_up_says_so_and_saves_no_poisoned_checkpoint(cli, tmp_path):
    config = tmp_path / "poison.toml"
    config.write_text(FAST.replace("episodes = 8", "episodes = 24\ncheckpoint_every = 1"))
    run = tmp_path / "run"
    line = one_error_line(cli("train", "bandit", "--config", config, "--out", run, "--lr", "1e30",
                              "--check-every", "0", "--quiet"))
    assert "training diverged at update 1 (is lr too high?)" in line and "no checkpoint was saved" in line, line
    assert not (run / "checkpoint").exists()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"].startswith("failed: NonFiniteWeightsError") and summary["checkpoint"] is None


# --- 8. an env that never ends ------------------------------------------------------------------

def test_an_endless_env_is_cut_at_the_default_cap_in_train_and_eval(cli, tmp_path, monkeypatch, caplog):
    from textgym import step_cap

    monkeypatch.setattr(step_cap, "DEFAULT_MAX_EPISODE_STEPS", 3)  # 1000 in real runs: the same code path
    run = tmp_path / "run"
    result = cli("train", "faultenvs:fault/Endless-v0", "--config", write_fast(tmp_path), "--out", run,
                 "--check-every", "0", "--quiet")
    assert result.exit_code == 0, result.output
    [metrics] = lines_of(run / "metrics.jsonl")
    assert metrics["cut_episodes"] == 8 and metrics["length_mean"] == 3
    assert "8 episode(s) of fault/Endless-v0 cut at 3 steps" in caplog.text
    result = cli("eval", "faultenvs:fault/Endless-v0", "--checkpoint", run, "--episodes", 4, "--json")
    assert result.exit_code == 0, result.output
    evaluation = json.loads(result.stdout)["results"]["checkpoint"]
    assert evaluation["cut_episodes"] == 4 and evaluation["length_mean"] == 3


def test_max_episode_steps_flag_is_the_envs_limit_and_is_saved(cli, tmp_path):
    run = tmp_path / "run"
    result = cli("train", "faultenvs:fault/Endless-v0", "--config", write_fast(tmp_path), "--out", run,
                 "--check-every", "0", "--max-episode-steps", 2, "--quiet")
    assert result.exit_code == 0, result.output
    assert "[env_kwargs]\nmax_episode_steps = 2" in (run / "config.toml").read_text()
    [metrics] = lines_of(run / "metrics.jsonl")
    assert metrics["length_mean"] == 2 and "cut_episodes" not in metrics   # the env's own limit ended them
    result = cli("eval", "faultenvs:fault/Endless-v0", "--checkpoint", run, "--episodes", 2,
                 "--max-episode-steps", 4, "--json")
    assert json.loads(result.stdout)["results"]["checkpoint"]["length_mean"] == 4


# --- misbehaving plugin envs (tests/faultenvs.py): each one fails clearly or is survived ----------

@pytest.fixture
def fault_envs():
    import faultenvs

    return faultenvs


def small_trainer(policy, env_id, **env_kwargs):
    from textgym.trainers import make_trainer

    config = {"num_envs": 2, "episodes_per_update": 2, "minibatch_size": 2, "checkpoint_every": 0}
    return make_trainer("reinforce", policy, env=env_id, config=config, env_kwargs=env_kwargs)


def test_an_env_whose_reset_returns_the_wrong_type_is_named(fault_envs, tiny_policy):
    from textgym.rollout import EnvError

    trainer = small_trainer(tiny_policy, "fault/WrongReset-v0")
    with pytest.raises(EnvError, match=r"env fault/WrongReset-v0 raised ValueError: .*\(at reset of the episode "
                                       r"with seed 10000000, sub-env 0\)"):
        trainer.train(updates=1)
    assert trainer.update_count == 0


@pytest.mark.parametrize("reward", ["nan", "inf"])
def test_non_finite_rewards_skip_the_update_and_leave_the_weights(fault_envs, tiny_policy, reward):
    import torch

    trainer = small_trainer(tiny_policy, "fault/NaN-v0", reward=reward)
    before = [p.detach().clone() for p in trainer.trainable_parameters()]
    [metrics] = trainer.train(updates=1)
    assert metrics["nonfinite"] is True and trainer.nonfinite_updates == 1
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.trainable_parameters()))


def test_a_huge_observation_is_cut_before_the_policy_reads_it(fault_envs, tiny_policy, caplog):
    from textgym.rollout import MAX_OBSERVATION_CHARS, collect

    venv = __import__("textgym").make_vec("fault/Huge-v0", num_envs=2, size=1_000_000)
    rollout = collect(tiny_policy, venv, episodes=2, seed=0)
    assert {len(step.observation) for step in rollout.steps} == {MAX_OBSERVATION_CHARS}
    assert "has 1000000 characters: cut to 8192" in caplog.text
    assert rollout.stats["prompt_tokens_total"] < 4 * 4 * MAX_OBSERVATION_CHARS  # not a 250k-token prompt


def test_slow_steps_are_timed_as_env_time_and_a_stop_ends_the_rollout(fault_envs, tiny_policy):
    from textgym.rollout import collect

    venv = __import__("textgym").make_vec("fault/Slow-v0", num_envs=2, delay=0.05)
    rollout = collect(tiny_policy, venv, episodes=2, seed=0)
    assert rollout.stats["env_seconds"] >= 4 * 0.05          # 2 envs x 2 steps, each sleeping 0.05 s
    asked = []
    rollout = collect(tiny_policy, venv, episodes=4, seed=0, stop=lambda: asked.append(1) or len(asked) > 1)
    assert rollout.stats["decisions"] == 2 and not rollout.episodes and len(rollout.unfinished) == 2


# --- 9. progress inside an update and during eval ------------------------------------------------

def test_train_and_eval_show_progress_inside_an_update(cli, tmp_path, monkeypatch):
    from textgym.cli import display

    monkeypatch.setattr(display, "PLAIN_REPORT_SECONDS", 0.0)  # off a terminal: a line at every report
    monkeypatch.setattr(display, "ETA_AFTER_SECONDS", 0.0)
    run = tmp_path / "run"
    result = cli("train", "bandit", "--config", write_fast(tmp_path), "--out", run, "--check-every", "1",
                 "--check-episodes", 4)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "update 1: playing episodes 0/8, 0 decisions" in out
    assert "update 1: optimising on 8 decisions" in out
    assert "update 1: greedy check, episodes 0/4" in out and "eta" in out
    assert out.index("playing") < out.index("optimising") < out.index("greedy check") < out.index("update 1/1")
    result = cli("eval", "bandit", "--checkpoint", run, "--episodes", 4, "--num-envs", 2)
    assert result.exit_code == 0, result.output
    assert "evaluating, episodes 2/4, 2 decisions, eta" in result.stderr


# --- 16. eval of several checkpoints; textgym runs -----------------------------------------------

def test_eval_of_two_checkpoints_evaluates_both(cli, finished_run, run, tmp_path):
    result = cli("eval", "bandit", "--checkpoint", finished_run, "--checkpoint", run, "--episodes", 2, "--json")
    assert result.exit_code == 0, result.output
    assert sorted(json.loads(result.stdout)["results"]) == sorted([str(finished_run), str(run)])
    line = one_error_line(cli("eval", "bandit", "--checkpoint", run, "--checkpoint", run / "checkpoint"))
    assert "the same checkpoint is given twice" in line


def test_runs_lists_the_run_folders(cli, finished_run, tmp_path):
    root = tmp_path / "runs"
    shutil.copytree(finished_run, root / "bandit-a")
    (root / "notes").mkdir()                        # not a run folder
    result = cli("runs", root, "--json")
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout)
    assert row["run"] == str(root / "bandit-a") and row["env"] == "textgym/Bandit-v0" and row["algo"] == "reinforce"
    assert row["status"] == "complete" and row["updates"] == 1 and row["episodes"] == 8
    assert row["checkpoint_update"] == 1
    table = cli("runs", root)
    assert "bandit-a" in table.stdout and "update 1" in table.stdout and "1 runs in" in table.stdout
    assert "is not a folder" in one_error_line(cli("runs", tmp_path / "nowhere"))


# --- 15. bounded alarm history ------------------------------------------------------------------

def test_the_bounded_alarm_history_raises_what_the_whole_one_raises():
    import random

    from textgym.trainers.reporting import alarms

    rng = random.Random(0)
    history, kept = [], []
    reference = alarms.Reference(solved=1.0)
    for update in range(1, 300):
        stats = alarms.UpdateStats(update=update, return_mean=rng.random() * 0.5,
                                   entropy=None if update < 5 else rng.random(), invalid_rate=rng.random() * 0.5,
                                   kl=rng.random() * 0.2, top_answer_share=rng.random(), answer_choices=2)
        history.append(stats)
        kept.append(stats)
        assert alarms.raised(kept, reference) == alarms.raised(history, reference), update
        kept = alarms.bounded(kept)
    assert len(kept) <= alarms.HISTORY_KEPT + 2


def test_a_long_run_keeps_a_bounded_alarm_history(tiny_policy, tmp_path):
    from textgym.trainers import make_trainer
    from textgym.trainers.reporting import alarms

    config = {"num_envs": 2, "episodes_per_update": 2, "minibatch_size": 2, "checkpoint_every": 0}
    trainer = make_trainer("reinforce", tiny_policy, env="textgym/Bandit-v0", config=config, out_dir=tmp_path)
    trainer.train(updates=alarms.HISTORY_KEPT + 8)
    assert len(trainer.alarm_history) <= alarms.HISTORY_KEPT + 2
    state = json.loads((trainer.save_checkpoint() / "trainer_state.json").read_text())
    assert len(state["alarm_history"]) <= alarms.HISTORY_KEPT + 2


# --- 12. the greedy checks in the saved results ----------------------------------------------------

def test_greedy_checks_are_in_tensorboard_the_plot_and_the_wall_time(fault_envs, tiny_policy, tmp_path, cli,
                                                                     finished_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from textgym.trainers import make_trainer
    from textgym.trainers.engine.early_stop import EarlyStop

    config = {"num_envs": 2, "episodes_per_update": 2, "minibatch_size": 2, "checkpoint_every": 0}
    trainer = make_trainer("reinforce", tiny_policy, env="fault/Slow-v0", config=config, out_dir=tmp_path / "slow",
                           env_kwargs={"delay": 0.1})
    history = trainer.train(updates=2, early_stop=EarlyStop(until=100.0, every=1, episodes=2))
    trainer.writer.close()
    spent = sum(m["rollout_seconds"] + m["update_seconds"] + m["check"]["seconds"] for m in history)
    # the checks (0.4 s of sleeping each) are in the run's time; each figure is rounded to the millisecond
    assert history[-1]["wall_time"] >= spent - 0.0005 * (3 * len(history) + 1)
    events = EventAccumulator(str(tmp_path / "slow" / "tb"))
    events.Reload()
    assert [e.step for e in events.Scalars("check/return_mean")] == [1, 2]
    assert [e.value for e in events.Scalars("check/solved")] == [0.0, 0.0]

    (tmp_path / "slow" / "config.toml").write_text('env = "fault/Slow-v0"\n')
    from textgym.cli.plotting import figure_of, read_metrics, with_checks

    figure = figure_of([("slow", with_checks(read_metrics(tmp_path / "slow")))])
    lines = figure.axes[0].get_lines()
    assert [list(line.get_ydata()) for line in lines][1] == [m["check"]["return_mean"] for m in history]
    result = cli("plot", finished_run, tmp_path / "slow", "--out", tmp_path / "both.png")
    assert result.exit_code == 0, result.output
    assert "trained on different envs (textgym/Bandit-v0, fault/Slow-v0)" in result.stderr


# --- 10. one clear line for each bad input the sweep found -----------------------------------------

def test_eval_with_another_base_model_is_one_short_line(cli, finished_run):
    result = cli("eval", "bandit", "--checkpoint", finished_run, "--model", "smollm2-135m", "--episodes", 1)
    assert result.exit_code == 1 and "Traceback" not in result.output and len(result.stderr) < 600
    line = result.stderr.splitlines()[-1]
    assert "weights do not fit (it fine-tunes 'tiny'; drop --model)" in line and len(line) < 400, line


def test_bad_paths_and_env_ids_are_one_short_line(cli, tmp_path):
    line = one_error_line(cli("train", "bandit", "--config", tmp_path))
    assert "is a folder, not a TOML file" in line
    line = one_error_line(cli("train", "bandit", "--config", "/dev/zero"))
    assert "/dev/zero is not a regular file" in line
    line = one_error_line(cli("train", "../../etc/passwd:Foo-v0"))
    assert "'../../etc/passwd' is not a Python module name" in line
    line = one_error_line(cli("train", "nosuchmodule_xyz:Foo-v0"))
    assert "cannot import module 'nosuchmodule_xyz'" in line
    line = one_error_line(cli("train", "bandit", "--out", tmp_path / ("x" * 300) / ("y" * 100_000)))
    assert len(line) < 1000 and "characters ...]" in line, len(line)


def test_warnings_lose_their_colour_codes_and_play_without_stdin_is_one_line(cli, monkeypatch):
    from textgym.cli import errors

    text = errors._one_line_warning("\x1b[33mWARN: the env checker found a problem\x1b[0m", UserWarning)
    assert text == "textgym: warning: WARN: the env checker found a problem\n"
    from textgym.cli import playing

    monkeypatch.setattr("sys.stdin", None)      # `textgym play cartpole <&-`
    with pytest.raises(errors.CLIError, match="reads your answers from stdin, which is closed"):
        playing.run("cartpole")


# --- 11. play as training sees it; watch a trained agent ---------------------------------------------

def test_play_uses_the_training_wording_and_plays_a_checkpoint(cli, finished_run):
    from textgym.registry import training_defaults

    word = training_defaults("textgym/CartPole-v1", "score").env_kwargs["word"]
    result = cli("play", "cartpole", "--seed", 0, input="LEFT\n")
    assert result.exit_code == 0, result.output
    observation = result.stdout.split("observation")[1]
    assert word == "heading" and f"word={word!r}" in result.stdout
    assert ", falling " in observation and " turning " not in observation   # the heading wording
    result = cli("play", "bandit", "--checkpoint", finished_run, "--seed", 5, "--episodes", 2)
    assert result.exit_code == 0, result.output
    assert "Watching the agent of" in result.stdout and result.stdout.count("(the agent)") == 2
    assert result.stdout.count("episode over") == 2
    line = one_error_line(cli("play", "cartpole", "--checkpoint", finished_run))
    assert "was trained on textgym/Bandit-v0, not textgym/CartPole-v1" in line


# --- 13. an exported adapter loads offline with plain PEFT -------------------------------------------

def test_the_model_card_says_how_to_load_the_adapter_offline_and_get_an_action(tmp_path, unreachable_hub,
                                                                                 monkeypatch):
    import torch

    from textgym import lora, models
    from textgym.policy import Policy
    from textgym.policy.persistence import model_card, read_record, save

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    policy = Policy.from_pretrained("smollm2-135m", device="cpu")
    policy.model = lora.add_lora(policy.model, lora.LoraSettings(r=2, alpha=4, layers=1), model_name="smollm2-135m")
    with torch.no_grad():   # a trained adapter: B is not zero
        for name, parameter in policy.model.named_parameters():
            if "lora_B" in name:
                parameter.fill_(0.01)
    folder = save(policy, tmp_path / "saved")
    card = model_card(read_record(folder), str(folder / "adapter"), training={"env": "textgym/Bandit-v0"}).text
    assert "`AutoPeftModelForCausalLM` would try to download" in card and str(models.local_copy("smollm2-135m")) in card
    assert 'env = textgym.make("textgym/Bandit-v0")' in card and "policy.act([obs]" in card
    offline = card.split("and add the adapter:")[1].split("```python\n")[1].split("```")[0]
    offline = offline.replace(f'AutoTokenizer.from_pretrained("{folder / "adapter"}")',
                              f'AutoTokenizer.from_pretrained("{folder / "tokenizer"}")')  # a save keeps it there
    namespace: dict = {}
    exec(offline, namespace)  # noqa: S102 - the card's own code, with the hub unreachable
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.allclose(namespace["model"](ids).logits, policy.model(ids).logits, atol=1e-4)


def test_a_second_signal_stops_a_rollout_that_would_not_end(fault_envs, tiny_policy, monkeypatch):
    import os
    import signal

    import gymnasium as gym
    from textgym.cli.stopping import StopSignals

    import textgym
    from textgym import rollout, step_cap

    class SignalsAtSteps(gym.Wrapper):
        """Ctrl-C pressed at the 3rd and the 6th step (the process signals itself)."""

        steps = 0

        def step(self, action):
            SignalsAtSteps.steps += 1
            if SignalsAtSteps.steps in (3, 6):
                os.kill(os.getpid(), signal.SIGINT)
            return super().step(action)

    monkeypatch.setattr(step_cap, "DEFAULT_MAX_EPISODE_STEPS", 10**9)   # no cap: only the signal ends it
    env = SignalsAtSteps(textgym.make("fault/Endless-v0"))
    messages = []
    with StopSignals(lambda message, style=None: messages.append(message)) as stop, \
            pytest.raises(KeyboardInterrupt):
        rollout.collect(tiny_policy, env, episodes=1, seed=0)
    assert stop.reason == "Ctrl-C" and "stopping after this update" in messages[0]
    assert SignalsAtSteps.steps == 6
