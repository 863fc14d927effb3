"""A phase's CloudWatch metrics, read after the phase (``sagemaker://`` phases).

During the phase each level is only marked ``pending`` with its window (reading CloudWatch
then would keep a deployed endpoint billing while the metrics arrive). Once the phase has
ended (and its endpoint is deleted: the metrics outlive it), :func:`fetch_phase_metrics`
starts reading every pending level in the background, while the next phase runs; the
scenario waits for them before writing its reports, and each fetch rewrites the phase file.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any, Callable

from ..cloudwatch_settings import CloudWatchSettings
from ..runconfig import default
from .schema import Phase, Scenario

if TYPE_CHECKING:
    from .phase import PhaseDoc


def phase_settings(scenario: Scenario, phase: Phase) -> CloudWatchSettings:
    """The phase's CloudWatch reading: the ``request:`` section's ``cloudwatch_wait_s`` and
    ``cloudwatch_endpoint_url`` (default: the deploy block's ``endpoint_url``, the AWS
    endpoint the phase already uses), deferred to after the phase."""
    values = scenario.request.values
    endpoint_url = values.get("cloudwatch_endpoint_url") or (
        phase.deploy.endpoint_url if phase.deploy is not None else None)
    return CloudWatchSettings(wait_s=values.get("cloudwatch_wait_s",
                                                default(CloudWatchSettings, "wait_s")),
                              endpoint_url=endpoint_url, defer=True)


def _pending(doc: "PhaseDoc") -> list[tuple[Callable[[dict], None], dict]]:
    """(where to put the fetched section, the pending section) of every level of the phase."""
    found: list[tuple[Callable[[dict], None], dict]] = []
    for level in doc.levels:  # the sweep's LevelResults
        cw = getattr(level, "cloudwatch", None)
        if cw and cw.get("status") == "pending":
            found.append((lambda section, level=level: setattr(level, "cloudwatch", section), cw))
    single = doc.measurements.get("single_stream") or {}
    cw = single.get("cloudwatch")
    if cw and cw.get("status") == "pending":
        found.append((lambda section: single.__setitem__("cloudwatch", section), cw))
    return found


def fetch_phase_metrics(doc: "PhaseDoc", settings: CloudWatchSettings, cancel: threading.Event,
                        log: Callable[[str], None]) -> asyncio.Task | None:
    """Start reading the phase's pending levels (None: there are none); the task rewrites
    the phase file once they are in."""
    pending = _pending(doc)
    if not pending:
        return None
    from ..aws.level_metrics import fetch_pending

    async def fetch_all() -> None:
        log(f"reading {len(pending)} level(s)' CloudWatch metrics in the background "
            f"(up to {settings.wait_s:g} s after each level)")
        sections: list[Any] = await asyncio.gather(*(
            asyncio.to_thread(fetch_pending, cw, settings, cancel) for _, cw in pending))
        for (put, _), section in zip(pending, sections):
            put(section)
        doc.save()
        statuses = [section.get("status") for section in sections]
        log(f"CloudWatch metrics: {', '.join(statuses)}; rewrote {doc.path.name}")

    return asyncio.ensure_future(fetch_all())
