"""The TRL adapter: TRL's GRPOTrainer trains on textgym envs through a rollout_func (CPU, tiny model)."""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")

WORKER = str(Path(__file__).with_name("trl_worker.py"))


def even_tokens(prompts, completions, completion_ids, **kwargs):
    # The random model's answers are all invalid, so the env return alone ties within a group
    # and GRPO has nothing to learn; an arbitrary token-level reward that varies between samples
    # gives the update a signal, so the test can check that TRL really trained the weights.
    return [sum(t % 2 == 0 for t in ids) / max(1, len(ids)) for ids in completion_ids]


@pytest.fixture(scope="module")
def grpo_trainer(_tiny_loaded):
    """TRL's own GRPOTrainer around a copy of the tiny model (made once: a few seconds), for the
    tests that hand it to the rollout as TRL does."""
    from textgym.trainers.trl import make_trl_grpo_trainer

    model, tokenizer = _tiny_loaded
    return make_trl_grpo_trainer(copy.deepcopy(model), tokenizer, "textgym/Bandit-v0", num_prompts=4,
                                 args={"max_steps": 1, "per_device_train_batch_size": 4, "num_generations": 2})


def bandit_prompt(seed: int) -> list[dict]:
    import textgym
    from textgym.trainers.trl import SEED_KEY

    obs, info = textgym.make("textgym/Bandit-v0").reset(seed=seed)
    return [{"role": "system", "content": info["system_prompt"]}, {"role": "user", "content": obs, SEED_KEY: seed}]


def test_trl_grpo_two_steps_on_the_bandit(tiny_model_and_tokenizer):
    from textgym.trainers.trl import make_trl_grpo_trainer

    model, tokenizer = tiny_model_and_tokenizer
    model = copy.deepcopy(model)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = make_trl_grpo_trainer(model, tokenizer, "textgym/Bandit-v0", num_prompts=16, max_new_tokens=4,
                                    extra_reward_funcs=(even_tokens,),
                                    args={"max_steps": 2, "per_device_train_batch_size": 8, "num_generations": 4,
                                              "learning_rate": 1e-3, "max_completion_length": 8})
    trainer.train()
    rollout = trainer.textgym_rollout
    assert trainer.state.global_step == 2
    assert rollout.episodes_played == 16  # 8 completions per step, each one episode
    # TRL passes each start num_generations times in a row: a group, every member from its seed
    groups = [rollout.seeds[i:i + 4] for i in range(0, 16, 4)]
    assert all(len(set(g)) == 1 for g in groups) and len({g[0] for g in groups}) == 4
    assert all(r in (0.0, -1.0, 1.0) for r in rollout.returns)
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logged) == 2
    changed = any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())
    assert changed, "two GRPO steps left every weight unchanged"


def test_a_group_is_played_together_and_multi_turn_masks_env_tokens(grpo_trainer, tiny_model_and_tokenizer,
                                                                    monkeypatch):
    import textgym
    from textgym.trainers.trl import SEED_KEY, PolicySampler, TextgymRollout

    _, tokenizer = tiny_model_and_tokenizer
    model = grpo_trainer.model
    env = textgym.make("textgym/CartPole-v1")
    obs, info = env.reset(seed=5)
    prompt = [{"role": "system", "content": info["system_prompt"]}, {"role": "user", "content": obs, SEED_KEY: 5}]
    rollout = TextgymRollout("textgym/CartPole-v1", tokenizer, max_turns=3, max_new_tokens=3,
                             max_completion_length=200)
    batches = []
    sample = PolicySampler.sample
    monkeypatch.setattr(PolicySampler, "sample", lambda self, contexts, n: batches.append(len(contexts))
                        or sample(self, contexts, n))
    was_training = model.training
    model.train()  # as TRL keeps it while training: the rollout samples in eval mode, then restores it
    try:
        out = rollout([prompt, prompt, prompt], grpo_trainer)
        assert model.training
    finally:
        model.train(was_training)
    # the three episodes of the group: one batched generation per turn, three turns
    assert batches == [3, 3, 3] and rollout.seeds == [5, 5, 5]
    assert len(out["completion_ids"]) == 3 and out["prompt_ids"][0] == out["prompt_ids"][2]
    for completion, logprobs, mask in zip(out["completion_ids"], out["logprobs"], out["env_mask"]):
        assert len(completion) == len(logprobs) == len(mask)
        assert 1 in mask and 0 in mask  # model answers and env observations interleaved
        env_text = tokenizer.decode([t for t, m in zip(completion, mask) if m == 0])
        assert "cart" in env_text.lower() or "pole" in env_text.lower()
        assert all(lp <= 0 for lp, m in zip(logprobs, mask) if m)
    assert out["answer_tokens"] == [sum(mask) for mask in out["env_mask"]]
    assert [completion != out["completion_ids"][0] for completion in out["completion_ids"][1:]] == [True, True]


