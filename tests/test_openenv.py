"""Envs over the network (textgym.serve, textgym.remote): real servers on free ports of 127.0.0.1,
started once per module and torn down even when a test fails."""

from __future__ import annotations

import contextlib
import functools
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("openenv")

import textgym
from textgym.remote import OpenEnvError, OpenEnvTextEnv
from textgym.serve import jsonable

HERE = Path(__file__).parent
START_SECONDS = 180  # bounded wait for a server to listen (importing OpenEnv takes ~10 s on a busy machine)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


class Server:
    """A server process that listens on a free port chosen by the system (port 0, so two servers
    never race for one port) and prints its URL; stdout and stderr go to files (a pipe could fill
    up and block the server)."""

    URL = re.compile(r"http://127\.0\.0\.1:(\d+)")

    def __init__(self, *args: str, log: Path | None = None, env: dict[str, str] | None = None):
        self.folder = None if log else tempfile.TemporaryDirectory(prefix="textgym-server-")
        self.log = log or Path(self.folder.name) / "server.log"
        self.printed = self.log.with_suffix(".out")
        self.port: int | None = None
        self.url: str | None = None
        with self.printed.open("wb") as stdout, self.log.open("wb") as stderr:
            self.process = subprocess.Popen([a.replace("PORT", "0") for a in args], stdout=stdout,
                                            stderr=stderr, env=env)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self) -> Server:
        deadline = time.monotonic() + START_SECONDS
        while self.port is None or not _listening(self.port):
            if self.port is None and (found := self.URL.search(self.printed.read_text(errors="replace"))):
                self.port = int(found[1])
                self.url = f"http://127.0.0.1:{self.port}"
                continue
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited: {self.text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"server did not listen within {START_SECONDS} s: {self.text()[-2000:]}")
            time.sleep(0.2)
        return self

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)
        if self.folder is not None:
            self.folder.cleanup()


@contextlib.contextmanager
def started_together(starts: dict[str, Callable[[], Server]]):
    """``{name: server}``, each started by its ``starts`` entry and all waited for together (each
    takes seconds to import OpenEnv); every one started is stopped, also when a test fails."""
    started = {}
    try:
        for name, start in starts.items():
            started[name] = start()
        for server in started.values():
            server.wait()
        yield started
    finally:
        for server in started.values():
            server.stop()


def textgym_serve(env: str, *flags: str) -> Server:
    return Server(sys.executable, "-m", "textgym.cli", "serve", env, "--port", "PORT", *flags)


def helper(kind: str) -> Server:
    return Server(sys.executable, str(HERE / "openenv_servers.py"), kind)


@pytest.fixture(scope="module")
def servers():
    """All servers of the module, started together (each takes seconds to import OpenEnv)."""
    starts = {"cartpole": lambda: textgym_serve("cartpole", "--max-sessions", "3"),
              "bandit": lambda: textgym_serve("bandit")}     # killed by a test
    for kind in ("walk", "garbage", "garbled", "drops", "rooms", "echo"):
        starts[kind] = functools.partial(helper, kind)
    with started_together(starts) as started:
        yield started


def _play(venv, actions):
    """(obs, rewards, terminated, truncated, infos) of every step, infos as JSON data."""
    trace = [jsonable(venv.reset())]
    for action in actions:
        obs, rewards, terminated, truncated, infos = venv.step([action] * venv.num_envs)
        trace.append(jsonable((obs, rewards.tolist(), terminated.tolist(), truncated.tolist(), infos)))
    return trace


def test_round_trip_through_textgym_serve_matches_in_process(servers):
    actions = ["LEFT", "RIGHT", "RIGHT", "no idea", "LEFT"] * 8
    local = _play(textgym.make_vec("cartpole", num_envs=2, seed=5), actions)
    served = textgym.make_vec(f"openenv:{servers['cartpole'].url}", num_envs=2, seed=5)
    try:
        remote = _play(served, actions)
    finally:
        served.close()
    assert remote == local
    assert any(any(step[2]) for step in local[1:])  # episodes ended (and were reset) on the way


