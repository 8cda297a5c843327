"""``textgym serve ENV``: a text env served as an OpenEnv env on OpenEnv's own server.

Env kwargs come as for ``textgym train``: the ``[env_kwargs]`` table of a TOML ``--config`` file
(its ``env`` too, when ENV is not given). Everything is checked (the env made once) before the
server listens (the port too: one in use is one error line); then it serves until Ctrl-C. A host
other than the loopback is warned about: anyone who reaches the port drives the env, unless
``--token`` is given.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from textgym.cli.errors import CLIError, os_error_reason


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach ``host`` (``127.0.0.1``, ``::1``, ``localhost``).

    Example:
        >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0")
        (True, True, False)
    """
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False


def run(env: str | None, host: str = "127.0.0.1", port: int = 8000, max_sessions: int = 64,
        config: Path | None = None, step_timeout: float | None = None, token: str | None = None) -> None:
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
    if not 0 <= port < 65536:
        raise CLIError(f"--port must be in 0..65535 (0: a free port, chosen by the system), got {port}")
    if step_timeout is not None and not step_timeout > 0:
        raise CLIError(f"--step-timeout must be > 0 seconds, got {step_timeout:g}")
    if token is not None and not token.strip():
        raise CLIError("--token is empty")
    check_env_kwargs(env_id, env_kwargs)
    try:
        from textgym import serve
    except ImportError as exc:
        raise CLIError(str(exc)) from None
    step_timeout = step_timeout or serve.DEFAULT_STEP_TIMEOUT
    try:
        sock = serve.listen(host, port)
    except OSError as exc:
        raise CLIError(f"cannot listen on {host}:{port}: {os_error_reason(exc)}") from None
    port = sock.getsockname()[1]  # the one the system chose for --port 0
    if not is_loopback(host):
        say(f"textgym: warning: serving on {host}: anyone who can reach port {port} can drive the env "
            + ("(requests need the --token; it travels unencrypted over http)" if token else
               "(there is no authentication: give --token, or serve on 127.0.0.1)"), err=True)
    where = "all interfaces" if host in ("0.0.0.0", "::") else host
    say(f"serving {env_id} as an OpenEnv env at http://{host}:{port} ({where}; at most {max_sessions} "
        f"sessions, {step_timeout:g} s per step{'; token required' if token else ''}); connect with "
        f"textgym.make('openenv:http://{host}:{port}'). Ctrl-C stops.")
    serve.run(env_id, env_kwargs, max_sessions=max_sessions, step_timeout=step_timeout, token=token,
              sock=sock)
