"""What every algorithm shares: the :class:`~textgym.trainers.engine.trainer.Trainer` and the steps
of an update (loss step, minibatches and optimizer steps, the training loop, held-out play, SFT).
The engine never imports an algorithm."""
