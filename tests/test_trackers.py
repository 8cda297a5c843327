"""``report_to``: trackio and wandb (the real packages, offline) get every update's metrics and the
transcripts as a table; a tracker that is not installed is one clear error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from textgym.trainers.reporting.trackers import check_report_to, parse_report_to

# Writes two updates' metrics and one transcript table through MetricsWriter in a fresh process
# (trackio reads TRACKIO_DIR when imported), then prints what trackio stored.
WRITE = """
import json, sys
from textgym.trainers.reporting.metrics import MetricsWriter
run, trackers = sys.argv[1], sys.argv[2].split(",")
record = {"source": "train", "update": 2, "index": 0, "return": 1.0, "steps": [
    {"observation": "Color: red.", "answer": "cat", "parse": {"parser": "keyword", "valid": True, "action": "cat"},
     "reward": 1.0, "reward_terms": None, "logprob": -0.25}]}
with MetricsWriter(run, tensorboard=False, trackers=trackers, run_config={"lr": 0.5}) as writer:
    writer.write({"update": 1, "return_mean": 0.25, "top_answer": "cat", "samples": []})
    writer.write({"update": 2, "return_mean": 0.75, "top_answer": "cat", "samples": []})
    writer.log_transcripts([record], 2)
if "trackio" in trackers:
    from trackio.sqlite_storage import SQLiteStorage
    print("LOGS " + json.dumps(SQLiteStorage.get_logs("textgym-test", "run"), default=str))
"""


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    """The folder and printout of one writing process (one start-up for both trackers), reporting
    to those installed."""
    folder = tmp_path_factory.mktemp("trackers")
    return folder, write_through(folder, ",".join(name for name in ("trackio", "wandb") if installed(name)))


def write_through(tmp_path: Path, trackers: str) -> str:
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio"), "TRACKIO_PROJECT": "textgym-test",
           "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_PROJECT": "textgym-test",
           "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"), "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache")}
    done = subprocess.run([sys.executable, "-c", WRITE, str(tmp_path / "run"), trackers], env=env,
                          capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def installed(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


@pytest.mark.skipif(not installed("trackio"), reason="trackio is not installed (pip install 'textgym[trackio]')")
def test_trackio_gets_the_metrics_and_a_transcripts_table_locally(reported):
    tmp_path, printed = reported
    logs = json.loads(next(line[5:] for line in printed.splitlines() if line.startswith("LOGS ")))
    scalars = [(int(log["step"]), log["return_mean"]) for log in logs if "return_mean" in log]
    assert scalars == [(1, 0.25), (2, 0.75)]
    table = next(log["transcripts"] for log in logs if "transcripts" in log)
    (row,) = table["_value"]
    assert (row["source"], row["update"], row["observation"], row["answer"], row["valid"], row["logprob"]) == \
        ("train", 2, "Color: red.", "cat", True, -0.25)
    assert (tmp_path / "trackio" / "textgym-test.db").is_file()  # local: nothing left the machine


def wandb_records(path: Path):
    """The protobuf records of a ``.wandb`` file (LevelDB log format: 32 KiB blocks of chunks with
    a 7-byte header; the file starts with a 7-byte W&B header)."""
    from wandb.proto import wandb_internal_pb2

    data, position, pending = path.read_bytes(), 7, b""
    while position + 7 <= len(data):
        if 32768 - position % 32768 < 7:  # a block's tail too short for a header is padding
            position += 32768 - position % 32768
            continue
        length, kind = int.from_bytes(data[position + 4:position + 6], "little"), data[position + 6]
        pending += data[position + 7:position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # a FULL record, or the LAST chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


@pytest.mark.skipif(not installed("wandb"), reason="wandb is not installed (pip install 'textgym[wandb]')")
def test_wandb_offline_gets_the_metrics_and_a_transcripts_table(reported):
    tmp_path, _ = reported
    (folder,) = (tmp_path / "run" / "wandb").glob("offline-run-*")  # WANDB_MODE=offline, in the run folder
    (log,) = folder.glob("run-*.wandb")
    history = [{item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
               for record in wandb_records(log) if record.WhichOneof("record_type") == "history"]
    assert [(h["_step"], h["return_mean"]) for h in history] == [(1, 0.25), (2, 0.75)]
    assert "top_answer" not in history[0]  # scalars only, as TensorBoard gets them
    assert history[1]["transcripts/_type"] == "table-file" and history[1]["transcripts/nrows"] == 1
    (table,) = folder.glob("files/media/table/transcripts_2_*.table.json")
    content = json.loads(table.read_text())
    assert content["columns"][:3] == ["source", "update", "episode"]
    assert content["data"][0][5:7] == ["Color: red.", "cat"]


def test_report_to_names(monkeypatch):
    assert parse_report_to(" TensorBoard ,wandb,wandb") == ("tensorboard", "wandb")
    assert parse_report_to("none") == parse_report_to("") == ()
    with pytest.raises(ValueError, match="unknown tracker 'comet'"):
        parse_report_to("comet")
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ValueError, match=r"pip install 'textgym\[wandb\]'"):
        check_report_to("tensorboard,wandb")
