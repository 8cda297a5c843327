"""Servers for tests/test_openenv.py, run as ``python tests/openenv_servers.py KIND PORT``.

* ``walk``: an OpenEnv server that is not textgym's (OpenEnv's ``create_app``): a walk on a line
  with a typed action ``{"move": "left" | "right" | "wait"}`` and an observation without a text
  field (``position``, ``goal``); ``"wait"`` sleeps for minutes (a slow server).
* ``garbage``: a WebSocket server that answers every message with text that is not JSON (a
  malformed reply); plain ``websockets``, since OpenEnv's server never sends such a thing.
* ``garbled``: speaks OpenEnv's wire format (``/schema``, WebSocket ``reset``/``step``) but the
  answer to a step after ``reset(seed=k)`` has the garbled field ``GARBLED[k]`` (a reward that is
  not a number, an observation that is not an object, ``done`` missing, NaN, a huge string...).
"""

from __future__ import annotations

import sys
import time
from typing import Literal


def walk(port: int) -> None:
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
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def garbage(port: int) -> None:
    from websockets.sync.server import serve

    def answer(connection):
        for _ in connection:
            connection.send("this is not JSON {")

    with serve(answer, "127.0.0.1", port) as server:
        server.serve_forever()


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


def garbled(port: int) -> None:
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

    with serve(answer, "127.0.0.1", port, process_request=http, max_size=None) as server:
        server.serve_forever()


if __name__ == "__main__":
    {"walk": walk, "garbage": garbage, "garbled": garbled}[sys.argv[1]](int(sys.argv[2]))
