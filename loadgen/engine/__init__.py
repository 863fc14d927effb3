"""The engine: runs one load level against a target and folds its requests into metrics.

Read it top-down in this order:

- :mod:`.runner`: one level, from opening its connections to its :class:`LevelResult`
  (warm-up, measured phase, stop deadline and graceful stop, self-check, watchers).
- :mod:`.closed_loop` and :mod:`.open_loop`: the load models of :mod:`loadgen.load` at
  work, N streams back to back, or requests sent at absolute due times.
- :mod:`.level`: what every load model asks before a request (may it start?) and takes
  from (its prompt, record and request id).
- :mod:`.sessions`: sending one request or a multi-turn session; failures become data.
- :mod:`.tally`: where finished requests go (metrics, per turn, SLOs, exports, records).
- :mod:`.share` and :mod:`.control`: what a run shares across levels (this process's part
  of each level, request ids, stopping from outside).

Every task has an owner (an ``asyncio.TaskGroup``). Sends are scheduled at absolute times
read from a :class:`~loadgen.clock.Clock`; the engine never sleeps "after work".
"""

from ..clock import MONOTONIC, Clock, MonotonicClock
from ..load import connections_needed
from .control import RunControl
from .level import LevelRun, Prompts
from .runner import LevelResult, ProgressFn, Watcher, measure, run_level, warm_up
from .share import RequestIds, Share
from .tally import RecordSink

__all__ = ["MONOTONIC", "Clock", "LevelResult", "LevelRun", "MonotonicClock", "ProgressFn",
           "Prompts", "RecordSink", "RequestIds", "RunControl", "Share", "Watcher",
           "connections_needed", "measure", "run_level", "warm_up"]
