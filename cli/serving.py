"""``textgym serve ENV``: a text env served as an OpenEnv env on OpenEnv's own server.

Env kwargs come as for ``textgym train``: the ``[env_kwargs]`` table of a TOML ``--config`` file
(its ``env`` too, when ENV is not given). Everything is checked (the env made once) before the
server listens; then it serves until Ctrl-C.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textgym.cli.errors import CLIError


def run(env: str | None, host: str = "127.0.0.1", port: int = 8000, max_sessions: int = 64,
        config: Path | None = None) -> None:
    from textgym.cli.config import load_toml
    from textgym.cli.envtools import check_env_kwargs, resolve_env
    from textgym.cli.messages import say

    table: dict[str, Any] = load_toml(config) if config is not None else {}
    env = env or table.get("env")
    if not env:
        raise CLIError("give the env to serve (ENV, or env = ... in the --config file)")
    env_kwargs = table.get("env_kwargs") or {}
    if not isinstance(env_kwargs, dict):
        raise CLIError(f"{config}: 'env_kwargs' must be a table")
    env_id = resolve_env(env)
    if env_id.startswith("openenv:"):
        raise CLIError("textgym serve serves a text env of this machine, not another server's")
    if not 0 < port < 65536:
        raise CLIError(f"--port must be in 1..65535, got {port}")
    check_env_kwargs(env_id, env_kwargs)
    try:
        from textgym import serve
    except ImportError as exc:
        raise CLIError(str(exc)) from None
    where = "all interfaces" if host in ("0.0.0.0", "::") else host
    say(f"serving {env_id} as an OpenEnv env at http://{host}:{port} ({where}; at most {max_sessions} "
        f"sessions); connect with textgym.make('openenv:http://{host}:{port}'). Ctrl-C stops.")
    serve.run(env_id, env_kwargs, host=host, port=port, max_sessions=max_sessions)
