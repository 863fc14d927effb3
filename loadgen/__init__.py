"""loadgen: async load generator for LLM inference endpoints.

Public API (see README, "Python API")::

    from loadgen import sweep, run, load_results, ConstantConcurrency, ArrivalRate, StopRule
"""

from ._version import __version__
from .api import SIMULATOR, make_target, run, sweep  # noqa: E402
from .config import RequestOptions, Timeouts  # noqa: E402
from .engine import RunControl  # noqa: E402
from .load import ArrivalRate, ConstantConcurrency, StopRule  # noqa: E402
from .measurement import Measurement  # noqa: E402
from .record import Prompt, RequestRecord  # noqa: E402
from .results import Level, Requests, Results, Stats, load_results  # noqa: E402
from .runconfig import RunConfig, TargetConfig  # noqa: E402
from .workload.prompts import PromptSource  # noqa: E402
from .workload.settings import WorkloadSettings  # noqa: E402

__all__ = ["__version__", "sweep", "run", "make_target", "RequestOptions", "Timeouts",
           "RunControl", "ArrivalRate", "ConstantConcurrency", "StopRule", "PromptSource",
           "Prompt", "RequestRecord", "SIMULATOR", "load_results", "Results", "Level", "Stats",
           "Requests", "WorkloadSettings", "Measurement", "RunConfig", "TargetConfig"]
