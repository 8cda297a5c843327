"""One process of the 2-process test of the TRL adapter (started by torchrun, see test_trl_adapter.py).

Usage: ``python tests/trl_worker.py OUT_DIR``. Runs ``examples/trl_grpo.py --quick`` (the random
tiny model, 2 steps) with one more reward: the random model never names a valid action, so the
env return alone ties within every group and GRPO would have nothing to learn; an arbitrary
token-level reward that varies between samples gives the update a signal. Each rank writes the
example's summary and ``weights-rank<R>.json`` (checksum of the trained weights, largest LoRA B
entry: B starts at zero).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def even_tokens(prompts, completions, completion_ids, **kwargs) -> list[float]:
    return [sum(t % 2 == 0 for t in ids) / max(1, len(ids)) for ids in completion_ids]


def main() -> None:
    out = Path(sys.argv[1])
    spec = importlib.util.spec_from_file_location("trl_grpo_example", ROOT / "examples" / "trl_grpo.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    trainer = example.main(["--quick", "--summary-dir", str(out), "--output-dir", str(out / "trl")],
                           extra_reward_funcs=(even_tokens,))

    from textgym import distributed

    model = trainer.accelerator.unwrap_model(trainer.model)
    trained = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    rank = trainer.accelerator.process_index
    (out / f"weights-rank{rank}.json").write_text(json.dumps({
        "checksum": distributed.checksum([p for _, p in trained]),
        "lora_b_max": max(float(p.detach().abs().max()) for name, p in trained if "lora_B" in name)}))


if __name__ == "__main__":
    main()
