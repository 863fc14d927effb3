"""Where a level's finished requests go: metrics, per-turn metrics, SLO counts, exports and
(when asked) the records themselves.

Only requests that belong to the measurement are tallied: a request due during the ramp-up
was sent (it loads the server like any other) but is not part of the level's numbers.
"""

from __future__ import annotations

from typing import Protocol, Sequence

from ..metrics import LevelMetrics
from ..record import RequestRecord
from ..slo import SLO, SLOCounts


class RecordSink(Protocol):
    """Something that sees every finished measured request (exports): ``add(record)``."""

    def add(self, record: RequestRecord) -> None: ...


class Tally:
    """The measured side of one phase. ``metrics`` (and ``slo``, with ``slos``): fold into
    these objects (a worker process reads them live for progress); None: new ones."""

    def __init__(self, metrics: LevelMetrics | None = None, slos: Sequence[SLO] = (),
                 sinks: Sequence[RecordSink] = (), keep_records: bool = False,
                 slo: SLOCounts | None = None) -> None:
        self.metrics = metrics if metrics is not None else LevelMetrics()
        self.turns: dict[int, LevelMetrics] = {}  # multi-turn sessions: metrics per turn
        self.slo = (slo if slo is not None else SLOCounts(slos)) if slos else None
        self.sinks = sinks
        self.records: list[RequestRecord] | None = [] if keep_records else None
        # Requests due before this instant started during the ramp-up (by due time, not
        # completion): sent, never tallied. 0: no ramp-up.
        self.ramp_end_ns = 0
        self.last_end_ns = 0  # the measured window ends with the last tallied request

    def add(self, rec: RequestRecord) -> None:
        if rec.intended_ns < self.ramp_end_ns:
            return
        self.last_end_ns = max(self.last_end_ns, rec.end_ns)
        self.metrics.add(rec)
        if rec.turn is not None:
            self.turns.setdefault(rec.turn, LevelMetrics()).add(rec)
        if self.slo is not None:
            self.slo.add(rec)
        for sink in self.sinks:
            sink.add(rec)
        if self.records is not None:
            self.records.append(rec)

    def all_metrics(self) -> tuple[LevelMetrics, ...]:
        """The level's metrics and, with multi-turn sessions, each turn's."""
        return (self.metrics, *self.turns.values())
