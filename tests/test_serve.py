"""``textgym serve`` under faults and bad requests: real servers on free ports of 127.0.0.1 (started
once per module, torn down even when a test fails), their logs read from files."""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("openenv")

from test_cli_runs import one_error_line
from test_openenv import Server, started_together

from textgym.remote import OpenEnvError, OpenEnvTextEnv

HERE = Path(__file__).parent
TOKEN = "correct-horse-battery"


class LoggedServer(Server):
    """``textgym serve`` on ``--port 0`` (the port it chose: in the line it prints), its log in a file."""

    def __init__(self, log: Path, env: str, *flags: str):
        environ = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get(
            "PYTHONPATH")]))}
        environ.pop("TEXTGYM_TOKEN", None)
        super().__init__(sys.executable, "-m", "textgym.cli", "serve", env, "--port", "0", *flags, log=log,
                         env=environ)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve")

    def slow(delay: float) -> Path:
        config = folder / f"slow-{delay:g}.toml"
        config.write_text(f"env_kwargs = {{ delay = {delay} }}\n")
        return config

    specs = {
        "cartpole": ("cartpole", "--max-sessions", "2"),
        "token": ("cartpole", "--token", TOKEN),
        # a step that sleeps past the timeout, and one that never returns (in test time)
        "sleeps": ("faultenvs:fault/Slow-v0", "--config", str(slow(6)), "--step-timeout", "2",
                   "--max-sessions", "1"),
        "hangs": ("faultenvs:fault/Slow-v0", "--config", str(slow(10**6)), "--step-timeout", "2",
                  "--max-sessions", "1"),
        # a step that ends well within the server's timeout, after its client left
        "slow": ("faultenvs:fault/Slow-v0", "--config", str(slow(8)), "--max-sessions", "1"),
    }
    starts = {name: functools.partial(LoggedServer, folder / f"{name}.log", *spec)
              for name, spec in specs.items()}
    with started_together(starts) as started:
        yield started


@pytest.mark.parametrize("name", ["sleeps", "hangs"])
def test_a_step_past_the_step_timeout_closes_its_session_and_frees_the_slot(servers, name):
    server = servers[name]
    first = OpenEnvTextEnv(server.url, step_timeout=120)
    second = OpenEnvTextEnv(server.url, step_timeout=120)
    try:
        first.reset(seed=0)
        with pytest.raises(OpenEnvError, match=r"took longer than 2 s \(the server's --step-timeout\)"):
            first.step("GOOD")
        # the slot (--max-sessions 1) is free although the step still runs in the server
        assert second.reset(seed=0)[0] == "Step 0. Say GOOD."
        with pytest.raises(OpenEnvError, match="took longer than 2 s"):
            second.step("GOOD")   # and again: a hung step does not hold the next session's thread
    finally:
        first.close()
        second.close()
    assert "the env's step took longer than 2 s" in server.text()


def test_the_server_closes_the_websocket_of_a_timed_out_session(servers):
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    with connect(f"ws://127.0.0.1:{servers['hangs'].port}/ws") as ws:
        ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
        assert json.loads(ws.recv(timeout=60))["type"] == "observation"
        ws.send(json.dumps({"type": "step", "data": {"text": "GOOD"}}))
        reply = json.loads(ws.recv(timeout=60))
        assert reply["type"] == "error" and "--step-timeout" in reply["data"]["message"]
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=60)
    assert closed.value.rcvd.code == 1011


def test_a_client_that_leaves_mid_step_is_no_server_error(servers):
    server = servers["slow"]
    impatient = OpenEnvTextEnv(server.url, step_timeout=3)
    impatient.reset(seed=0)
    with pytest.raises(OpenEnvError, match="did not answer within 3 s"):
        impatient.step("GOOD")           # the client gives up and closes; the step goes on
    impatient.close()
    deadline = time.monotonic() + 60
    while True:                            # the slot frees once the step is done (8 s)
        try:
            OpenEnvTextEnv(server.url).reset(seed=0)
            break
        except OpenEnvError as exc:
            assert "is full" in str(exc) and time.monotonic() < deadline
            time.sleep(0.2)
    log = server.text()
    assert "Exception in ASGI application" not in log and "Traceback" not in log, log


