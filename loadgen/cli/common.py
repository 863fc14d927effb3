"""What every ``loadgen`` command shares: one-line errors, running async bodies, stop signals.

A :class:`~loadgen.errors.LoadgenError` becomes one ``Error: ...`` line on stderr
and the error's exit code (2 unless it says otherwise); no traceback.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import signal
from typing import TYPE_CHECKING, Any, Callable

import click

from .._compat import run as event_loop_run  # uvloop when installed
from ..errors import LoadgenError

if TYPE_CHECKING:  # the engine is imported by the commands that run it, not by every command
    from ..engine import RunControl


class UserError(click.ClickException):
    exit_code = 2

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def one_line_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a (sync) command body: LoadgenError -> ``UserError``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LoadgenError as exc:
            raise UserError(str(exc), exc.exit_code) from None

    return wrapper


def run_async(coro_fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate an async command body: run it on the event loop, errors as one line."""

    @functools.wraps(coro_fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return event_loop_run(coro_fn(*args, **kwargs))

    return one_line_errors(wrapper)


class StopSignals:
    """SIGINT (Ctrl-C) and SIGTERM (kill, timeout, Docker, Kubernetes) stop a run the same way.

    The first signal says ``stopping`` (``{signal}`` in it is ``Ctrl-C`` or ``SIGTERM``) and
    stops ``control``: the run winds down and keeps what it measured. The second says
    ``again`` and hands Ctrl-C back to Python, so a third one aborts (KeyboardInterrupt).
    ``exit_code`` is 128 + the first signal's number (130 for Ctrl-C, 143 for SIGTERM).
    """

    def __init__(self, control: RunControl, *, stopping: str, again: str) -> None:
        self.control = control
        self.stopping = stopping
        self.again = again
        self.first: int | None = None
        self.count = 0

    @property
    def exit_code(self) -> int:
        return 128 + (self.first or signal.SIGINT)

    def install(self) -> "StopSignals":
        """Handle both signals on the running loop (where it can: main thread, not Windows)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self._received, sig)
            except (NotImplementedError, RuntimeError):  # not the main thread / Windows
                pass
        return self

    def _received(self, sig: int) -> None:
        self.count += 1
        if self.first is None:
            self.first = sig
            name = "Ctrl-C" if sig == signal.SIGINT else signal.Signals(sig).name
            click.echo("\n" + self.stopping.format(signal=name), err=True)
            self.control.stop()
        elif self.count == 2:
            click.echo("\n" + self.again, err=True)
            # Back to Python's default: the next Ctrl-C raises KeyboardInterrupt.
            asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)


class LoadgenGroup(click.Group):
    """The ``loadgen`` command group.

    - Usage errors of its subcommands (bad option values, unknown options, ``--prompts DIR``)
      are one ``Error:`` line too, not click's usage block.
    - Commands that live in other modules are imported only when used (``lazy``: name ->
      ``("module:attribute", short help)``), so ``loadgen --help`` and ``loadgen run`` do not
      pay for boto3, numpy, YAML or matplotlib.
    """

    def __init__(self, *args: Any, lazy: dict[str, tuple[str, str]] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy and name not in self.commands:
            module, attribute = self.lazy[name][0].split(":")
            self.add_command(getattr(importlib.import_module(module), attribute), name)
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names), default=0)
        rows = []
        for name in names:
            command = self.commands.get(name)
            if command is None:
                rows.append((name, self.lazy[name][1]))
            elif not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else ctx.command_path
            raise UserError(f"{exc.format_message()} (see `{where} --help`)",
                            exc.exit_code) from None