def test_a_prompt_without_its_seed_is_refused(grpo_trainer, tiny_model_and_tokenizer):
    from textgym.trainers.trl import TextgymRollout

    _, tokenizer = tiny_model_and_tokenizer
    rollout = TextgymRollout("textgym/Bandit-v0", tokenizer)
    prompt = [{"role": "system", "content": "s"}, {"role": "user", "content": "Color: red."}]
    with pytest.raises(ValueError, match="the prompt has no 'textgym_seed'"):
        rollout([prompt], grpo_trainer)


class StandInVLLM:
    """Stands in for TRL's VLLMGeneration (vLLM cannot be installed here): answers every prompt with
    ``answer`` plus the end-of-turn token, with made-up log-probs, and records its calls."""

    mode = "colocate"

    def __init__(self, answer_ids: list[int], eos: int):
        self.answer_ids, self.eos = answer_ids, eos
        self.max_completion_length = 99
        self.calls: list[tuple[int, int]] = []  # (prompts, max tokens) per call

    def generate(self, prompts, images, num_generations, profiler=None):
        assert images is None and num_generations == 1
        self.calls.append((len(prompts), self.max_completion_length))
        completion = (self.answer_ids + [self.eos])[: self.max_completion_length]
        return (prompts, [list(completion) for _ in prompts],
                [[[-0.25] for _ in completion] for _ in prompts], None)


def test_use_vllm_plays_the_episodes_with_trl_vllm_engine(grpo_trainer, tiny_model_and_tokenizer, monkeypatch):
    from textgym.trainers.trl import TextgymRollout

    _, tokenizer = tiny_model_and_tokenizer
    engine = StandInVLLM(tokenizer("dog", add_special_tokens=False)["input_ids"], tokenizer.eos_token_id)
    # TRL's trainer as with use_vllm=True, its engine the stand-in
    monkeypatch.setattr(grpo_trainer, "use_vllm", True)
    monkeypatch.setattr(grpo_trainer, "vllm_generation", engine, raising=False)

    rollout = TextgymRollout("textgym/Bandit-v0", tokenizer, max_new_tokens=6)
    out = rollout([bandit_prompt(0), bandit_prompt(0), bandit_prompt(1)], grpo_trainer)
    # one call for the three episodes, with the adapter's answer length; the engine's own restored
    assert engine.calls == [(3, 6)] and engine.max_completion_length == 99
    expected = engine.answer_ids + [tokenizer.eos_token_id]
    assert out["completion_ids"] == [expected] * 3 and out["env_mask"] == [[1] * len(expected)] * 3
    assert out["logprobs"] == [[-0.25] * len(expected)] * 3
    # "dog" is a valid answer: the env scored it (1 for the cue whose animal is the dog, else 0)
    assert set(out["env_return"]) <= {0.0, 1.0} and len(set(out["env_return"][:2])) == 1


def test_vllm_server_mode_keeps_the_processes_in_lockstep(tiny_model_and_tokenizer):
    from textgym.trainers.trl import VLLMSampler

    engine = StandInVLLM([7, 8], eos=2)
    engine.mode = "server"

    class TwoProcesses:  # the other process has 3 contexts this turn
        num_processes, device = 2, torch.device("cpu")

        @staticmethod
        def gather(count):
            return torch.cat([count, torch.tensor([3])])

    sampler = VLLMSampler(engine, TwoProcesses)
    assert sampler.lockstep
    answers = sampler.sample([[1, 5], [1, 6]], max_new_tokens=4)
    assert engine.calls == [(3, 4)]  # padded to the other process's count: one collective call each
    assert answers == [([7, 8, 2], [-0.25] * 3)] * 2  # the padding's answer dropped
    assert sampler.sample([], max_new_tokens=4, padding=[1, 5]) == [] and engine.calls[-1] == (3, 4)