def test_a_failed_reset_over_the_websocket_leaves_a_working_session(servers):
    from websockets.sync.client import connect

    server = servers["cartpole"]
    with connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
        def send(kind, data):
            ws.send(json.dumps({"type": kind, "data": data}))
            return json.loads(ws.recv(timeout=60))

        failed = send("reset", {"seed": -5})
        assert failed["type"] == "error"
        assert "raised Error at reset: Seed must be greater or equal to zero" in failed["data"]["message"]
        assert send("reset", {"seed": 0})["type"] == "observation"
        step = send("step", {"text": "LEFT"})
        assert step["type"] == "observation", step
        assert step["data"]["reward"] == 1.0
    assert "env textgym/CartPole-v1 raised Error at reset" in server.text()  # logged by the server


def test_http_step_is_a_clear_4xx_and_big_bodies_are_refused(servers):
    import requests

    url = servers["cartpole"].url
    reply = requests.post(f"{url}/step", json={"action": {"text": "LEFT"}}, timeout=60)
    assert reply.status_code == 409 and "WebSocket session" in reply.json()["detail"]
    assert requests.post(f"{url}/reset", json={"seed": 0}, timeout=60).status_code == 200

    limit = 16 * 1024 * 1024
    reply = requests.post(f"{url}/reset", data=b" " * (limit + 1), timeout=60,
                          headers={"Content-Type": "application/json"})
    assert reply.status_code == 413 and "over 16777216 bytes" in reply.json()["detail"]

    def chunks():                          # no Content-Length: counted as it arrives
        for _ in range(17):
            yield b" " * (1024 * 1024)

    reply = requests.post(f"{url}/reset", data=chunks(), timeout=60,
                          headers={"Content-Type": "application/json"})
    assert reply.status_code == 413
    assert "Exception in ASGI application" not in servers["cartpole"].text()


def test_no_docs_page_loads_scripts_from_a_cdn(servers):
    import requests

    url = servers["cartpole"].url
    for page in ("/docs", "/redoc"):
        reply = requests.get(f"{url}{page}", timeout=60)
        assert reply.status_code == 404 and "cdn" not in reply.text.lower()
    assert "/ws" not in requests.get(f"{url}/openapi.json", timeout=60).json()["paths"]  # still served


