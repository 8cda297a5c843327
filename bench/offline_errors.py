"""How long the errors of an unreachable model hub or env server take to come: the timings the
tests leave out (they check what stands behind them instead: no download attempted, the hub
asked once with ``HUB_PROBE_SECONDS``, the client's timeout ending the wait).

* ``hub_offline``: ``models.load`` of an uncached hub id with ``HF_HUB_OFFLINE=1`` (the hub is
  not asked);
* ``hub_refused``: the same, the hub's endpoint a loopback port nobody listens on (asked once,
  refused at once);
* ``hub_silent``: the same, the endpoint a loopback port that accepts and never answers (the
  probe's bound, ``textgym.models.HUB_PROBE_SECONDS``, ends it);
* ``cli_offline``: ``textgym train bandit --model gpt2`` with ``HF_HUB_OFFLINE=1``, a process of
  its own (the command's imports included);
* ``openenv_step_timeout``: a step of an OpenEnv server that sleeps for minutes
  (``tests/openenv_servers.py walk``) with ``step_timeout=1``: the timeout plus the client's
  own overhead.

Each is timed ``--repeats`` times (the first run of a process includes its imports); the median
and the range are printed (and written with ``--json``).

Usage:
    python bench/offline_errors.py --json bench/results/offline_errors.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def _timed(run: Callable[[], object], repeats: int) -> dict[str, float]:
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - started)
    return {"median_s": statistics.median(seconds), "min_s": min(seconds), "max_s": max(seconds)}


def _load_fails(hub_id: str) -> None:
    from textgym import models

    try:
        models.load(hub_id, device="cpu")
    except models.ModelError:
        return
    raise SystemExit(f"{hub_id} loaded: the hub was reachable, nothing was measured")


def _with_endpoint(endpoint: str | None, run: Callable[[], None]) -> Callable[[], None]:
    """``run`` with the hub at ``endpoint`` (``None``: HF_HUB_OFFLINE=1) and an empty hub cache."""
    from huggingface_hub import constants

    def inside() -> None:
        saved = (constants.ENDPOINT, constants.HUGGINGFACE_CO_URL_TEMPLATE, constants.HF_HUB_CACHE,
                 dict(os.environ))
        with tempfile.TemporaryDirectory() as cache:
            constants.HF_HUB_CACHE = os.environ["HF_HUB_CACHE"] = cache
            if endpoint is None:
                os.environ["HF_HUB_OFFLINE"] = "1"
            else:
                os.environ.pop("HF_HUB_OFFLINE", None)
                os.environ["HF_ENDPOINT"] = constants.ENDPOINT = endpoint
                constants.HUGGINGFACE_CO_URL_TEMPLATE = endpoint + "/{repo_id}/resolve/{revision}/{filename}"
            try:
                run()
            finally:
                (constants.ENDPOINT, constants.HUGGINGFACE_CO_URL_TEMPLATE, constants.HF_HUB_CACHE,
                 environ) = saved
                os.environ.clear()
                os.environ.update(environ)

    return inside


def _cli_offline() -> None:
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": folder}
        out = subprocess.run([sys.executable, "-m", "textgym.cli", "train", "bandit", "--model", "gpt2",
                              "--out", str(Path(folder) / "run")], env=env, capture_output=True,
                             text=True, timeout=600, check=False)
        if out.returncode == 0 or "not in the local Hugging Face cache" not in out.stderr:
            raise SystemExit(f"unexpected: {out.returncode} {out.stderr[-500:]}")


def _openenv_step_timeout(repeats: int) -> dict[str, float]:
    from test_openenv import helper

    import textgym
    from textgym.remote import OpenEnvError

    server = helper("walk").wait()
    try:
        def one_step() -> None:
            env = textgym.make(f"openenv:{server.url}", step_timeout=1.0)
            try:
                env.reset(seed=0)
                try:
                    env.step("wait")
                except OpenEnvError:
                    return
                raise SystemExit("the slow server answered")
            finally:
                env.close()

        return _timed(one_step, repeats)
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()

    with socket.socket() as refused:  # a free port, closed again: connections are refused
        refused.bind(("127.0.0.1", 0))
        refused_url = f"http://127.0.0.1:{refused.getsockname()[1]}"
    silent = socket.socket()  # accepts connections (the kernel's backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    silent_url = f"http://127.0.0.1:{silent.getsockname()[1]}"

    results = {
        "hub_offline": _timed(_with_endpoint(None, lambda: _load_fails("gpt2")), args.repeats),
        "hub_refused": _timed(_with_endpoint(refused_url, lambda: _load_fails("gpt2")), args.repeats),
        "hub_silent": _timed(_with_endpoint(silent_url, lambda: _load_fails("gpt2")), args.repeats),
        "cli_offline": _timed(_cli_offline, args.repeats),
        "openenv_step_timeout": _openenv_step_timeout(args.repeats),
    }
    silent.close()
    for name, timing in results.items():
        print(f"{name:22s} median {timing['median_s']:.3f} s  (min {timing['min_s']:.3f}, "
              f"max {timing['max_s']:.3f}, {args.repeats} runs)")
    if args.json:
        args.json.write_text(json.dumps({"repeats": args.repeats, **results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
