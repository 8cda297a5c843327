"""Servers for tests/test_openenv.py, run as ``python tests/openenv_servers.py KIND``: each
listens on a free port of 127.0.0.1 that the system chooses and prints its URL.

* ``walk``: an OpenEnv server that is not textgym's (OpenEnv's ``create_app``): a walk on a line
  with a typed action ``{"move": "left" | "right" | "wait"}`` and an observation without a text
  field (``position``, ``goal``); ``"wait"`` sleeps for minutes (a slow server).
* ``garbage``: a WebSocket server that answers every message with text that is not JSON (a
  malformed reply); plain ``websockets``, since OpenEnv's server never sends such a thing.
* ``drops``: a grid game in the style of OpenEnv's Connect4 and OpenSpiel envs: the board a
  nested list, ``legal_actions`` a list of column numbers in the observation, the action
  ``{"column": int, "variant": str = "mini"}`` (one required field, one with a default).
* ``rooms``: the legal moves (ints) listed in the observation's ``metadata``, their names given by
  the action field's description (``"0: north, 1: south, ..."``).
* ``echo``: an MCP environment in the style of OpenEnv's echo env (``MCPEnvironment`` with FastMCP
  tools ``echo``, ``add`` and ``shutdown``, which stops the server mid-episode).
* ``garbled``: speaks OpenEnv's wire format (``/schema``, WebSocket ``reset``/``step``) but the
  answer to a step after ``reset(seed=k)`` has the garbled field ``GARBLED[k]`` (a reward that is
  not a number, an observation that is not an object, ``done`` missing, NaN, a huge string...).
"""

from __future__ import annotations

import socket
import sys
import time
from typing import Literal


def walk(sock: socket.socket) -> None:
    import uvicorn
    from openenv.core import Action, Environment, Observation, State, create_fastapi_app

    class Move(Action):
        move: Literal["left", "right", "wait"]

    class Place(Observation):
        position: int = 0
        goal: int = 0

    class Walk(Environment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self):
            super().__init__()
            self.position, self.goal, self._state = 0, 2, State()

        def reset(self, seed=None, episode_id=None, **kwargs):
            self.position, self.goal = 0, 2 + (seed or 0) % 3
            return Place(position=0, goal=self.goal)

        def step(self, action, timeout_s=None, **kwargs):
            if action.move == "wait":
                time.sleep(300)
            self.position += 1 if action.move == "right" else -1
            done = self.position == self.goal
            return Place(position=self.position, goal=self.goal, reward=1.0 if done else 0.0, done=done)

        @property
        def state(self):
            return self._state

    app = create_fastapi_app(Walk, Move, Place, max_concurrent_envs=8)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


def garbage(sock: socket.socket) -> None:
    from websockets.sync.server import serve

    def answer(connection):
        for _ in connection:
            connection.send("this is not JSON {")

    with serve(answer, sock=sock) as server:
        server.serve_forever()


def drops(sock: socket.socket) -> None:
    import uvicorn
    from openenv.core import Action, Environment, Observation, State, create_fastapi_app
    from pydantic import Field

    class Drop(Action):
        column: int
        variant: str = "mini"

    class Board(Observation):
        board: list[list[int]] = Field(default_factory=list)
        legal_actions: list[int] = Field(default_factory=list)

    class Drops(Environment):
        """Drop pieces into 3 columns of height 2; the game ends when the board is full, with
        reward 1 if the last piece went into column 2."""

        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self):
            super().__init__()
            self.board, self._state = [[0] * 3 for _ in range(2)], State()

        def _observation(self, reward=0.0, done=False):
            legal = [c for c in range(3) if self.board[0][c] == 0]
            return Board(board=[row[:] for row in self.board], legal_actions=legal, reward=reward, done=done)

        def reset(self, seed=None, episode_id=None, **kwargs):
            self.board = [[0] * 3 for _ in range(2)]
            return self._observation()

        def step(self, action, timeout_s=None, **kwargs):
            row = 1 if self.board[1][action.column] == 0 else 0
            self.board[row][action.column] = 1
            done = all(self.board[0])
            return self._observation(1.0 if done and action.column == 2 else 0.0, done)

        @property
        def state(self):
            return self._state

    app = create_fastapi_app(Drops, Drop, Board, max_concurrent_envs=8)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