def test_a_token_is_required_on_http_and_websocket(servers, monkeypatch):
    import requests

    url = servers["token"].url
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        assert requests.post(f"{url}/reset", json={}, headers=headers, timeout=60).status_code == 401
    reply = requests.post(f"{url}/reset", json={}, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    assert reply.status_code == 200

    monkeypatch.delenv("TEXTGYM_TOKEN", raising=False)
    with pytest.raises(OpenEnvError, match="refused the connection: set TEXTGYM_TOKEN"):
        OpenEnvTextEnv(url).reset(seed=0)
    monkeypatch.setenv("TEXTGYM_TOKEN", "wrong")
    with pytest.raises(OpenEnvError, match="refused the connection"):
        OpenEnvTextEnv(url).reset(seed=0)
    monkeypatch.setenv("TEXTGYM_TOKEN", TOKEN)
    env = OpenEnvTextEnv(url)
    try:
        assert env.reset(seed=0)[1]["valid_actions"] == ["LEFT", "RIGHT"]
        assert env.step("LEFT")[1] == 1.0
    finally:
        env.close()


def test_ctrl_c_ends_a_server_whose_env_step_never_returns(tmp_path):
    config = tmp_path / "hangs.toml"
    config.write_text("env_kwargs = { delay = 1000000 }\n")
    server = LoggedServer(tmp_path / "hangs.log", "faultenvs:fault/Slow-v0", "--config", str(config),
                          "--step-timeout", "2")
    try:
        server.wait()
        env = OpenEnvTextEnv(server.url, step_timeout=120)
        env.reset(seed=0)
        with pytest.raises(OpenEnvError, match="took longer than 2 s"):
            env.step("GOOD")
        env.close()
        server.process.send_signal(signal.SIGINT)
        assert server.process.wait(timeout=120) == 130   # not waiting for the hung thread
    finally:
        server.stop()
    assert "1 env call(s) past the step timeout still running: exiting without them" in server.text()


def test_a_ctrl_c_that_asyncio_swallows_still_exits_130_past_a_hung_call(monkeypatch):
    """uvicorn re-raises a Ctrl-C after its shutdown, but asyncio can swallow it when the signal
    lands as the serving task ends (seen once in a loaded CI run: exit 0). The code comes from the
    signal uvicorn received, not from the exception."""
    import uvicorn

    from textgym import serve

    def stopped_by_ctrl_c_then_returns(self, sockets=None):
        self.handle_exit(signal.SIGINT, None)      # what uvicorn's signal handler calls
        app = self.config.app
        app.state.textgym_server.calls_running = 1  # a timed-out env call still in its thread

    exits = []
    monkeypatch.setattr(uvicorn.Server, "run", stopped_by_ctrl_c_then_returns)
    monkeypatch.setattr(serve.os, "_exit", exits.append)
    sock = serve.listen("127.0.0.1", 0)
    try:
        serve.run("bandit", sock=sock)
    finally:
        sock.close()
    assert exits == [130]


def test_resets_with_new_seeds_leave_at_most_the_cached_games_on_disk(tmp_path, monkeypatch):
    pytest.importorskip("textworld")
    import requests

    monkeypatch.setenv("TEXTGYM_HOME", str(tmp_path / "home"))
    config = tmp_path / "textworld.toml"
    config.write_text("env_kwargs = { cache_games = 2 }\n")
    server = LoggedServer(tmp_path / "textworld.log", "textworld", "--config", str(config))
    try:
        server.wait()
        games = set()
        for seed in range(4):                      # HTTP resets: a new env each, no session
            reply = requests.post(f"{server.url}/reset", json={"seed": seed}, timeout=120)
            assert reply.status_code == 200, reply.text
            games.add(reply.json()["observation"]["metadata"]["textgym"]["info"]["game_file"])
    finally:
        server.stop()
    assert len(games) == 4
    assert len(list((tmp_path / "home").rglob("*.z8"))) == 2


# --- the command line (nothing served) -------------------------------------------------------


def test_a_port_in_use_is_one_error_line_before_serving(cli):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cli("serve", "cartpole", "--port", port)
    line = one_error_line(result)
    assert f"cannot listen on 127.0.0.1:{port}" in line
    assert "serving" not in result.stdout


@pytest.mark.parametrize("port", ["-1", "65536"])
def test_a_port_out_of_range_is_one_error_line(cli, port):
    assert "--port must be in 0..65535 (0: a free port" in one_error_line(cli("serve", "cartpole", "--port", port))


@pytest.mark.parametrize("token", [None, TOKEN])
def test_a_host_beyond_the_loopback_is_warned_about(cli, monkeypatch, token):
    from textgym import serve

    class Bound:                              # a socket as listen() binds it, not bound here
        def __init__(self, host, port):
            self.address = (host, port)

        def getsockname(self):
            return self.address

    served = {}
    monkeypatch.setattr(serve, "listen", Bound)
    monkeypatch.setattr(serve, "run", lambda *args, **kwargs: served.update(kwargs))
    monkeypatch.delenv("TEXTGYM_TOKEN", raising=False)
    result = cli("serve", "cartpole", "--host", "0.0.0.0", *(["--token", token] if token else []))
    assert result.exit_code == 0, result.output
    assert "textgym: warning: serving on 0.0.0.0: anyone who can reach port 8000 can drive the env" \
        in result.stderr
    assert ("no authentication" in result.stderr) is (token is None)
    assert served["token"] == token and served["sock"].address == ("0.0.0.0", 8000)
    result = cli("serve", "cartpole", "--host", "127.0.0.1")
    assert result.exit_code == 0 and "warning" not in result.stderr