@pytest.mark.slow  # TRL trains in 2 processes
def test_two_processes_under_torchrun(tmp_path):
    """examples/trl_grpo.py --quick in 2 CPU processes (torchrun, gloo) with TRL's own data parallelism."""
    environ = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                             WORKER, str(tmp_path)], capture_output=True, text=True, env=environ, timeout=300,
                            check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    summaries = [json.loads((tmp_path / f"summary-rank{r}.json").read_text()) for r in range(2)]
    weights = [json.loads((tmp_path / f"weights-rank{r}.json").read_text()) for r in range(2)]
    assert [s["rank"] for s in summaries] == [0, 1] and all(s["world_size"] == 2 for s in summaries)
    assert len({s["pid"] for s in summaries} | {os.getpid()}) == 3  # two processes of their own
    assert all(s["global_step"] == 2 and s["episodes"] == 16 for s in summaries)
    # each step: 4 starts, 2 per process, each played by a group of 4 episodes from its seed
    for step in range(2):
        seeds = [seed for s in summaries for seed in s["seeds"][8 * step:8 * step + 8]]
        assert sorted(seeds.count(seed) for seed in set(seeds)) == [4, 4, 4, 4]
    # both processes trained the same weights (B of LoRA starts at zero: they moved)
    assert weights[0]["checksum"] == weights[1]["checksum"] and weights[0]["lora_b_max"] > 0
    assert summaries[0]["rewards"] == summaries[1]["rewards"]  # TRL gathers the rewards of both


def test_environment_factory_class_is_what_trl_reads():
    from transformers.utils import get_json_schema

    from textgym.trainers.trl import environment_factory

    env = environment_factory("textgym/Bandit-v0")()
    first = env.reset(seed=3, prompt=[{"role": "user", "content": "Play the game."}])  # TRL passes the row
    assert first.endswith(textgym_bandit_observation(3)) and "act tool" in first
    schema = get_json_schema(env.act)["function"]
    assert schema["name"] == "act" and schema["parameters"]["required"] == ["action"]
    assert "cat" in schema["parameters"]["properties"]["action"]["description"]
    assert env.act("cat").endswith("The episode is over.") and env.get_reward() in (0.0, 1.0)
    assert env.act("dog") == "The episode is over."  # nothing changes after the end


def textgym_bandit_observation(seed: int) -> str:
    import textgym

    return textgym.make("textgym/Bandit-v0").reset(seed=seed)[0]


class ScriptedAnswer:
    """A logits processor that makes ``generate`` write ``script`` (token ids) after the prompt,
    whatever the model's own scores: the random tiny model never writes a tool call itself."""

    def __init__(self, script: list[int], prompt_length: int):
        self.script, self.prompt_length = script, prompt_length

    def __call__(self, input_ids, scores):
        step = input_ids.shape[1] - self.prompt_length
        if step < len(self.script):
            forced = torch.full_like(scores, float("-inf"))
            forced[:, self.script[step]] = 0.0
            return forced
        return scores


