"""The target interface: one async method that sends a prompt and fills a record.

Like an httpx transport, a target is tiny. The engine owns timing decisions
(when to send, what counts); the target owns the wire (how to send, how to
read). A target:

- ``await target.open()``: create sessions/clients and run a *preflight*:
  resolve the model, check credentials, prove the endpoint speaks the expected
  API. Problems raise :class:`loadgen.errors.TargetError` / ``AuthError`` with one
  line saying how to fix them, before any load is generated.
- ``await target.send(prompt, record)``: send one request and fill ``record``
  (``start_ns``, ``content_ns``, ``end_ns``, tokens, error). Request-level
  failures are written to the record, never raised. Only ``CancelledError``
  propagates (the engine cancels in-flight requests at the graceful-stop
  deadline and marks them incomplete).
- ``await target.close()``.
- Optionally, ``await target.open_connections(n)``: open ``n`` connections before a level,
  so connection setup never lands in a measured latency; ``target.statistics()``: connection
  counters (``connections_opened``, ``reconnects``, ...), reported per level.
- Optionally, ``target.prepare(prompt, record) -> PreparedRequest`` (sync: build the body,
  sign it, render the bytes) and ``await target.send_prepared(prepared, record, on_sent)``.
  The engine then builds a stream's next request while the current one is in flight (in
  ``on_sent``, called right after the current request's bytes were written), so none of that
  work lies between a request's intended time and its write.
- Optionally (the fast path), ``await target.send_chained(prepared, record, on_sent,
  successor, started)``: as ``send_prepared``, and when the response ends where the
  transport reads it, the transport may send the stream's next request right there: it asks
  the engine's :class:`Successor` (``peek``, then ``claim``), writes it, and reports it with
  ``successor.started(handle)``; the engine then calls ``send_chained`` for that request
  with ``started=handle`` to wait for it.
- ``target.describe()``: a JSON-able dict for the results file (``url``, ``api``,
  ``model``, ...). It must never contain secrets.
"""

from __future__ import annotations

import copy as _copy
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, runtime_checkable

from ..config import RequestOptions
from ..errors import ConfigError
from ..record import Prompt, RequestRecord


@runtime_checkable
class Target(Protocol):
    async def open(self) -> None: ...

    async def send(self, prompt: Prompt, record: RequestRecord) -> None: ...

    async def close(self) -> None: ...

    def describe(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class PreparedRequest:
    """A request built ahead of its due time. ``wire``: the exact bytes for the streaming
    transport (None when another transport sends ``body`` with ``headers``)."""

    body: bytes
    wire: bytes | None = None
    headers: dict[str, str] | None = None
    made_ns: int = field(default_factory=time.perf_counter_ns)


@runtime_checkable
class PreparingTarget(Target, Protocol):
    def prepare(self, prompt: Prompt, record: RequestRecord) -> PreparedRequest: ...

    async def send_prepared(self, prepared: PreparedRequest, record: RequestRecord,
                            on_sent: Callable[[], None] | None = None) -> None: ...


class Successor(Protocol):
    """The engine's side of the fast path: a closed-loop stream's next request, already
    built, handed to the transport at the instant the current response ended."""

    def peek(self) -> PreparedRequest | None:
        """The next request if it may be sent now (None: the engine's task sends it)."""

    def claim(self, end_ns: int) -> RequestRecord:
        """Take the peeked request: due at ``end_ns`` (the previous response's end),
        counted as issued. The transport must write it now."""

    def started(self, handle: Any) -> None:
        """The claimed request was written; ``handle`` is what ``send_chained`` waits on."""


@runtime_checkable
class ChainingTarget(PreparingTarget, Protocol):
    async def send_chained(self, prepared: PreparedRequest, record: RequestRecord,
                           on_sent: Callable[[], None] | None, successor: Successor,
                           started: Any = None) -> None: ...


class open_target:
    """``async with open_target(t) as t:`` opens and always closes a target."""

    def __init__(self, target: Target) -> None:
        self.target = target

    async def __aenter__(self) -> Target:
        await self.target.open()
        return self.target

    async def __aexit__(self, *exc: object) -> None:
        await self.target.close()


# Request options an opened target has built into its URL, request head, key or connection
# pool: a target sending with other options must keep these.
_FIXED_AT_OPEN = ("api", "stream", "transport", "timeouts", "api_key_env", "model")


def with_options(target: Any, options: RequestOptions) -> Any:
    """The opened ``target`` sending with ``options``, on its connections: no second
    preflight (a fidelity suite after the load, on the same server). Per-request options
    may differ (sampling, ``ignore_eos``, ``keep_text``); those fixed at open may not.
    The copy shares the original's transport: only the original is closed."""
    changed = [name for name in _FIXED_AT_OPEN
               if getattr(options, name) != getattr(target.options, name)]
    if changed:
        raise ConfigError(f"an opened target keeps its {', '.join(changed)}: open another")
    view = _copy.copy(target)
    view.options = options
    return view
