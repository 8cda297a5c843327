"""A run's state on disk: the checkpoint folder's format and what of a trainer goes in it."""
