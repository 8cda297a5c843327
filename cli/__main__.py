"""``python -m textgym.cli`` runs the same app as the ``textgym`` console script."""

from textgym.cli.main import app

app(prog_name="textgym")