def test_sessions_spread_over_urls_and_a_full_server_says_so(servers):
    url = servers["cartpole"].url
    venv = textgym.make_vec(f"openenv:{url},http://127.0.0.1:1", num_envs=4)
    assert [env.url for env in venv.envs] == [url, "http://127.0.0.1:1"] * 2
    sessions = [OpenEnvTextEnv(url) for _ in range(4)]   # the server takes 3
    try:
        for env in sessions[:3]:
            env.reset(seed=0)
        with pytest.raises(OpenEnvError, match=f"{url} is full"):
            sessions[3].reset(seed=0)
        sessions[0].close()                                # a slot frees: the next reset reconnects
        deadline = time.monotonic() + 30
        while True:
            try:
                assert sessions[3].reset(seed=0)[1]["valid_actions"] == ["LEFT", "RIGHT"]
                break
            except OpenEnvError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        for env in sessions:
            env.close()


def test_foreign_server_rendered_and_parsed_against_its_schema(servers):
    env = textgym.make(f"openenv:{servers['walk'].url}")
    try:
        obs, info = env.reset(seed=0)
        assert obs == "position: 0\ngoal: 2"
        assert info["valid_actions"] == ["left", "right", "wait"]
        assert info["system_prompt"].endswith("Answer with one word: left, right or wait.")
        obs, reward, terminated, _, info = env.step("I go RIGHT")
        assert (obs, reward, terminated) == ("position: 1\ngoal: 2", 0.0, False)
        assert info["parse"]["action"] == {"move": "right"} and info["parse"]["valid"]
        obs, reward, terminated, _, info = env.step("fly")  # fits no action: not sent, asked again
        assert obs.startswith("position: 1\ngoal: 2\n") and not info["parse"]["valid"]
        assert info["parse"]["policy"] == "retry" and not terminated
        obs, reward, terminated, _, info = env.step("right")
        assert (reward, terminated, info["episode"]) == (1.0, True, {"return": 1.0, "length": 3,
                                                                           "invalid_count": 1})
    finally:
        env.close()


def test_legal_actions_a_board_and_an_action_model_with_defaults(servers):
    # OpenEnv's games (Connect4, OpenSpiel) list their legal moves as ints and their boards as
    # nested lists; the action model has one field to fill and others with defaults
    env = textgym.make(f"openenv:{servers['drops'].url}")
    try:
        obs, info = env.reset(seed=0)
        assert obs == "board:\n0 0 0\n0 0 0\nlegal actions: 0, 1, 2" and info["valid_actions"] == ["0", "1", "2"]
        assert info["system_prompt"].endswith("one of the legal actions listed.")
        for _ in range(2):
            obs, reward, terminated, _, info = env.step("column 1")
        assert info["parse"]["action"] == {"column": 1}        # the server fills in its default variant
        assert obs.endswith("legal actions: 0, 2") and info["valid_actions"] == ["0", "2"]
        obs, reward, terminated, _, info = env.step("1")       # full now: not a legal action, asked again
        assert not info["parse"]["valid"] and "Reply with one of: 0, 2" in info["feedback"]
        for answer in ("0", "0", "2", "2"):
            obs, reward, terminated, _, info = env.step(answer)
        assert (reward, terminated) == (1.0, True)
    finally:
        env.close()


def test_legal_actions_in_metadata_get_the_names_the_action_model_gives(servers):
    env = textgym.make(f"openenv:{servers['rooms'].url}")
    try:
        obs, info = env.reset(seed=0)
        assert obs == "hall\nlegal actions: north, east, west"
        assert info["valid_actions"] == ["north", "east", "west"]
        assert env.step("south")[4]["parse"]["valid"] is False          # the hall has no door south
        obs, reward, terminated, _, info = env.step("east")
        assert (obs.split("\n")[0], reward, terminated, info["parse"]["action"]) == ("goal", 1.0, True, {"direction": 2})
    finally:
        env.close()


def test_random_baseline_plays_a_served_game(servers, cli):
    result = cli("eval", f"openenv:{servers['drops'].url}", "--baseline", "random", "--episodes", "3", "--json")
    assert result.exit_code == 0, result.output
    import json

    random = json.loads(result.output)["results"]["random"]
    assert random["episodes"] == 3 and random["invalid_rate"] == 0.0 and random["length_mean"] == 6.0