def test_environment_factory_one_trl_step_with_the_tiny_model(tmp_path, monkeypatch):
    import functools
    import importlib.util

    from transformers import LogitsProcessorList
    from transformers.generation.utils import GenerationMixin

    from textgym.models import load_tokenizer
    from textgym.trainers import trl as adapter

    resets, moves = [], []
    real = adapter.environment_factory

    def counting_factory(env_id, **env_kwargs):
        cls = real(env_id, **env_kwargs)
        reset, act = cls.reset, cls.act

        def counted(self, **kwargs):
            resets.append(kwargs.get("seed"))
            return reset(self, **kwargs)

        @functools.wraps(act)  # TRL reads the tool's schema from its signature and docstring
        def recorded_act(self, action):
            observation = act(self, action)
            moves.append((action, self.get_reward(), observation))
            return observation

        cls.reset, cls.act = counted, recorded_act
        return cls

    # Every turn the model writes one call of the act tool (TRL's Qwen2.5 tool-call format)
    tokenizer = load_tokenizer()
    call = '<tool_call>\n{"name": "act", "arguments": {"action": "cat"}}\n</tool_call>'
    script = tokenizer(call, add_special_tokens=False)["input_ids"] + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    generate = GenerationMixin.generate

    def scripted_generate(self, *args, **kwargs):
        processors = LogitsProcessorList([ScriptedAnswer(script, kwargs["input_ids"].shape[1])])
        return generate(self, *args, logits_processor=processors, **kwargs)

    monkeypatch.setattr(GenerationMixin, "generate", scripted_generate)
    monkeypatch.setattr(adapter, "environment_factory", counting_factory)
    spec = importlib.util.spec_from_file_location("trl_environment_example",
                                                  Path(__file__).parents[1] / "examples" / "trl_environment.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    # --quick's settings, with room for one call and the env's answer
    trainer = example.main(["--model", "tiny", "--env", "bandit", "--max-steps", "1", "--num-prompts", "4",
                            "--batch-size", "4", "--num-generations", "2", "--max-tool-calls", "1",
                            "--lr", "1e-3", "--max-completion-length", str(len(script) + 48),
                            "--output-dir", str(tmp_path)])
    assert trainer.state.global_step == 1
    # 4 rollouts: 2 starts of the dataset (TRL shuffles them) x 2 generations, each reset with its
    # row's seed: training seeds of run seed 0 in textgym's layout
    from textgym.seeds import rollout_seed

    assert len(resets) == 4 and all(resets.count(s) == 2 for s in resets)
    assert set(resets) <= set(range(rollout_seed(0, 0), rollout_seed(0, 0) + 4))
    # the tool ran: TRL parsed each rollout's call and passed its argument (the bandit's one step
    # ends the episode)
    first_moves = [m for m in moves if not m[2].startswith("The episode is over.")]
    assert len(first_moves) == 4 and all(action == "cat" for action, _, _ in first_moves)
    assert all(observation.endswith("The episode is over.") for _, _, observation in first_moves)
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logged) == 1 and "rewards/TextgymToolEnv/mean" in logged[0]
    # TRL's reward is the returns of the moves the tool made
    returns = [episode_return for _, episode_return, _ in first_moves]
    assert logged[0]["rewards/TextgymToolEnv/mean"] == pytest.approx(sum(returns) / 4)


def load_example():
    """``examples/trl_environment.py`` as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("trl_environment_example",
                                                  Path(__file__).parents[1] / "examples" / "trl_environment.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


def tool_template_tokenizer():
    """The SmolLM2 tokenizer with the example's chat template (TRL's Qwen2.5 one, which renders
    tools) and TRL's response parser for it."""
    from trl.chat_template_utils import add_response_schema, qwen2_5_chat_template

    from textgym.models import load_tokenizer

    tokenizer = load_tokenizer()
    tokenizer.chat_template = qwen2_5_chat_template
    return add_response_schema(tokenizer)


def assistant_turns(tokenizer, messages, tools):
    """Each assistant turn of a conversation as the chat template renders it after the
    conversation before it: ``(context ids, the turn's ids up to its end-of-turn token)``."""
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    turns = []
    for k, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        context = tokenizer.apply_chat_template(messages[:k], tools=tools, add_generation_prompt=True,
                                                tokenize=True, return_dict=True)["input_ids"]
        whole = tokenizer.apply_chat_template(messages[:k + 1], tools=tools, tokenize=True,
                                              return_dict=True)["input_ids"]
        assert whole[:len(context)] == context  # the context is a prefix: the turn is what follows it
        turn = whole[len(context):]
        turns.append((context, turn[:turn.index(end) + 1]))
    return turns


