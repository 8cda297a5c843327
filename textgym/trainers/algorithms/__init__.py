"""The algorithms: REINFORCE, GRPO and PPO, each a :class:`~textgym.trainers.engine.trainer.Trainer`
whose ``_update`` reads top to bottom and calls down into :mod:`textgym.trainers.engine`."""
