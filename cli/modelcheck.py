"""Check a ``--model`` value before loading it, so a typo fails in a second, not after the
hub client's minute of retries."""

from __future__ import annotations

import difflib
import os
import socket
from pathlib import Path
from urllib.parse import urlparse

from textgym.cli.errors import CLIError


def _hub_reachable(timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def _in_hub_cache(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - comes with transformers
        return False
    found = try_to_load_from_cache(repo_id, "config.json")
    return isinstance(found, str)


def check_model(name: str) -> None:
    """Raise CLIError unless ``name`` is a registered model, a model folder, a cached hub id,
    or a hub id while the hub is reachable."""
    from textgym import models

    if name in models.REGISTRY:
        return
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise CLIError(f"model folder {name} has no config.json (not a saved model)")
        return
    names = ", ".join(models.REGISTRY)
    looks_like_path = name.startswith((".", "/", "~")) or path.suffix or name.count("/") > 1
    if looks_like_path:
        raise CLIError(f"model folder {name} does not exist (registered models: {names})")
    if "/" not in name:
        close = difflib.get_close_matches(name, list(models.REGISTRY), n=3, cutoff=0.5)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise CLIError(
            f"unknown model {name!r}.{hint} Give a registered name ({names}), "
            f"a model folder or a Hugging Face hub id (org/name)"
        )
    if _in_hub_cache(name) or _hub_reachable():
        return
    raise CLIError(
        f"model {name!r} is not in the local Hugging Face cache and the hub is unreachable; "
        f"use a registered name ({names}) or a local folder"
    )
