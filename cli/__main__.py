"""``python -m textgym.cli`` and the ``textgym`` console script: the Typer app, ended through
:func:`textgym.distributed.exit_process`.

In a process of a data-parallel run (``textgym train --processes N`` starts each one as
``python -m textgym.cli``; ``torchrun`` may start ``textgym`` itself) that tears the process group
down before the interpreter's exit could abort a process that finished its work; in any other
process it is ``sys.exit``.
"""

from textgym.cli.main import app

from textgym import distributed


def main() -> None:
    try:
        app(prog_name="textgym")
    except SystemExit as stop:
        distributed.exit_process(stop.code)


if __name__ == "__main__":
    main()
