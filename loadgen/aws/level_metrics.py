"""Each level's CloudWatch metrics for a ``sagemaker://`` run: fetched in the background
after the level, polled until they have arrived or ``wait_s`` after the level's end.

CloudWatch publishes an endpoint's metrics a minute or more late. A level's metrics have
**arrived** when the level's periods count at least as many ``Invocations`` as the level
completed requests (the endpoint counted every one of ours) and ``CPUUtilization`` has a
point in them; until then the fetch polls every ``poll_s``. At the deadline it keeps what
came (``status: "incomplete"``) and lists the metrics still empty. A failed fetch (no
permission, no network) is written down (``status: "error"``), never raised: the load
results stand on their own.

The credential chain is the run's (boto3's: env, profile, SSO, role);
``endpoint_url`` points CloudWatch at a VPC endpoint or an emulator.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable
from urllib.parse import urlsplit

from ..errors import LoadgenError
from ..runconfig import CloudWatchSettings
from ..timeline import add_source
from .cloudwatch import (
    Window,
    get_metric_data,
    level_section,
    metric_queries,
    percentile_queries,
)
from .session import AwsConfig

DEFAULT_VARIANT = "AllTraffic"  # what loadgen's deploys and the SageMaker SDK name it


def wall_window(start_ns: int, end_ns: int) -> tuple[float, float]:
    """A level's ``perf_counter_ns`` window on the wall clock (epoch seconds), through the
    offset between the two clocks now (both advance at the same rate in between)."""
    offset_ns = time.time_ns() - time.perf_counter_ns()
    return (start_ns + offset_ns) / 1e9, (end_ns + offset_ns) / 1e9


def _arrived(section: dict[str, Any], expected_invocations: int) -> bool:
    metrics = section["metrics"]
    counted = metrics["Invocations"]["level"]["sum"] or 0
    return counted >= expected_invocations and metrics["CPUUtilization"]["level_points"] > 0


def fetch_level(aws: AwsConfig, window: Window, *, expected_invocations: int,
                deadline: float, poll_s: float, cancel: threading.Event,
                clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """Poll GetMetricData for ``window`` until the metrics arrived or ``deadline``
    (``clock`` time); blocking: run it in a thread. Returns the level's section."""
    began = clock()
    start_s, end_s = window.fetch_range()
    out: dict[str, Any] = {"source": "cloudwatch", "endpoint": window.endpoint,
                           "variant": window.variant, "period_s": window.period_s,
                           "start_unix_s": round(window.start_s, 3),
                           "end_unix_s": round(window.end_s, 3)}
    polls = 0
    try:
        cloudwatch = aws.client("cloudwatch")
        while True:
            points = get_metric_data(cloudwatch, metric_queries(window), start_s, end_s)
            polls += 1
            arrived = _arrived(level_section(points, window), expected_invocations)
            if arrived or clock() >= deadline:
                break
            if cancel.wait(max(0.0, min(poll_s, deadline - clock()))):
                break
        try:  # percentiles, once: an endpoint (or emulator) refusing them costs only them
            points.update(get_metric_data(cloudwatch, percentile_queries(window), start_s, end_s))
        except LoadgenError as err:
            out["percentiles_error"] = str(err)
    except LoadgenError as err:
        return {**out, "status": "error", "error": str(err), "polls": polls,
                "waited_s": round(clock() - began, 1)}
    return {**out, **level_section(points, window),
            "status": "complete" if arrived else "incomplete",
            "expected_invocations": expected_invocations, "polls": polls,
            "waited_s": round(clock() - began, 1)}


def client_vs_endpoint(section: dict[str, Any], ttft_mean_ms: float | None,
                       e2e_mean_ms: float | None) -> dict[str, Any] | None:
    """The client's latency set beside the endpoint's own (README, "SageMaker metrics").

    - ``ttft_minus_model_latency_ms`` = client TTFT mean − ModelLatency mean;
      ``e2e_minus_model_latency_ms`` = client e2e mean − ModelLatency mean.
    - ``model_latency_reading``: AWS does not document where ModelLatency ends for a
      response stream. ``first_byte`` when ModelLatency ≤ TTFT (it can only end at the
      first byte), ``whole_stream`` when TTFT < ModelLatency ≤ e2e, else ``unclear``.
    - ``outside_model_ms``: the difference that matches the reading (TTFT's for
      first_byte, e2e's for whole_stream): the time the client waited that the container
      did not account for. ``network_and_client_ms`` = that − OverheadLatency mean
      (SageMaker's own front-end time): network, TLS, signing, and the client.
    """
    metrics = section.get("metrics") or {}
    model = ((metrics.get("ModelLatency") or {}).get("level") or {}).get("mean_ms")
    overhead = ((metrics.get("OverheadLatency") or {}).get("level") or {}).get("mean_ms")
    if model is None or ttft_mean_ms is None or e2e_mean_ms is None:
        return None
    if model <= ttft_mean_ms:
        reading, outside = "first_byte", ttft_mean_ms - model
    elif model <= e2e_mean_ms:
        reading, outside = "whole_stream", e2e_mean_ms - model
    else:
        reading, outside = "unclear", None
    return {"ttft_mean_ms": ttft_mean_ms, "e2e_mean_ms": e2e_mean_ms,
            "model_latency_mean_ms": model, "overhead_latency_mean_ms": overhead,
            "ttft_minus_model_latency_ms": round(ttft_mean_ms - model, 3),
            "e2e_minus_model_latency_ms": round(e2e_mean_ms - model, 3),
            "model_latency_reading": reading,
            "outside_model_ms": None if outside is None else round(outside, 3),
            "network_and_client_ms": (round(outside - overhead, 3)
                                      if outside is not None and overhead is not None else None)}


