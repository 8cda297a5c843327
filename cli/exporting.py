"""``textgym export``: a trained checkpoint as a folder any Hugging Face tool loads, optionally
pushed to the hub.

Without ``--merge`` the folder is the LoRA adapter in PEFT format (``adapter_config.json`` names
the base model's hub id), with the tokenizer, ``policy.json`` (the policy settings) and a model
card (``README.md``: env, algorithm, episodes, the run's evaluation, how to load it). With
``--merge`` the adapter is merged into the base weights (PEFT ``merge_and_unload``): a standard
model folder for ``AutoModelForCausalLM.from_pretrained``. Either loads with
``textgym.Policy.load(folder)``.

Every check (the run or checkpoint, ``--out``, the hub for ``--push-to-hub``) comes before
anything is loaded or written. The folder is written under a temporary name of the command's own
(``tempfile.mkdtemp`` beside ``--out``) and moved into place; the command removes nothing it did
not create:

* a new ``--out`` is that folder renamed;
* an empty ``--out`` folder is filled (the folder itself stays the user's);
* a non-empty ``--out`` is refused, except with ``--force`` when it is an earlier export (it holds
  :data:`EXPORT_MARKER`, written by this command): it is then swapped for the new one;
* a symlink ``--out`` is followed: the export goes into the link's target, the link stays.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from textgym.cli.errors import CLIError, os_error_reason
from textgym.cli.evaluation import find_checkpoint
from textgym.cli.messages import say
from textgym.cli.modelcheck import check_option_names

from textgym import run_folder

#: The file that marks a folder as written by ``textgym export`` (``--force`` replaces only such a
#: folder); it is not uploaded by ``--push-to-hub``.
EXPORT_MARKER = ".textgym-export"
#: How long the hub may take to say who the token belongs to before it counts as unreachable.
HUB_CHECK_SECONDS = 10.0


def run(source: Path, out: Path, merge: bool = False, push_to_hub: str | None = None,
        force: bool = False, device: str | None = None, dtype: str | None = None) -> None:
    """The ``export`` command (see the module docstring)."""
    check_option_names(device, dtype, None)
    checkpoint, run_dir = find_checkpoint(source)
    record = _policy_record(checkpoint)
    target = out.resolve() if out.is_symlink() else out  # a link is followed, never replaced
    _check_out(target, force, checkpoint, run_dir, named=out)
    if push_to_hub is not None:
        _check_hub(push_to_hub)
    facts = training_facts(checkpoint, run_dir)
    lora = bool(record.get("lora"))
    if merge and not lora:
        say("textgym: the checkpoint holds full weights: nothing to merge, exporting the model")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".export", dir=target.parent))
    except OSError as exc:
        raise CLIError(f"cannot export to {out}: {os_error_reason(exc)}") from exc
    try:
        (tmp / EXPORT_MARKER).write_text(
            json.dumps({"written_by": "textgym export", "checkpoint": str(checkpoint)}) + "\n",
            encoding="utf-8")
        if lora and not merge:
            _write_adapter(checkpoint, record, tmp)
        else:
            record = _write_model(checkpoint, tmp, device, dtype)
        from textgym.policy.persistence import CARD_FILE, model_card, write_record

        write_record(tmp, record)
        model_card(record, location=str(out), training=facts,
                   repo_id=push_to_hub).save(tmp / CARD_FILE)
        _move_into_place(tmp, target)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CLIError(f"cannot export to {out}: {os_error_reason(exc)}") from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    kind = "adapter" if lora and not merge else "merged model" if lora else "model"
    say(f"textgym: exported the {kind} of {checkpoint} to {out}")
    if push_to_hub is not None:
        url = _push(out, push_to_hub)
        say(f"textgym: pushed {out} to {url}")


def is_export(folder: Path) -> bool:
    """Whether ``folder`` was written by ``textgym export`` (it holds :data:`EXPORT_MARKER`)."""
    return (folder / EXPORT_MARKER).is_file() and not (folder / run_folder.STATE).exists()


def _move_into_place(tmp: Path, target: Path) -> None:
    """Put the written folder ``tmp`` at ``target`` (see the module docstring); an earlier export
    waits in a temporary folder of its own until the new one is in place."""
    if not target.exists():
        tmp.rename(target)
        return
    if not is_export(target):  # an empty folder of the user's (checked): filled, marker first
        for entry in sorted(tmp.iterdir(), key=lambda p: p.name != EXPORT_MARKER):
            entry.rename(target / entry.name)
        tmp.rmdir()
        return
    holder = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".replaced", dir=target.parent))
    earlier = holder / target.name
    target.rename(earlier)
    try:
        tmp.rename(target)
    except OSError:
        earlier.rename(target)
        holder.rmdir()
        raise
    shutil.rmtree(holder, ignore_errors=True)


def _policy_record(checkpoint: Path) -> dict[str, Any]:
    from textgym.policy.persistence import read_record

    try:
        return read_record(checkpoint)
    except FileNotFoundError:
        raise CLIError(f"checkpoint {checkpoint} has no policy.json (written by an older textgym): "
                       "continue its run once (textgym train --resume RUN) to write a portable "
                       "checkpoint") from None
    except (OSError, ValueError) as exc:
        raise CLIError(f"unreadable policy.json in {checkpoint}: {exc}") from exc


def _check_out(out: Path, force: bool, checkpoint: Path, run_dir: Path | None,
               named: Path | None = None) -> None:
    """Refuse an ``--out`` that would lose something: a file, a folder with contents (without
    ``--force``; with it, only an earlier export is replaced), the run or checkpoint itself.
    ``out`` is where the export goes (a symlink's target), ``named`` what the user wrote."""
    named = named or out
    target = out.resolve()
    for protected in filter(None, (checkpoint, run_dir)):
        protected = protected.resolve()
        if target == protected or target in protected.parents or protected in target.parents:
            raise CLIError(f"--out {named} is inside or around {protected}: export to a folder of "
                           "its own")
    from textgym.cli.runs import is_run_folder

    for folder in (target, *target.parents):  # a run's next save would replace what is written there
        if folder.is_dir() and is_run_folder(folder):
            raise CLIError(f"--out {named} is {'' if folder == target else 'inside '}the run folder {folder}: "
                           "export to a folder of its own")
    if out.exists() and not out.is_dir():
        raise CLIError(f"--out {named} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise CLIError(f"--out {named} exists and is not empty: use --force to replace an "
                           "earlier export, or another folder")
        if not is_export(out):
            raise CLIError(f"--force replaces only an earlier export (a folder textgym export wrote, "
                           f"holding {EXPORT_MARKER}); {named} is not one: remove it yourself or "
                           "export to another folder")
    ancestor = out.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise CLIError(f"cannot create {named}: {ancestor} is a file, not a folder")


def training_facts(checkpoint: Path, run_dir: Path | None) -> dict[str, Any]:
    """What the model card says about the run: env, algorithm, episodes, updates and the final
    evaluation from ``summary.json`` when it belongs to this checkpoint."""
    from textgym.trainers import read_checkpoint

    state = read_checkpoint(checkpoint)
    facts: dict[str, Any] = {
        "env": state.get("env_id"),
        "algorithm": state.get("algorithm"),
        "episodes": state.get("episodes_seen"),
        "updates": state.get("update_count"),
    }
    summary_file = run_dir / run_folder.SUMMARY if run_dir is not None else None
    if summary_file is not None and summary_file.is_file():
        try:
            summary = json.loads(summary_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            summary = {}
        evaluation = summary.get("eval")
        if isinstance(evaluation, dict) and summary.get("episodes") == state.get("episodes_seen"):
            stderr = evaluation.get("return_stderr")
            facts["evaluation"] = (
                f"mean return {evaluation.get('return_mean'):.3f}"
                + (f" ± {stderr:.3f}" if isinstance(stderr, (int, float)) else "")
                + f" over {evaluation.get('episodes')} held-out episodes (greedy)")
    return {key: value for key, value in facts.items() if value is not None}


def _write_adapter(checkpoint: Path, record: dict[str, Any], target: Path) -> None:
    """The adapter files as they are (PEFT format) and the tokenizer into ``target``; the
    tokenizer carries the policy's own chat template if it has one (so that
    ``apply_chat_template`` elsewhere renders the prompts it was trained on)."""
    from transformers import AutoTokenizer

    from textgym.policy.persistence import weights_folder

    adapter = weights_folder(checkpoint, lora=True)
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        shutil.copy2(adapter / name, target / name)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint / "tokenizer")
    if record.get("chat_template"):
        tokenizer.chat_template = record["chat_template"]
    tokenizer.save_pretrained(target)


def _write_model(checkpoint: Path, target: Path, device: str | None,
                 dtype: str | None) -> dict[str, Any]:
    """The checkpoint's policy with its adapter merged into the weights (PEFT
    ``merge_and_unload``), saved as a model folder with its tokenizer (carrying the policy's own
    chat template if it has one); returns its record."""
    from textgym.cli.modelcheck import check_model

    from textgym.policy import Policy
    from textgym.policy.persistence import read_record, saved_record

    name = read_record(checkpoint)["name"]
    if name is not None:
        check_model(name, device, dtype)
    try:
        policy = Policy.load(checkpoint, device=device, dtype=dtype)
    except Exception as exc:
        raise CLIError(f"cannot load checkpoint {checkpoint}: {exc}") from exc
    if policy.is_lora:
        policy.model = policy.model.merge_and_unload()
    policy.model.save_pretrained(target, safe_serialization=True)
    if policy.chat_template:
        policy.tokenizer.chat_template = policy.chat_template
    policy.tokenizer.save_pretrained(target)
    return saved_record(policy)


# --- the hub -------------------------------------------------------------------------------------


def _check_hub(repo_id: str) -> None:
    """Before anything is written: the repository name is valid, the hub is reachable and the
    token known to it (CLIError, one line, within :data:`HUB_CHECK_SECONDS`)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, LocalTokenNotFoundError
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    from textgym import models

    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise CLIError(f"--push-to-hub {repo_id!r} is not a hub repository id "
                       f"({' '.join(str(exc).split())})") from None
    if models.hub_offline():
        raise CLIError("cannot push to the hub: HF_HUB_OFFLINE is set (unset it, or export "
                       "without --push-to-hub)")
    endpoint = models.hub_endpoint()
    answered, error = models.ask_hub(lambda: HfApi(endpoint=endpoint).whoami(), HUB_CHECK_SECONDS)
    if not answered:
        raise CLIError(f"cannot push to the hub: no answer from {endpoint} within "
                       f"{HUB_CHECK_SECONDS:g} s")
    if error is None:
        return
    if isinstance(error, LocalTokenNotFoundError):
        raise CLIError("cannot push to the hub: not logged in (run `hf auth login` or set HF_TOKEN)")
    if isinstance(error, HfHubHTTPError) and getattr(error.response, "status_code", None) == 401:
        raise CLIError(f"cannot push to the hub: {endpoint} refused the token (log in again with "
                       "`hf auth login`)")
    raise CLIError(f"cannot push to the hub: {endpoint} cannot be reached "
                   f"({type(error).__name__}: {' '.join(str(error).split())})")


def _push(folder: Path, repo_id: str) -> str:
    """Create ``repo_id`` (if needed) and upload ``folder`` to it; returns the repository URL."""
    from huggingface_hub import HfApi

    from textgym import models

    api = HfApi(endpoint=models.hub_endpoint())
    try:
        url = api.create_repo(repo_id, exist_ok=True)
        api.upload_folder(repo_id=repo_id, folder_path=folder, commit_message="textgym export",
                          ignore_patterns=[EXPORT_MARKER])
    except Exception as exc:
        raise CLIError(f"exported to {folder}, but the push to {repo_id} failed: "
                       f"{type(exc).__name__}: {' '.join(str(exc).split())}") from exc
    return str(url)