def rooms(sock: socket.socket) -> None:
    import uvicorn
    from openenv.core import Action, Environment, Observation, State, create_fastapi_app
    from pydantic import Field

    class Go(Action):
        direction: int = Field(description="0: north, 1: south, 2: east, 3: west")

    class Room(Observation):
        room: str = ""

    class Rooms(Environment):
        """From the hall, east leads to the goal; the hall has no door south."""

        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self):
            super().__init__()
            self._state = State()

        def reset(self, seed=None, episode_id=None, **kwargs):
            return Room(room="hall", metadata={"legal_actions": [0, 2, 3]})

        def step(self, action, timeout_s=None, **kwargs):
            done = action.direction == 2
            return Room(room="goal" if done else "hall", reward=float(done), done=done,
                        metadata={"legal_actions": [0, 2, 3]})

        @property
        def state(self):
            return self._state

    app = create_fastapi_app(Rooms, Go, Room, max_concurrent_envs=8)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


def echo(sock: socket.socket) -> None:
    import os
    import threading

    import uvicorn
    from fastmcp import FastMCP
    from openenv.core import (
        CallToolAction,
        CallToolObservation,
        MCPEnvironment,
        Observation,
        State,
        create_fastapi_app,
    )

    class Echo(MCPEnvironment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self):
            mcp = FastMCP("echo")

            @mcp.tool
            def echo(message: str) -> str:
                """Echo the message back.

                Args:
                    message: the message to echo
                """
                return message

            @mcp.tool
            def add(a: int, b: int) -> int:
                """Add two integers.

                Args:
                    a: the first number
                    b: the second number
                """
                return a + b

            @mcp.tool
            def shutdown() -> str:
                """Stop the server (a server that dies mid-episode)."""
                threading.Timer(0.05, os._exit, args=(0,)).start()
                return "bye"

            super().__init__(mcp)
            self._state = State()

        def reset(self, seed=None, episode_id=None, **kwargs):
            return Observation(done=False, reward=0.0, metadata={"message": "Say hello with the echo tool."})

        def _step_impl(self, action, timeout_s=None, **kwargs):
            return Observation(done=False, reward=0.0, metadata={"error": "use the tools"})

        @property
        def state(self):
            return self._state

    app = create_fastapi_app(Echo, CallToolAction, CallToolObservation, max_concurrent_envs=8)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


_GOOD = {"observation": {"text": "you stand still", "metadata": {}}, "reward": 0.0, "done": False}
#: The step answers of the ``garbled`` server, by the seed of the episode's reset.
GARBLED = [
    {**_GOOD, "reward": "abc"},
    {**_GOOD, "observation": ["not", "an", "object"]},
    {k: v for k, v in _GOOD.items() if k != "done"},
    {**_GOOD, "reward": float("nan")},
    {**_GOOD, "observation": {"text": "x" * 2_000_000}},
    {**_GOOD, "done": "yes"},
    {**_GOOD, "metadata": "not an object"},
    {**_GOOD, "reward": float("inf")},
    ["not", "an", "object"],
]


def garbled(sock: socket.socket) -> None:
    import json

    from websockets.sync.server import serve

    schema = {"action": {"type": "object", "properties": {"move": {"enum": ["left", "right"]}},
                         "required": ["move"]}}

    def http(connection, request):
        if request.path == "/schema":
            return connection.respond(200, json.dumps(schema))
        return None  # the WebSocket session (/ws)

    def answer(connection):
        seed = 0
        for message in connection:
            message = json.loads(message)
            if message["type"] == "reset":
                seed = message["data"].get("seed", 0)
                data = _GOOD
            elif message["type"] == "step":
                data = GARBLED[seed % len(GARBLED)]
            else:
                continue
            connection.send(json.dumps({"type": "observation", "data": data}))

    with serve(answer, sock=sock, process_request=http, max_size=None) as server:
        server.serve_forever()


if __name__ == "__main__":
    servers = {"walk": walk, "garbage": garbage, "garbled": garbled, "drops": drops, "rooms": rooms, "echo": echo}
    listening = socket.create_server(("127.0.0.1", 0))  # bound here: no other process can take it
    print(f"serving at http://127.0.0.1:{listening.getsockname()[1]}", flush=True)
    servers[sys.argv[1]](listening)