def test_warm_start_conversations_are_tool_calls_trl_renders_and_parses_back():
    from trl.chat_template_utils import parse_response

    from textgym.envs.calculator import ArithmeticCalculator, task_prompt, tool_conversation
    from textgym.trainers.trl import environment_tools

    example = load_example()
    tokenizer = tool_template_tokenizer()
    rows = example.warm_start_dataset(3, seed=0)
    calculator = ArithmeticCalculator()
    for seed, row in enumerate(rows):
        tools, messages = json.loads(row["tools"]), row["messages"]
        # the tools are those TRL lists for the class, and the first turn is TRL's prompt for the item
        assert tools == environment_tools(ArithmeticCalculator)
        assert messages[0] == {**messages[0], "role": "user",
                               "content": task_prompt() + calculator.reset(seed=seed)}
        trl_rendered = tokenizer.apply_chat_template(messages[:1], tools=[calculator.add, calculator.divide,
                                                                          calculator.multiply, calculator.subtract],
                                                     add_generation_prompt=True, tokenize=False)
        assert tokenizer.apply_chat_template(messages[:1], tools=tools, add_generation_prompt=True,
                                             tokenize=False) == trl_rendered
        # every assistant turn, rendered and parsed back by TRL's parser: the scripted calls, then the answer
        parsed = [parse_response(tokenizer, turn, prefix=context, tools=tools)
                  for context, turn in assistant_turns(tokenizer, messages, tools)]
        script = tool_conversation(seed)
        assert len(script["calls"]) >= 1
        assert [call["function"] for turn in parsed[:-1] for call in turn["tool_calls"]] == \
            [{"name": c["name"], "arguments": c["arguments"]} for c in script["calls"]]
        assert parsed[-1]["content"] == script["answer"] and not parsed[-1].get("tool_calls")


class ScriptedTurns:
    """A logits processor that makes ``generate`` write a conversation's assistant turns (token
    ids), the one whose turn it is: the ``k``-th after ``k`` tool results (counted by the
    ``<|im_start|>`` tokens the context has beyond the prompt's)."""

    def __init__(self, turns: list[list[int]], prompt_starts: int, im_start: int, context_length: int):
        self.turns, self.prompt_starts, self.im_start = turns, prompt_starts, im_start
        self.context_length = context_length

    def __call__(self, input_ids, scores):
        step = input_ids.shape[1] - self.context_length
        forced = torch.full_like(scores, float("-inf"))
        for row, ids in enumerate(input_ids):
            starts = int((ids[:self.context_length] == self.im_start).sum())
            turn = self.turns[min((starts - self.prompt_starts) // 2, len(self.turns) - 1)]
            forced[row, turn[min(step, len(turn) - 1)]] = 0.0
        return forced


def scripted_item(monkeypatch, item_seed: int) -> list[list[int]]:
    """Makes ``generate`` write the scripted player's turns for calculator item ``item_seed``
    (whatever it is asked); returns the turns (token ids)."""
    from transformers import LogitsProcessorList
    from transformers.generation.utils import GenerationMixin

    tokenizer = tool_template_tokenizer()
    row = load_example().warm_start_dataset(1, seed=item_seed)[0]
    tools, messages = json.loads(row["tools"]), row["messages"]
    turns = [turn for _, turn in assistant_turns(tokenizer, messages, tools)]
    im_start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    prompt_starts = tokenizer.apply_chat_template(messages[:1], tools=tools, add_generation_prompt=True,
                                                  tokenize=True, return_dict=True)["input_ids"].count(im_start)
    generate = GenerationMixin.generate

    def scripted_generate(self, *args, **kwargs):
        processor = ScriptedTurns(turns, prompt_starts, im_start, kwargs["input_ids"].shape[1])
        return generate(self, *args, logits_processor=LogitsProcessorList([processor]), **kwargs)

    monkeypatch.setattr(GenerationMixin, "generate", scripted_generate)
    return turns


def test_trl_plays_the_warm_start_solution_through_the_calculator_and_rewards_it(tmp_path, monkeypatch):
    from textgym.seeds import rollout_seed

    # the tiny model writes the scripted player's turns for the item GRPO's one-row dataset holds
    turns = scripted_item(monkeypatch, rollout_seed(0, 0))
    trainer = load_example().main(["--model", "tiny", "--warm-start", "0", "--max-steps", "1", "--num-prompts", "1",
                                   "--batch-size", "2", "--num-generations", "2", "--max-tool-calls", "4",
                                   "--max-completion-length", "160", "--output-dir", str(tmp_path)])
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logged) == 1 and len(turns) == 3  # this item: two calls, then the answer
    # TRL parsed both calls of each rollout, ran them on the calculator, and both rewards are full
    assert logged[0]["tools/call_frequency"] == 2.0 and logged[0]["tools/failure_frequency"] == 0.0
    assert logged[0]["rewards/ArithmeticCalculator/mean"] == 1.0 and logged[0]["rewards/final_answer/mean"] == 1.0


def test_the_held_out_evaluation_scores_textgym_evals_items_before_and_after_grpo(tmp_path, monkeypatch):
    from textgym.seeds import EVAL_BASE

    # the model solves held-out item EVAL_BASE (whatever it is asked), so it fails EVAL_BASE + 1 and the
    # training item
    scripted_item(monkeypatch, EVAL_BASE)
    trainer = load_example().main(["--model", "tiny", "--warm-start", "0", "--max-steps", "1", "--num-prompts", "1",
                                   "--batch-size", "2", "--num-generations", "2", "--max-tool-calls", "4",
                                   "--max-completion-length", "160", "--eval-items", "2",
                                   "--output-dir", str(tmp_path)])
    before, after = trainer.held_out
    assert before == after == {EVAL_BASE: 1.0, EVAL_BASE + 1: 0.0}
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logged) == 1 and logged[0]["rewards/final_answer/mean"] == 0.0  # the training item is another