def test_score_mode_on_a_server_without_listed_actions_stops_before_the_model_loads(servers, cli, tmp_path):
    from tests.test_cli import one_error_line

    line = one_error_line(cli("train", f"openenv:{servers['echo'].url}", "--model", "tiny", "--updates", "1",
                              "--out", str(tmp_path / "run")))
    assert "--mode generate" in line and not (tmp_path / "run").exists()
    line = one_error_line(cli("eval", f"openenv:{servers['echo'].url}", "--model", "tiny"))
    assert "--mode generate" in line


def test_an_mcp_server_is_a_tool_env(servers):
    env = textgym.make(f"openenv:{servers['echo'].url}")
    try:
        obs, info = env.reset(seed=0)
        assert obs == "Say hello with the echo tool."
        assert [t["function"]["name"] for t in info["tools"]] == ["echo", "add", "shutdown"]
        assert '"name": "add"' in info["system_prompt"]
        obs, _, _, _, info = env.step('<tool_call>{"name": "add", "arguments": {"a": 2, "b": "3"}}</tool_call>')
        assert obs == "<tool_response>\n5\n</tool_response>" and info["parse"]["action"]["arguments"] == {"a": 2, "b": 3}
        obs, _, _, _, info = env.step('{"name": "echo", "arguments": {"message": "hello"}}')
        assert obs == "<tool_response>\nhello\n</tool_response>"
        obs, _, _, _, info = env.step('{"name": "echo", "arguments": {}}')    # checked before it is sent
        assert not info["parse"]["valid"] and "'message' is a required property" in info["feedback"]
        obs, _, terminated, _, info = env.step("hello")                       # no tool call: the end
        assert terminated and info["parse"]["parser"] == "final"
    finally:
        env.close()


def test_an_mcp_server_dying_mid_episode_is_one_clear_error():
    server = helper("echo").wait()   # its own: this one dies
    url = server.url
    env = textgym.make(f"openenv:{url}", step_timeout=10.0)
    try:
        env.reset(seed=0)
        env.step('{"name": "shutdown", "arguments": {}}')                      # the server exits now
        server.process.wait(timeout=60)
        with pytest.raises(OpenEnvError, match=url):
            env.step('{"name": "echo", "arguments": {"message": "anyone?"}}')
    finally:
        env.close()
        server.stop()


def test_textgym_serve_names_its_step_format_to_a_client_sending_another(servers):
    from openenv.core.generic_client import GenericEnvClient

    client = GenericEnvClient(base_url=servers["cartpole"].url, message_timeout_s=30).sync()
    client.connect()
    try:
        client.reset(seed=0)
        with pytest.raises(RuntimeError, match=r'takes a step as \{"text": "<the answer>"\}; got the fields action'):
            client.step({"action": "LEFT"})
        assert client.step({"text": "LEFT"}).reward == 1.0   # the session goes on
    finally:
        client.close()


def test_slow_server_times_out_naming_the_url(servers, monkeypatch):
    from textgym import remote

    client_class, timeouts = remote._openenv_client(), []

    class RecordingClient(client_class):  # OpenEnv's client, told how long to wait
        def __init__(self, *args, **kwargs):
            timeouts.append((kwargs["connect_timeout_s"], kwargs["message_timeout_s"]))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(remote, "_openenv_client", lambda: RecordingClient)
    url = servers["walk"].url
    env = textgym.make(f"openenv:{url}", step_timeout=1.0)
    try:
        env.reset(seed=0)
        with pytest.raises(OpenEnvError, match=rf"{url} did not answer within 1 s") as error:
            env.step("wait")                     # the server sleeps for minutes
        # the client's timeout ended the wait, not the server's answer nor its dropped connection
        assert type(error.value.__cause__).__name__ == "TimeoutError" and timeouts == [(1.0, 1.0)]
    finally:
        env.close()


def test_malformed_reply_is_one_clear_error(servers):
    url = servers["garbage"].url
    env = textgym.make(f"openenv:{url}", step_timeout=5.0)
    with pytest.raises(OpenEnvError, match=f"malformed reply from OpenEnv server {url}"):
        env.reset(seed=0)
    env.close()


