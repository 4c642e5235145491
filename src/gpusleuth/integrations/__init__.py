"""Trainer callbacks for code that wants them: ``integrations.lightning`` and ``integrations.hf``.

The zero-code hook already records steps, evaluation (``model.eval()``) and checkpoints (``torch.save``)
of any PyTorch job; a callback says the same from the trainer's own hooks, which know what the hook
must guess (Lightning runs forward and backward inside ``optimizer.step(closure)``; gradient accumulation;
a trainer's evaluation and checkpointing), and logs gpusleuth's live step numbers to the trainer's logger.
Outside ``gpusleuth run`` they do nothing.
"""
