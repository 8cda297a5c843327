"""``python -m textgym.cli`` runs the same app as the ``textgym`` console script.

This is how ``textgym train --processes N`` starts each process: it ends through
:func:`textgym.distributed.exit_process`, which tears the process group down before the
interpreter's exit could abort a process that finished its work.
"""

from textgym.cli.main import app

from textgym import distributed

try:
    app(prog_name="textgym")
except SystemExit as stop:
    distributed.exit_process(stop.code)
