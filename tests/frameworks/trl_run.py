"""A real TRL run (trl 1.16.0 ``GRPOTrainer``, trl/trainer/grpo_trainer.py) on CPU with
RL-Insight turned on the way TRL users turn on any reporting: ``callbacks=
[RLInsightCallback()]``. Run by tests/test_framework_trl.py with TRL's packages on
PYTHONPATH (``make setup``: .venv/frameworks/trl/site-packages) and the run named by
``RL_INSIGHT_PROJECT`` / ``RL_INSIGHT_EXPERIMENT_NAME``.

Nothing is downloaded: a word-level tokenizer built here, a tiny Qwen2 with random
weights saved to a folder beside ``--out``, six prompts. ``beta`` > 0,
so TRL also computes the reference model's log-probs (and logs ``kl``);
``include_num_input_tokens_seen`` on, so each step's dict also holds ``train_runtime``
(transformers' ``Trainer.log``); with ``--eval-steps N`` an evaluation on two prompts
every N steps (its own generation, rewards and loss, profiled by TRL as a step's are).

One step is made slow: at step ``--slow-step`` the reward function sleeps
``--sleep`` seconds. The ground truth goes to ``--out`` (JSON), measured here, beside
TRL and the callback:

- ``logs``: every dict TRL handed ``on_log`` (a recording callback after ours);
- ``profile``: TRL's own profiling records, in the order they ended, each with its name,
  the step it belongs to (``ProfilingContext.step`` is the global step when the context
  was made, 0-based: the work of logged step k carries k-1) and its seconds, taken by
  wrapping ``trl.extras.profiling.ProfilingContext._log_metrics`` before the callback
  wraps it (trl/extras/profiling.py), ``eval`` true for those made in an evaluation;
- ``slept``: the step that slept and for how long (perf_counter around the sleep);
- ``trl``: TRL's version.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
WORDS = ("the a cat dog sat on mat ran to home big small red blue one two three four five "
         "six seven eight nine ten yes no good bad is was and or not hello world count "
         "say").split()
PROMPTS = ["the cat sat on the", "count one two three", "say hello", "the dog ran to",
           "big red dog is", "small blue cat was"]
# a TrainerCallback's events (transformers' Trainer calls each by name)
EVENTS = ("on_init_end", "on_train_begin", "on_train_end", "on_epoch_begin", "on_epoch_end",
          "on_step_begin", "on_pre_optimizer_step", "on_optimizer_step", "on_substep_end",
          "on_step_end", "on_evaluate", "on_predict", "on_save", "on_prediction_step",
          "on_push_begin")


def tiny_model(folder: str, eos: str = "<eos>", special: tuple[str, ...] = (),
               chat_template: str | None = None) -> tuple[str, Any, dict[str, int]]:
    """A tiny Qwen2 with random weights and a word-level tokenizer (nothing downloaded),
    saved to ``folder``/tiny-model: (that folder, the tokenizer, its vocabulary). ``eos``
    ends a completion; ``special`` are tokens a chat template writes."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    vocab = {t: i for i, t in enumerate(["<pad>", eos, "<unk>",
                                         *(x for x in special if x != eos), *WORDS])}
    model_dir = os.path.join(folder, "tiny-model")
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##")
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token=eos, unk_token="<unk>",
        **({"additional_special_tokens": list(special)} if special else {}))
    if chat_template is not None:
        hf_tok.chat_template = chat_template
    cfg = Qwen2Config(vocab_size=len(vocab), hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=128, tie_word_embeddings=True,
                      pad_token_id=vocab["<pad>"], eos_token_id=vocab[eos],
                      bos_token_id=None)
    Qwen2ForCausalLM(cfg).save_pretrained(model_dir)
    hf_tok.save_pretrained(model_dir)
    return model_dir, hf_tok, vocab


def recorder(logged: list[dict], step_end: Callable[[Any], None] | None = None) -> object:
    """A callback to put after ours: it sees every dict TRL logs as TRL made it and keeps
    it in ``logged`` (its step, the dict, when); ``step_end(state)`` at each step's end."""

    class Recorder:
        def on_log(self, args, state, control, logs=None, **kwargs):
            logged.append({"step": state.global_step, "logs": dict(logs or {}),
                           "t": time.time()})

        def on_step_end(self, args, state, control, **kwargs):
            if step_end is not None:
                step_end(state)

    def nothing(self, *args, **kwargs):
        return None

    for event in EVENTS:
        if not hasattr(Recorder, event):
            setattr(Recorder, event, nothing)
    return Recorder()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--slow-step", type=int, default=4)
    p.add_argument("--sleep", type=float, default=1.5)
    p.add_argument("--eval-steps", type=int, default=0)
    a = p.parse_args()

    import torch
    import trl
    import trl.extras.profiling as profiling
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rl_insight.integrations.trl import RLInsightCallback

    torch.manual_seed(0)
    torch.set_num_threads(1)

    profile: list[dict] = []
    evaluating: list[bool] = []
    original = profiling.ProfilingContext._log_metrics

    def record(self, duration):
        profile.append({"name": self.name, "step": self.step + 1, "seconds": duration,
                        "eval": bool(evaluating)})
        return original(self, duration)

    profiling.ProfilingContext._log_metrics = record

    tmp = tempfile.mkdtemp(prefix="trl_run_", dir=os.path.dirname(os.path.abspath(a.out)))
    model_dir, hf_tok, _ = tiny_model(tmp)
    dataset = Dataset.from_dict({"prompt": PROMPTS})

    slept: dict = {}

    def reward_len(completions, trainer_state=None, **kwargs):
        step = trainer_state.global_step + 1  # the step being made (0-based before it)
        if step == a.slow_step and not slept:
            t0 = time.perf_counter()
            time.sleep(a.sleep)
            slept.update(step=step, seconds=time.perf_counter() - t0)
        return [float(len(c.split())) for c in completions]

    logged: list[dict] = []

    evals = {"eval_strategy": "steps", "eval_steps": a.eval_steps,
             "per_device_eval_batch_size": 2} if a.eval_steps else {}
    args = GRPOConfig(output_dir=os.path.join(tmp, "out"), max_steps=a.steps,
                      per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=8, logging_steps=1, report_to=[],
                      use_cpu=True, bf16=False, gradient_checkpointing=False,
                      save_strategy="no", learning_rate=1e-3, disable_tqdm=True,
                      dataloader_num_workers=0, seed=0, beta=0.04,
                      include_num_input_tokens_seen=True, **evals)
    trainer = GRPOTrainer(model=model_dir, reward_funcs=reward_len, args=args,
                          train_dataset=dataset,
                          eval_dataset=dataset.select(range(2)) if a.eval_steps else None,
                          processing_class=hf_tok,
                          callbacks=[RLInsightCallback(), recorder(logged)])
    evaluate = trainer.evaluate

    def evaluating_too(*args, **kwargs):  # the trainer calls self.evaluate
        evaluating.append(True)
        try:
            return evaluate(*args, **kwargs)
        finally:
            evaluating.pop()

    trainer.evaluate = evaluating_too
    t0 = time.time()
    trainer.train()
    with open(a.out, "w") as f:
        json.dump({"trl": trl.__version__, "logs": logged, "profile": profile,
                   "slept": slept, "train_s": time.time() - t0}, f, default=str)


if __name__ == "__main__":
    main()