def test_grpos_gain_is_paired_over_the_items_scored_both_times():
    gain_line = load_example().gain_line
    before, after = {1: 1.0, 2: 0.0, 3: 0.0, 4: 1.0}, {1: 1.0, 2: 1.0, 3: 0.0, 4: 1.0, 5: 1.0}
    # items 1-4 (5 was not scored before): 50% -> 75%; the paired differences 0, 1, 0, 0
    assert gain_line(before, after) == ("held-out: 4 items, solved 50.0% +- 28.9% before GRPO -> 75.0% +- 25.0% "
                                        "after; GRPO's gain +25.0% +- 25.0% (paired)")


def test_the_calculator_class_is_trls_environment_factory_too(tmp_path):
    example = load_example()
    trainer = example.main(["--quick", "--env", "calculator", "--output-dir", str(tmp_path)])
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert trainer.state.global_step == 1 and len(logged) == 1
    # TRL's column from get_reward() (the last calculator result) and the example's final-answer score
    assert {"rewards/ArithmeticCalculator/mean", "rewards/final_answer/mean"} <= set(logged[0])
    # the warm start ran first: SFT on the scripted solutions, the loss on the assistant's turns only
    imitation = trainer.warm_start
    assert imitation.state.global_step == 1 and any("loss" in h for h in imitation.state.log_history)
    tokenizer = trainer.processing_class
    for row in imitation.train_dataset:
        trained = tokenizer.decode([t for t in row["labels"] if t != -100])  # what the loss is on
        assert "<tool_call>" in trained and "<answer>" in trained
        assert trained.count("<|im_end|>") == trained.count("<tool_call>") + 1  # each turn's stop is trained
        assert "<tool_response>" not in trained and "Calculate" not in trained and "<tools>" not in trained
    # it saved its adapter (LoRA's B matrices start at zero: imitation moved them), and GRPO goes on from it
    from safetensors.torch import load_file

    saved = load_file(str(tmp_path / "warm_start" / "adapter_model.safetensors"))
    assert any(float(t.abs().max()) > 0 for name, t in saved.items() if "lora_B" in name)
    again = example.main(["--quick", "--warm-start-adapter", str(tmp_path / "warm_start"),
                          "--output-dir", str(tmp_path / "again")])
    assert again.warm_start is None and again.state.global_step == 1
    with pytest.raises(SystemExit):
        example.parse_args(["--warm-start", "4", "--warm-start-adapter", str(tmp_path / "warm_start")])
    with pytest.raises(SystemExit):  # only the calculator has held-out items to score
        example.parse_args(["--env", "cartpole", "--eval-items", "4"])
    from textgym.envs.calculator import ArithmeticCalculator

    calculator = ArithmeticCalculator()
    calculator.reset(seed=0)
    completion = [{"role": "assistant", "content": "<answer>734</answer>"}]
    final_answer = example.FinalAnswer()
    assert final_answer([completion, [{"role": "assistant", "content": "734"}]], [calculator, calculator],
                        seed=[0, 0]) == [1.0, 0.0]
    final_answer.scores = {}  # while the held-out evaluation runs, it keeps each item's score by seed
    final_answer([completion, completion], [calculator, calculator], seed=[0, 7])
    assert final_answer.scores == {0: 1.0, 7: 1.0}
