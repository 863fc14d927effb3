"""``scenario run --simulate``: every phase against the built-in simulator.

Each phase gets the simulator profile of its checkpoint (``simulate.profiles`` in the
scenario: a calibrated preset below, plus overrides) and the simulated fidelity
responder (:func:`loadgen.fidelity_sim.make_simulated_responder`), seeded per checkpoint
so that two phases of the same checkpoint answer identically, as a deterministic
model at temperature 0 would.

Presets calibrated to the published L4 study (Gemma 4 E2B, vLLM, one NVIDIA L4) with
the simulator's timing model (``loadgen.simulator.profile``): TTFT 0.6 s (the 512-token
runs took 10.49-10.66 s = TTFT + 511 / 51.3 tok/s); per-request decode 51.3 (bf16) and
105.1 (QAT) tok/s; ``batch_slowdown`` fitted so that 16 streams of 256 tokens give
619 and 1,077 output tok/s. The model then predicts, for 256-token requests,
46 / 85 tok/s at concurrency 1 (published 45.6 / 85.35) and 177 / 322 at 4
(published 171.6 / 328.7). KV-cache capacity: 723,484 and 867,999 tokens (rounded
to 16-token blocks). The T4 study publishes only the QAT/bf16 decode ratio (1.79x); its
absolute rates below (38 and 68 tok/s) are assumptions.

``time_scale`` k > 1 divides every delay of the profile by k: the simulator runs k
times faster than the calibrated GPU, so absolute tok/s, latencies and $/1M tokens
come out k times off while every ratio between phases is unchanged. The results and
reports say so (``simulation`` block, ``run.simulation_note``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import zlib
from typing import AsyncIterator

from ..errors import ConfigError
from ..fidelity_sim import make_simulated_responder
from ..simulator import PROFILES, SimProfile, simulator_process, start_simulator
from .schema import Phase, Scenario, SimCheckpoint

_L4_TTFT_S = 0.6
_BLOCK = 16

CALIBRATED: dict[str, SimProfile] = {
    "l4-bf16": SimProfile(model="google/gemma-4-E2B-it", ttft_s=_L4_TTFT_S, itl_s=1 / 51.3,
                          batch_slowdown=0.0140, max_num_seqs=256, jitter=0.02,
                          num_gpu_blocks=round(723_484 / _BLOCK), block_size=_BLOCK),
    "l4-qat-w4a16": SimProfile(model="google/gemma-4-E2B-it-qat-w4a16-ct", ttft_s=_L4_TTFT_S,
                               itl_s=1 / 105.1, batch_slowdown=0.0213, max_num_seqs=256,
                               jitter=0.02, num_gpu_blocks=round(867_999 / _BLOCK),
                               block_size=_BLOCK),
    # T4: assumed absolute rates; QAT / bf16 = 1.79 as published.
    "t4-bf16": SimProfile(model="google/gemma-4-E2B-it", ttft_s=0.9, itl_s=1 / 38.0,
                          batch_slowdown=0.0140, max_num_seqs=128, jitter=0.02,
                          num_gpu_blocks=8_000, block_size=_BLOCK),
    "t4-qat-w4a16": SimProfile(model="google/gemma-4-E2B-it-qat-w4a16-ct", ttft_s=0.9,
                               itl_s=1 / (38.0 * 1.79), batch_slowdown=0.0213,
                               max_num_seqs=128, jitter=0.02, num_gpu_blocks=14_000,
                               block_size=_BLOCK),
}

# Delays that time_scale divides (seconds, or seconds per 1k prompt tokens).
_TIME_FIELDS = ("ttft_s", "itl_s", "prefill_s_per_1k_tokens", "stall_s")


def preset_names() -> list[str]:
    return sorted({*CALIBRATED, *PROFILES})


def base_profile(checkpoint: SimCheckpoint) -> SimProfile:
    """The preset (calibrated here, or one of the simulator's own) with overrides applied.
    Raises ConfigError for an unknown preset or an invalid field value."""
    name = checkpoint.preset or "default"
    if name in CALIBRATED:
        base = CALIBRATED[name]
    elif name in PROFILES:
        base = PROFILES[name]
    else:
        raise ConfigError(f"unknown preset {name!r}; choose one of {', '.join(preset_names())}")
    return dataclasses.replace(base, **checkpoint.overrides)


def scaled(profile: SimProfile, time_scale: float) -> SimProfile:
    """The profile running ``time_scale`` times faster (every delay divided by it)."""
    if time_scale == 1:
        return profile
    return dataclasses.replace(profile, **{name: getattr(profile, name) / time_scale
                                           for name in _TIME_FIELDS})


def checkpoint_settings(scenario: Scenario, phase: Phase) -> SimCheckpoint:
    profiles = scenario.simulate.profiles if scenario.simulate else {}
    if phase.checkpoint not in profiles:
        raise ConfigError(f"--simulate: no simulator profile for checkpoint {phase.checkpoint!r}; "
                          f"add simulate.profiles.{phase.checkpoint} (preset: one of "
                          f"{', '.join(preset_names())}) to the scenario")
    return profiles[phase.checkpoint]


def phase_profile(scenario: Scenario, phase: Phase, time_scale: float) -> SimProfile:
    """What the simulator plays for ``phase``: serving the phase's model name."""
    profile = base_profile(checkpoint_settings(scenario, phase))
    if phase.model:
        profile = dataclasses.replace(profile, model=phase.model)
    return scaled(profile, time_scale)


def fidelity_seed(settings: SimCheckpoint, checkpoint: str) -> int:
    """Same checkpoint, same answers: the default seed is derived from its name."""
    if settings.fidelity_seed is not None:
        return settings.fidelity_seed
    return zlib.crc32(checkpoint.encode())


def simulation_block(scenario: Scenario, phase: Phase, time_scale: float) -> dict:
    """What the phase file says about the simulation (profile before scaling)."""
    settings = checkpoint_settings(scenario, phase)
    profile = phase_profile(scenario, phase, 1.0)
    return {"simulated": True, "time_scale": time_scale, "preset": settings.preset,
            "profile": profile.to_dict(),
            "model_single_stream_decode_tokens_per_s": round(1 / profile.itl_s, 2)
            if profile.itl_s else None,
            "fidelity_seed": fidelity_seed(settings, phase.checkpoint),
            "fidelity_wrong_rate": settings.fidelity_wrong_rate,
            "note": simulation_note(time_scale)}


def simulation_note(time_scale: float) -> str:
    note = "SIMULATED: measured against loadgen's built-in simulator, not a GPU."
    if time_scale != 1:
        note += (f" time_scale {time_scale:g}: the simulator ran {time_scale:g}x faster than "
                 f"its calibrated profile, so absolute tok/s, latencies and $/1M tokens are "
                 f"{time_scale:g}x off; ratios between phases are not affected.")
    return note


@dataclasses.dataclass(frozen=True)
class SimulatedServers:
    url: str  # the timed simulator (measurements), in a child process
    fidelity_url: str  # an instant simulator with the fidelity responder


@contextlib.asynccontextmanager
async def simulated_servers(scenario: Scenario, phase: Phase,
                            time_scale: float) -> AsyncIterator[SimulatedServers]:
    """Start the phase's simulators; always stop them.

    The timed one runs in a child process so its CPU never competes with the client's
    event loop. Fidelity answers don't depend on timing, so they come from a second,
    delay-free simulator in this process (responders can't cross a process boundary).
    """
    profile = phase_profile(scenario, phase, time_scale)
    settings = checkpoint_settings(scenario, phase)
    responder = make_simulated_responder(fidelity_seed(settings, phase.checkpoint),
                                         settings.fidelity_wrong_rate)
    instant = dataclasses.replace(profile, ttft_s=0.0, itl_s=0.0, jitter=0.0)
    with contextlib.ExitStack() as stack:
        url = await asyncio.to_thread(stack.enter_context, simulator_process(profile))
        fidelity = await start_simulator(instant, responder=responder)
        try:
            yield SimulatedServers(url, fidelity.url)
        finally:
            await fidelity.stop()