@pytest.mark.parametrize(("seed", "what"), [
    (0, "reward is 'abc', not a number"), (1, "observation is ['not', 'an', 'object'], not an object"),
    (2, "done is missing"), (3, "reward is nan, not a finite number"),
    (4, "observation.text is a string of 2,000,000 characters"), (5, "done is 'yes', not true or false"),
    (6, "metadata is 'not an object', not an object"), (7, "reward is inf, not a finite number"),
    (8, "the reply is list, not an object")])
def test_a_garbled_field_is_a_malformed_reply_naming_it(servers, seed, what):
    url = servers["garbled"].url
    env = textgym.make(f"openenv:{url}", step_timeout=10.0)
    try:
        assert env.reset(seed=seed)[0] == "you stand still"
        with pytest.raises(OpenEnvError, match=f"malformed reply from OpenEnv server {url}: .*{re.escape(what)}"):
            env.step("left")
        assert env.reset(seed=seed)[0] == "you stand still"   # the session was dropped; a new one opens
    finally:
        env.close()


def test_a_garbled_server_costs_its_episodes_not_the_rollout(servers):
    from textgym.rollout import collect

    venv = textgym.make_vec(f"openenv:{servers['cartpole'].url},{servers['garbled'].url}", num_envs=2,
                            step_timeout=10.0)
    try:
        rollout = collect(_KillsAServer(None, at=0), venv, episodes=3, seed=0)
    finally:
        venv.close()
    assert rollout.stats["dropped_episodes"] >= 1 and rollout.stats["failed_envs"] == 1
    assert len(rollout.episodes) == 3 and all(s.env_index == 0 for e in rollout.episodes for s in e.steps)


def test_unreachable_server_is_one_clear_error():
    url = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(OpenEnvError, match=f"cannot reach OpenEnv server {url}"):
        textgym.make(f"openenv:{url}", step_timeout=5.0).reset()


class _KillsAServer:
    """A scripted policy (``collect``'s SupportsAct) that kills a server at its ``at``-th call."""

    def __init__(self, server: Server, at: int):
        self.server, self.at, self.calls = server, at, 0

    def act(self, observations, system_prompts, valid_actions=None, greedy=False):
        from textgym.policy import Decision

        self.calls += 1
        if self.calls == self.at:
            self.server.stop()
        return [Decision(text=actions[0], prompt_ids=[], answer_ids=[], token_logprobs=[], logprob=0.0)
                for actions in valid_actions]


def test_server_dying_mid_episode_drops_the_episode_and_the_rollout_goes_on(servers):
    from textgym.rollout import collect

    cartpole, bandit = servers["cartpole"], servers["bandit"]
    # Sub-env 0 plays on the CartPole server, sub-env 1 on the Bandit server, which dies while the
    # policy makes its first decision: sub-env 1's episode is lost, its reset fails, and sub-env 0
    # plays the episodes it had left.
    venv = textgym.make_vec(f"openenv:{cartpole.url},{bandit.url}", num_envs=2)
    try:
        rollout = collect(_KillsAServer(bandit, at=1), venv, episodes=4, seed=0)
    finally:
        venv.close()
    assert rollout.stats["failed_envs"] == 1 and rollout.stats["dropped_episodes"] == 1
    assert len(rollout.episodes) == 4                                    # the other env played its share
    assert sorted(e.seed for e in rollout.episodes) == [0, 1, 2, 3]
    assert all(s.env_index == 0 for e in rollout.episodes for s in e.steps)
    with pytest.raises(OpenEnvError, match=bandit.url):                  # and says why, naming the URL
        textgym.make(f"openenv:{bandit.url}", step_timeout=5.0).reset()


