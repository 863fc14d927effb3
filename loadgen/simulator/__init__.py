"""The built-in vLLM simulator: an aiohttp server speaking vLLM's OpenAI API.

It streams exactly like vLLM (role chunk, content chunks, finish chunk, usage chunk,
``[DONE]``), models a batching GPU (ITL grows with the running requests, a
``max_num_seqs`` slot limit with a waiting queue), injects seeded faults, and records
what it sent (``/sim/stats``, ``/sim/log``) so benchmarks can check client timings.
See :class:`SimProfile` for the timing model.
"""

from .plan import Responder, estimate_tokens, split_tokens
from .profile import PROFILES, SimProfile, profile_named
from .runners import (
    RunningSimulator,
    SimulatorThread,
    simulator_process,
    start_simulator,
)

__all__ = [
    "PROFILES",
    "Responder",
    "RunningSimulator",
    "SimProfile",
    "SimulatorThread",
    "estimate_tokens",
    "profile_named",
    "simulator_process",
    "split_tokens",
    "start_simulator",
]
