"""The ``textgym`` command line: train, eval, envs, play and plot.

The Typer app lives in :mod:`textgym.cli.main`. Importing this package is cheap: torch,
transformers, peft and trl are imported only inside the commands that need them.
"""