def level_client_means(level: Any) -> tuple[float | None, float | None]:
    """(TTFT mean, e2e mean) in ms of a LevelResult."""
    summary = level.metrics.summary()
    return ((summary.get("ttft_ms") or {}).get("mean"), (summary.get("e2e_ms") or {}).get("mean"))


def _is_local(url: str | None) -> bool:
    host = urlsplit(url).hostname if url else None
    return host in ("localhost", "::1") or bool(host and host.startswith("127."))


def _skip_reason(target: dict[str, Any], settings: CloudWatchSettings) -> str | None:
    """Why not to read CloudWatch at all: told not to, or the runtime is a local emulator
    (its endpoint has no metrics in AWS) and no CloudWatch endpoint was given."""
    if not settings.wait_s:
        return "--cloudwatch-wait 0"
    if _is_local(target.get("endpoint_url")) and not settings.endpoint_url:
        return ("the runtime endpoint is local (an emulator): pass --cloudwatch-endpoint-url "
                "to read its metrics from a CloudWatch emulator")
    return None


class LevelMetricsFetcher:
    """Start each level's fetch when the level ends (a thread each); :meth:`finish` waits
    for them and puts each section on its level (``level.cloudwatch``)."""

    def __init__(self, target: dict[str, Any], settings: CloudWatchSettings) -> None:
        self.endpoint = target["endpoint"]
        self.variant = target.get("target_variant") or DEFAULT_VARIANT
        self.region = target.get("region")  # the target's, already resolved
        # One attempt per call: the poll loop is the retry.
        self.aws = AwsConfig(region=self.region, endpoint_url=settings.endpoint_url,
                             max_attempts=1)
        self.settings = settings
        self.skip_reason = _skip_reason(target, settings)
        self.cancel = threading.Event()
        self._pending: list[tuple[Any, asyncio.Future]] = []

    def window(self, level: Any) -> Window:
        start_s, end_s = wall_window(level.start_ns, level.end_ns)
        return Window(self.endpoint, self.variant, start_s, end_s, self.settings.period_s)

    def start(self, level: Any) -> None:
        if self.skip_reason:
            level.cloudwatch = {"source": "cloudwatch", "status": "skipped",
                                "reason": self.skip_reason}
            return
        if self.settings.defer:  # a scenario phase: fetched after the phase (fetch_pending)
            window = self.window(level)
            level.cloudwatch = {"source": "cloudwatch", "status": "pending",
                                "endpoint": window.endpoint, "variant": window.variant,
                                "region": self.region, "period_s": window.period_s,
                                "start_unix_s": round(window.start_s, 3),
                                "end_unix_s": round(window.end_s, 3),
                                "expected_invocations": level.metrics.counts.completed,
                                "client_means_ms": list(level_client_means(level)),
                                "t0_ns": level.start_ns}
            add_source(level.timeline, "cloudwatch", level.start_ns)
            return
        deadline = level.end_ns / 1e9 + self.settings.wait_s  # perf_counter = monotonic here
        task = asyncio.ensure_future(asyncio.to_thread(
            fetch_level, self.aws, self.window(level),
            expected_invocations=level.metrics.counts.completed, deadline=deadline,
            poll_s=self.settings.poll_s, cancel=self.cancel, clock=time.perf_counter))
        self._pending.append((level, task))

    @property
    def pending(self) -> int:
        return sum(not task.done() for _, task in self._pending)

    async def finish(self, log: Callable[[str], None] | None = None) -> None:
        if self.pending and log is not None:
            log(f"waiting up to {self.settings.wait_s:g} s after each level for the endpoint's "
                "CloudWatch metrics (published late; Ctrl-C keeps what has arrived)")
        for level, task in self._pending:
            section = await task
            section["client_vs_endpoint"] = client_vs_endpoint(section, *level_client_means(level))
            # The series' t_s count from the level's start: on a timeline, this is where
            # they start (perf_counter_ns, the clock of the client's rows).
            section["t0_ns"] = level.start_ns
            level.cloudwatch = section
            add_source(level.timeline, "cloudwatch", level.start_ns)
        self._pending.clear()

    def stop(self) -> None:
        """Stop polling: each fetch ends after its current call, with what it has."""
        self.cancel.set()


def fetch_pending(pending: dict[str, Any], settings: CloudWatchSettings,
                  cancel: threading.Event) -> dict[str, Any]:
    """A level marked ``pending`` (a deferred fetch), fetched now: waiting until
    ``settings.wait_s`` after the level's end at most (no wait once that has passed).
    Blocking: run it in a thread."""
    window = Window(pending["endpoint"], pending["variant"], pending["start_unix_s"],
                    pending["end_unix_s"], pending["period_s"])
    aws = AwsConfig(region=pending.get("region"), endpoint_url=settings.endpoint_url,
                    max_attempts=1)
    left_s = max(0.0, window.end_s + settings.wait_s - time.time())
    section = fetch_level(aws, window, expected_invocations=pending["expected_invocations"],
                          deadline=time.monotonic() + left_s, poll_s=settings.poll_s,
                          cancel=cancel)
    section["client_vs_endpoint"] = client_vs_endpoint(section, *pending["client_means_ms"])
    section["t0_ns"] = pending.get("t0_ns")
    return section
