"""Latency SLOs and goodput, evaluated in one place from each RequestRecord.

``--slo`` takes ``METRIC<=VALUE`` (a per-request SLO: every request is judged) or
``METRIC:pNN<=VALUE`` (a percentile SLO: the level is judged), e.g.
``ttft_ms<=500``, ``tpot_ms<=50``, ``e2e_ms:p99<=8000``, ``decode_tokens_per_s>=20``.
Values are in the metric's reported unit (ms, tokens/s).

- A request is *good* when it completed and met every per-request SLO. Per-request
  values come from :func:`loadgen.metrics.request_latencies` (the same formulas as the
  histograms). A request with fewer than 2 output tokens has no TPOT/decode rate and
  passes those SLOs (vLLM scores its TPOT as 0); one with no content fails a TTFT SLO.
- ``goodput`` = good requests / level window (req/s), and their output tokens / window;
  ``good_fraction`` = good requests / requests sent (completed + failed + incomplete).
- Each SLO's pass rate = completed requests meeting its threshold / completed requests.
- A percentile SLO is met when the level's histogram percentile (the number the table
  shows, 3 significant digits) is within the threshold. Percentile SLOs judge the level
  and do not decide whether a single request is good.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from hdrh.histogram import HdrHistogram

from .errors import ConfigError
from .metrics import ALL_METRICS, RATE_METRICS, UNIT_SCALE, request_latencies
from .record import RequestRecord

# Metrics a single request has a value of (see metrics.request_latencies).
PER_REQUEST_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms", "decode_tokens_per_s")
# Without a value, a request passes these (nothing was decoded to judge).
_PASS_WHEN_MISSING = ("tpot_ms", "decode_tokens_per_s")
_SYNTAX = re.compile(r"^\s*([a-z0-9_]+)\s*(?::\s*p(\d+(?:\.\d+)?))?\s*(<=|>=)\s*([0-9.eE+-]+)\s*$")


@dataclass(frozen=True)
class SLO:
    metric: str
    threshold: float  # in reported units (ms, tokens/s)
    percentile: float | None = None  # None: a per-request SLO

    @property
    def at_least(self) -> bool:
        """Rates must be at least the threshold; latencies at most."""
        return self.metric in RATE_METRICS

    @property
    def text(self) -> str:
        where = f":p{self.percentile:g}" if self.percentile is not None else ""
        return f"{self.metric}{where}{'>=' if self.at_least else '<='}{self.threshold:g}"

    def meets(self, value: float) -> bool:
        return value >= self.threshold if self.at_least else value <= self.threshold


def parse_slo(text: str) -> SLO:
    """``"ttft_ms:p99<=500"`` -> SLO; a one-line ConfigError saying what is wrong."""
    match = _SYNTAX.match(text)
    usage = "write METRIC<=VALUE or METRIC:pNN<=VALUE, e.g. ttft_ms:p99<=500 or tpot_ms<=50"
    if not match:
        raise ConfigError(f"--slo {text!r}: {usage}")
    metric, percentile, op, value = match.groups()
    if metric not in ALL_METRICS:
        raise ConfigError(f"--slo {text!r}: unknown metric {metric!r}; one of "
                          f"{', '.join(ALL_METRICS)}")
    if percentile is None and metric not in PER_REQUEST_METRICS:
        raise ConfigError(f"--slo {text!r}: {metric} has no single value per request; "
                          f"give a percentile, e.g. {metric}:p99{op}{value}")
    try:
        threshold = float(value)
    except ValueError:
        raise ConfigError(f"--slo {text!r}: {value!r} is not a number; {usage}") from None
    slo = SLO(metric, threshold, float(percentile) if percentile is not None else None)
    if op != (">=" if slo.at_least else "<="):
        raise ConfigError(f"--slo {text!r}: {metric} is "
                          f"{'a rate: use >=' if slo.at_least else 'a latency: use <='}")
    if slo.percentile is not None and not 0 < slo.percentile <= 100:
        raise ConfigError(f"--slo {text!r}: the percentile must be in (0, 100]")
    return slo


def request_verdicts(rec: RequestRecord, slos: Sequence[SLO]) -> list[bool | None]:
    """For each SLO, whether this completed request met its threshold (None: the metric
    has no per-request value)."""
    values = request_latencies(rec)
    verdicts: list[bool | None] = []
    for slo in slos:
        if slo.metric not in PER_REQUEST_METRICS:
            verdicts.append(None)
        elif slo.metric not in values:
            verdicts.append(slo.metric in _PASS_WHEN_MISSING)
        else:
            verdicts.append(slo.meets(values[slo.metric] * UNIT_SCALE[slo.metric]))
    return verdicts


def is_good(rec: RequestRecord, slos: Sequence[SLO]) -> bool:
    """Completed, and met every per-request SLO."""
    if not rec.ok:
        return False
    verdicts = request_verdicts(rec, slos)
    return all(v for slo, v in zip(slos, verdicts) if slo.percentile is None)


class SLOCounts:
    """Per-level SLO tallies; merges with another level's (worker processes)."""

    def __init__(self, slos: Sequence[SLO]) -> None:
        self.slos = tuple(slos)
        self.evaluated = 0  # completed requests
        self.passed = [0] * len(self.slos)
        self.good = 0
        self.good_output_tokens = 0

    def add(self, rec: RequestRecord) -> None:
        if not rec.ok:
            return
        self.evaluated += 1
        verdicts = request_verdicts(rec, self.slos)
        for i, verdict in enumerate(verdicts):
            self.passed[i] += bool(verdict)
        if all(v for slo, v in zip(self.slos, verdicts) if slo.percentile is None):
            self.good += 1
            self.good_output_tokens += rec.output_tokens

    def merge(self, other: "SLOCounts") -> None:
        self.evaluated += other.evaluated
        self.passed = [a + b for a, b in zip(self.passed, other.passed)]
        self.good += other.good
        self.good_output_tokens += other.good_output_tokens

    def to_dict(self, window_s: float, hists: dict[str, HdrHistogram], sent: int) -> dict:
        """The results file's ``goodput`` object of one level; ``sent``: the level's
        completed + failed + incomplete requests (``good_fraction``'s denominator)."""
        per_slo = [self._slo_dict(i, slo, hists) for i, slo in enumerate(self.slos)]
        percentile = [s["met"] for s in per_slo if s["kind"] == "percentile"]
        return {
            "slos": [slo.text for slo in self.slos],
            "good_requests": self.good,
            "requests_per_s": round(self.good / window_s, 4) if window_s > 0 else 0.0,
            "output_tokens_per_s": (round(self.good_output_tokens / window_s, 3)
                                    if window_s > 0 else 0.0),
            "good_output_tokens": self.good_output_tokens,
            "good_fraction": round(self.good / sent, 4) if sent else None,
            "evaluated_requests": self.evaluated,
            "per_slo": per_slo,
            "percentile_slos_met": all(percentile) if percentile else None,
        }

    def _slo_dict(self, i: int, slo: SLO, hists: dict[str, HdrHistogram]) -> dict:
        per_request = slo.metric in PER_REQUEST_METRICS
        out = {"slo": slo.text, "kind": "request" if slo.percentile is None else "percentile",
               "passed": self.passed[i] if per_request else None,
               "pass_rate": (round(self.passed[i] / self.evaluated, 4)
                             if per_request and self.evaluated else None)}
        if slo.percentile is not None:
            hist = hists[slo.metric]
            value = (hist.get_value_at_percentile(slo.percentile) * UNIT_SCALE[slo.metric]
                     if hist.get_total_count() else None)
            out["value"] = round(value, 3) if value is not None else None
            out["met"] = value is not None and slo.meets(value)
        return out
