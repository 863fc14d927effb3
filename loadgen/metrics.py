"""Every derived metric, defined once, recorded into HDR histograms.

A :class:`LevelMetrics` consumes finished :class:`~loadgen.record.RequestRecord`
objects one at a time and keeps only histograms and counters, so memory does
not grow with the number of requests or tokens.

Formulas (all times from ``time.perf_counter_ns``; ``n`` = output tokens;
``first`` = arrival of the first content chunk; ``intended`` = scheduled send
time, equal to the actual send time in closed loop):

=====================  ================================================  ===========
name                   formula                                           recorded in
=====================  ================================================  ===========
ttft_ms                first − intended                                  µs
e2e_ms                 end − intended   (:func:`e2e_ns`)                 µs
itl_ms                 every gap between consecutive content chunks      µs
tpot_ms                (e2e − ttft) / (n − 1)   (n ≥ 2)                  µs
decode_tokens_per_s    (n − 1) / (e2e − ttft)   (n ≥ 2)                  milli-tok/s
schedule_lag_ms        start − intended         (when they differ)       µs
send_lag_ms            sent − intended          (when sent is observed)  µs
=====================  ================================================  ===========

``sent`` is when the request's bytes were written to the socket. ``send_lag_ms`` is the
client's own share of every latency above (scheduling, body building, connection, write):
TTFT is measured from ``intended`` because that is what a user waits, and ``send_lag_ms``
lets a reader tell client delay from server delay. In closed loop ``intended`` is when the
stream's previous response ended (the level start for its first request).

ttft/e2e/tpot/decode come from completed requests only. ITL gaps come from every
request that streamed content, failed or cut off ones included: a gap that was
observed is data. Output tokens of failed/incomplete requests count towards the
level's token total (they were generated inside the window).

Values are integers in the histogram's unit; a value above the histogram's
range is recorded at the top of the range and counted in ``clamped`` (never
silently dropped).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from hdrh.histogram import HdrHistogram

from .record import TOKENS_ESTIMATED, RequestRecord

# Latencies in microseconds, 1 µs .. 1 hour, 3 significant digits.
_LATENCY_RANGE = (1, 3_600_000_000, 3)
# Decode rates in milli-tokens/s, 0.001 .. 10M tok/s.
_RATE_RANGE = (1, 10_000_000_000, 3)

LATENCY_METRICS = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "schedule_lag_ms", "send_lag_ms")
RATE_METRICS = ("decode_tokens_per_s",)
ALL_METRICS = LATENCY_METRICS + RATE_METRICS
# Scale from the histogram's integer unit to the reported unit.
UNIT_SCALE = {**{m: 1e-3 for m in LATENCY_METRICS}, "decode_tokens_per_s": 1e-3}
PERCENTILES = (50, 90, 99)
ERROR_MESSAGES_KEPT = 3  # distinct messages kept per error type

# A p99 from fewer samples than this is (nearly) the largest value seen, not a stable
# percentile: the CLI table and the reports mark such a p99 and say so under the table.
P99_MIN_SAMPLES = 100
FEW_SAMPLES_MARK = "†"
FEW_SAMPLES_NOTE = (f"{FEW_SAMPLES_MARK} fewer than {P99_MIN_SAMPLES} samples: such a p99 is "
                    "close to the largest value seen, not a stable percentile.")


def few_samples(stats: dict | None, key: str) -> bool:
    """Whether ``stats[key]`` (a :func:`summarize` dict) is a p99 from too few samples."""
    stats = stats or {}
    return (key == "p99" and stats.get(key) is not None
            and (stats.get("count") or 0) < P99_MIN_SAMPLES)


def new_histogram(metric: str) -> HdrHistogram:
    low, high, digits = _RATE_RANGE if metric in RATE_METRICS else _LATENCY_RANGE
    return HdrHistogram(low, high, digits)


def summarize(hist: HdrHistogram, scale: float, total: int | None = None) -> dict:
    """``{count, min, mean, p50, p90, p99, max}`` in reported units (None when empty).

    ``total``: the exact sum of recorded values, when the caller kept it; the mean is then
    exact and cheap (hdrh's own mean walks every bucket in Python).
    """
    count = hist.get_total_count()
    if not count:
        return {"count": 0, "min": None, "mean": None, "p50": None, "p90": None, "p99": None,
                "max": None}
    mean = total / count if total is not None else hist.get_mean_value()
    out = {"count": count, "min": hist.get_min_value() * scale, "mean": mean * scale}
    # One walk over the buckets for all percentiles (hdrh walks them in Python).
    values = hist.get_percentile_to_value_dict(list(PERCENTILES))
    for p in PERCENTILES:
        out[f"p{p}"] = values[p] * scale
    out["max"] = hist.get_max_value() * scale
    return out


@dataclass
class Counts:
    completed: int = 0
    failed: int = 0
    incomplete: int = 0
    dropped: int = 0  # open loop: could not start because the in-flight cap was full
    output_tokens: int = 0
    input_tokens: int = 0
    estimated_token_requests: int = 0  # requests whose token count is one-per-chunk
    clamped: int = 0  # histogram values above range, recorded at the top
    exact_input_requests: int = 0  # input_tokens counted with a tokenizer
    server_input_tokens: int = 0  # the server's usage.prompt_tokens, where it sent one
    server_input_requests: int = 0
    input_token_mismatches: int = 0  # tokenizer count != the server's prompt_tokens
    cached_tokens: int = 0  # usage.prompt_tokens_details.cached_tokens, where sent
    cached_token_requests: int = 0

    @property
    def requests(self) -> int:
        """Requests that were sent (dropped ones never were)."""
        return self.completed + self.failed + self.incomplete


class LevelMetrics:
    """Histograms and counters of one level.

    :meth:`add` is on the request path, so it only updates counters and queues the request's
    values; :meth:`fold` records queued values into the histograms later, coalesced (one
    ``record_value`` per distinct value per batch, where hdrh's pure-Python recording costs
    a few µs per call). The engine folds in small slices between socket reads; every reader
    (``hists``, ``counts``, ``summary``, ``encoded``) folds what is left first, so what it
    sees is always complete.
    """

    def __init__(self) -> None:
        self._hists = {m: new_histogram(m) for m in ALL_METRICS}
        self._totals = dict.fromkeys(ALL_METRICS, 0)  # exact sums, for exact means
        self._counts = Counts()
        self.errors: Counter[str] = Counter()
        # The first few distinct messages per error type: what the server actually said.
        self.error_messages: dict[str, list[str]] = {}
        self._highest = {m: h.highest_trackable_value for m, h in self._hists.items()}
        self._values: dict[str, list[int]] = {m: [] for m in ALL_METRICS}  # not yet folded
        self._chunk_times: list[list[int]] = []  # content_ns of requests not yet folded
        self._lowest: dict[int, int] = {}  # gap (µs) -> its ITL histogram bucket

    @property
    def hists(self) -> dict[str, HdrHistogram]:
        self.fold()
        return self._hists

    @property
    def totals(self) -> dict[str, int]:
        self.fold()
        return self._totals

    @property
    def counts(self) -> Counts:
        self.fold()  # ``clamped`` is counted while folding
        return self._counts

    @property
    def pending(self) -> int:
        """Requests whose values are queued but not yet in the histograms."""
        return len(self._chunk_times) + len(self._values["e2e_ms"])

    def add(self, rec: RequestRecord) -> None:
        """Count one finished request and queue its values. The record can be dropped after."""
        c, values = self._counts, self._values
        c.output_tokens += rec.output_tokens
        self._count_input(rec)
        if rec.tokens_source == TOKENS_ESTIMATED and rec.content_ns:
            c.estimated_token_requests += 1
        if len(rec.content_ns) >= 2:
            self._chunk_times.append(rec.content_ns)
        if rec.start_ns and rec.start_ns != rec.intended_ns:
            values["schedule_lag_ms"].append((rec.start_ns - rec.intended_ns) // 1000)
        if rec.sent_ns:
            values["send_lag_ms"].append((rec.sent_ns - rec.intended_ns) // 1000)
        if rec.incomplete:
            c.incomplete += 1
            return
        if rec.error_type is not None:
            c.failed += 1
            self.errors[rec.error_type] += 1
            self._keep_message(rec.error_type, rec.error_message)
            return
        c.completed += 1
        self._queue_latencies(rec)

    def _count_input(self, rec: RequestRecord) -> None:
        c = self._counts
        c.input_tokens += rec.input_tokens or 0
        c.exact_input_requests += rec.input_tokens_exact
        if rec.server_input_tokens is not None:
            c.server_input_tokens += rec.server_input_tokens
            c.server_input_requests += 1
            c.input_token_mismatches += (rec.input_tokens_exact
                                         and rec.server_input_tokens != rec.input_tokens)
        if rec.cached_tokens is not None:
            c.cached_tokens += rec.cached_tokens
            c.cached_token_requests += 1

    def _keep_message(self, error_type: str, message: str | None) -> None:
        kept = self.error_messages.setdefault(error_type, [])
        if message and len(kept) < ERROR_MESSAGES_KEPT and message not in kept:
            kept.append(message)

    def add_dropped(self, count: int = 1) -> None:
        self._counts.dropped += count

    def _queue_latencies(self, rec: RequestRecord) -> None:
        for metric, value in request_latencies(rec).items():
            self._values[metric].append(value)

    def fold(self, max_requests: int | None = None) -> int:
        """Record queued values into the histograms: everything, or the gaps of at most
        ``max_requests`` requests (a slice short enough not to delay socket reads).
        Returns how many requests' gaps are still queued."""
        for metric, queued in self._values.items():
            if queued:
                self._values[metric] = []
                self._record_counted(metric, Counter(queued))
        times = self._chunk_times
        batch = times if max_requests is None else times[:max_requests]
        if batch:
            self._chunk_times = [] if max_requests is None else times[max_requests:]
            self._record_gaps(batch)
        return len(self._chunk_times)

    def _record_gaps(self, batch: list[list[int]]) -> None:
        """ITL gaps of a batch of requests. Gaps are counted by the histogram bucket they fall
        in (hdrh's lowest equivalent value, memoised): a 300-token request then costs a few
        ``record_value`` calls, not 300. The exact sum is kept for the mean."""
        hist, lowest = self._hists["itl_ms"], self._lowest
        counted: Counter[int] = Counter()
        total = 0
        for content_ns in batch:
            gaps = [(b - a) // 1000 for a, b in zip(content_ns, content_ns[1:])]
            total += sum(gaps)
            for gap in gaps:
                bucket = lowest.get(gap)
                if bucket is None:
                    bucket = lowest[gap] = (hist.get_lowest_equivalent_value(gap)
                                            if 0 <= gap <= self._highest["itl_ms"] else gap)
                counted[bucket] += 1
        self._record_counted("itl_ms", counted)
        # The exact sum replaces the bucketed one _record_counted added.
        self._totals["itl_ms"] += total - sum(value * n for value, n in counted.items()
                                              if 0 <= value <= self._highest["itl_ms"])

    def _record_counted(self, metric: str, counted: Counter) -> None:
        hist, highest = self._hists[metric], self._highest[metric]
        total = 0
        for value, count in counted.items():
            if value < 0:  # monotonic clock: only a zero-width race can get here
                value = 0
            if value > highest:
                self._counts.clamped += count
                value = highest
            hist.record_value(value, count)
            total += value * count
        self._totals[metric] += total

    def summary_of(self, metric: str) -> dict:
        return summarize(self.hists[metric], UNIT_SCALE[metric], self._totals[metric])

    def summary(self) -> dict[str, dict]:
        return {m: summarize(h, UNIT_SCALE[m], self._totals[m]) for m, h in self.hists.items()}

    def encoded(self) -> dict[str, str]:
        """Each histogram in the standard compressed HdrHistogram encoding (base64)."""
        return {m: h.encode().decode("ascii") for m, h in self.hists.items()}

    def statistics(self) -> dict:
        """Cheap live snapshot for progress display (counters only: nothing is folded)."""
        c = self._counts
        return {"completed": c.completed, "failed": c.failed, "incomplete": c.incomplete,
                "dropped": c.dropped, "output_tokens": c.output_tokens}


def e2e_ns(rec: RequestRecord) -> int:
    """e2e = end − intended: what a user waits for the whole answer, from when the request
    was due to its last byte (``e2e_ms``; a scenario's ``fixed_length.e2e_s`` too)."""
    return rec.end_ns - rec.intended_ns


def request_latencies(rec: RequestRecord) -> dict[str, int]:
    """The per-request metrics of one completed request, in histogram units (µs,
    milli-tokens/s): ``e2e_ms`` always, ``ttft_ms`` with content, ``tpot_ms`` and
    ``decode_tokens_per_s`` with n >= 2 tokens over a positive decode time."""
    out = {"e2e_ms": e2e_ns(rec) // 1000}
    first = rec.first_content_ns
    if first is None:
        return out
    out["ttft_ms"] = (first - rec.intended_ns) // 1000
    n = rec.output_tokens
    decode_ns = rec.end_ns - first
    if n >= 2 and decode_ns > 0:
        out["tpot_ms"] = decode_ns // (1000 * (n - 1))
        out["decode_tokens_per_s"] = (n - 1) * 10**12 // decode_ns  # milli-tokens per second
    return out


def request_metrics(rec: RequestRecord) -> dict[str, float | int | str | None]:
    """One request's derived metrics in reported units (ms, tokens/s), by the formulas
    above: what ``--save-requests`` writes next to the raw timestamps. ttft/e2e/tpot/decode
    only for a completed request (as the level's), ITL mean and max over its content-chunk
    gaps (any request that streamed two chunks); ``error``: its error type, "incomplete",
    or None."""
    out: dict[str, float | int | str | None] = dict.fromkeys(
        ("ttft_ms", "e2e_ms", "tpot_ms", "decode_tokens_per_s", "itl_mean_ms", "itl_max_ms"))
    if rec.ok:
        for metric, value in request_latencies(rec).items():
            out[metric] = value * UNIT_SCALE[metric]
    gaps = [b - a for a, b in zip(rec.content_ns, rec.content_ns[1:])]
    if gaps:
        out["itl_mean_ms"] = sum(gaps) / len(gaps) / 1e6
        out["itl_max_ms"] = max(gaps) / 1e6
    out["output_tokens"] = rec.output_tokens
    out["error"] = "incomplete" if rec.incomplete else rec.error_type
    return out


def decode_histogram(encoded: str) -> HdrHistogram:
    """Inverse of :meth:`LevelMetrics.encoded`; histograms of levels/runs can be ``add``-ed."""
    return HdrHistogram.decode(encoded)
