"""The ``loadgen`` command line: every click command lives in this package, and only here.

Library packages (engine, targets, codecs, simulator, scenario, report, aws, mcp) never
import click; a command module turns their errors into one ``Error:`` line.

- :mod:`.main`: the ``loadgen`` group, ``run`` and ``sweep``; other commands load lazily.
- :mod:`.common`: shared option types, the lazy group, one-line error handling, signals.
- :mod:`.workload`: workload options (prompts, datasets, traces) shared by run and sweep.
- :mod:`.report`: ``report`` and ``compare``.  :mod:`.endpoint`: ``endpoint`` and ``facts``.
- :mod:`.scenario`: ``scenario``.  :mod:`.simulator`: ``mock-server``.  :mod:`.mcp`: ``mcp``.
"""

from .main import LAZY_COMMANDS, cli, main

__all__ = ["LAZY_COMMANDS", "cli", "main"]
