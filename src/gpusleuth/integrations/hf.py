"""``GpusleuthCallback`` for the Hugging Face ``transformers`` Trainer: steps, evaluation, checkpoints.

    from gpusleuth.integrations.hf import GpusleuthCallback
    trainer = Trainer(..., callbacks=[GpusleuthCallback()])

- A step ends at ``on_step_end`` (once per optimizer step, after gradient accumulation), through
  ``gpusleuth.step()``.
- The Trainer has no hook *before* it evaluates or saves, but it decides both in the control flags that
  ``on_step_end``/``on_epoch_end`` see: ``eval`` opens there when ``should_evaluate`` and closes at
  ``on_evaluate``; ``checkpoint`` opens when ``should_save`` (after the evaluation, if both) and closes at
  ``on_save``. Anything still open closes at the next ``on_step_begin``.
- At each ``on_log`` it adds ``gpusleuth/step_time_s``, ``gpusleuth/data_wait_share``,
  ``gpusleuth/samples_per_s`` and ``gpusleuth/steps`` to the logged values (``trainer.state.log_history``,
  and the reporting callbacks after this one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import gpusleuth
from gpusleuth.integrations._common import LiveNumbers, Phases
from transformers import TrainerCallback

if TYPE_CHECKING:
    from transformers import TrainerControl, TrainerState, TrainingArguments


class GpusleuthCallback(TrainerCallback):
    def __init__(self, log_numbers: bool = True) -> None:
        self.log_numbers = log_numbers
        self.phases = Phases()
        self.live = LiveNumbers()
        self._save_after_eval = False

    # every hook also gets the Trainer's model, tokenizer, optimizer … as keyword arguments: unused, so `object`
    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: object) -> None:
        self.phases.end_all()

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: object) -> None:
        gpusleuth.step()
        self._plan(control)

    def on_epoch_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: object) -> None:
        self.phases.end_all()
        self._plan(control)

    def _plan(self, control: TrainerControl) -> None:
        """The Trainer evaluates, then saves, right after this hook when these flags are set."""
        self._save_after_eval = bool(control.should_save and control.should_evaluate)
        if control.should_evaluate:
            self.phases.begin("eval")
        elif control.should_save:
            self.phases.begin("checkpoint")

    def on_evaluate(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: object) -> None:
        self.phases.end("eval")
        if self._save_after_eval:
            self._save_after_eval = False
            self.phases.begin("checkpoint")

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: object) -> None:
        self.phases.end("checkpoint")

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, float] | None = None, **kwargs: object) -> None:
        if not self.log_numbers or logs is None:
            return
        numbers = self.live.numbers()
        logs.update(numbers)
        if state.log_history:
            state.log_history[-1].update(numbers)

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: object) -> None:
        self.phases.end_all()