def test_training_on_a_served_env(servers, tiny_policy, tmp_path):
    from textgym.trainers import make_trainer

    trainer = make_trainer("reinforce", tiny_policy, env=f"openenv:{servers['cartpole'].url}",
                           config={"num_envs": 2, "episodes_per_update": 2, "minibatch_size": 8, "lr": 1e-3,
                                   "max_train_episode_steps": 8}, out_dir=tmp_path)
    try:
        history = trainer.train(updates=2)
    finally:
        trainer.venv.close()
    assert trainer.stopped_by == "budget" and [m["update"] for m in history] == [1, 2]
    assert all(m["episodes"] > 0 and np.isfinite(m["loss"]) for m in history)
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 2


def test_serve_and_train_refuse_bad_input_in_one_line(cli, tmp_path):
    from tests.test_cli import one_error_line

    assert "no env registered as 'nosuchenv'" in one_error_line(cli("serve", "nosuchenv"))
    bad = tmp_path / "serve.toml"
    bad.write_text('env = "cartpole"\n[env_kwargs]\nno_such_setting = 1\n')
    assert "no_such_setting" in one_error_line(cli("serve", "--config", str(bad)))
    url = f"http://127.0.0.1:{_free_port()}"   # nothing listens there: train stops before the model loads
    line = one_error_line(cli("train", f"openenv:{url}", "--model", "tiny", "--updates", "1",
                              "--out", str(tmp_path / "run")))
    assert f"cannot reach OpenEnv server {url}" in line and not (tmp_path / "run").exists()


def test_each_process_of_a_run_opens_its_own_share(monkeypatch):
    urls = ["http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"]
    monkeypatch.setenv("RANK", "1")   # the second process of `textgym train --processes N` (torchrun's RANK)
    venv = textgym.make_vec("openenv:" + ",".join(urls), num_envs=2)
    assert [env.url for env in venv.envs] == [urls[2], urls[0]]   # sessions 2 and 3 of the run's 4


def test_step_timeout_flag_reaches_the_remote_envs(cli, tmp_path):
    from tests.test_cli import one_error_line

    url = f"http://127.0.0.1:{_free_port()}"
    line = one_error_line(cli("train", f"openenv:{url}", "--step-timeout", "2.5", "--model", "tiny",
                              "--updates", "1", "--out", str(tmp_path / "run")))
    assert f"cannot reach OpenEnv server {url}" in line
    line = one_error_line(cli("train", "bandit", "--step-timeout", "2.5", "--model", "tiny", "--updates", "1",
                              "--out", str(tmp_path / "run")))
    assert "step_timeout" in line   # only a served env has one
    from textgym.cli.training import _new_config

    config = _new_config({}, {"env": f"openenv:{url}", "model": "tiny", "updates": 1,
                              "env_kwargs": {"step_timeout": 2.5}}, None)
    assert config.env == f"openenv:{url}" and config.env_kwargs == {"step_timeout": 2.5}
    assert textgym.make(config.env, **config.env_kwargs).step_timeout == 2.5


class _StepFails(__import__("gymnasium").Wrapper):
    """A sub-env whose every step fails the way a lost server does (resets work)."""

    def step(self, action):
        from textgym.vector import SubEnvError

        raise SubEnvError("the server answered garbage")


def test_an_env_that_keeps_failing_leaves_and_training_stops_when_most_envs_are_gone(tiny_policy, tmp_path):
    from textgym.rollout import collect
    from textgym.trainers import make_trainer
    from textgym.vector import TextVectorEnv

    venv = TextVectorEnv([textgym.make("bandit"), _StepFails(textgym.make("bandit"))])
    rollout = collect(_KillsAServer(None, at=0), venv, episodes=4, seed=0)
    # sub-env 1 dropped 4 episodes in a row (each replayed from its seed), then left; sub-env 0 played all 4
    assert rollout.stats["dropped_episodes"] == 4 and rollout.stats["failed_envs"] == 1
    assert sorted(e.seed for e in rollout.episodes) == [0, 1, 2, 3]

    broken = TextVectorEnv([_StepFails(textgym.make("bandit")) for _ in range(2)])
    trainer = make_trainer("reinforce", tiny_policy, env=broken, out_dir=tmp_path,
                           config={"num_envs": 2, "episodes_per_update": 4, "minibatch_size": 4})
    assert trainer.train(updates=2) == [] and trainer.stopped_by == "env_failure"
    assert trainer.update_count == 0
