"""The workload options of ``run`` and ``sweep`` (tokenizer, dataset, SLOs, exports;
defined in :mod:`.options`), gathered into one :class:`~loadgen.workload.settings.WorkloadSettings`."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from ..workload.settings import WorkloadSettings

_KEYS = ("turns", "think_time", "tokenizer", "input_tokens_stdev", "output_tokens_stdev",
         "dataset", "dataset_format", "sample_with_replacement", "shared_prefix_tokens", "prefix_groups", "slos",
         "save_requests", "hdr_log", "hdr_interval", "trace", "trace_speedup",
         "trace_block_tokens", "profile", "profile_rates", "saturation_concurrency",
         "rate_search", "search_precision", "max_probes")


def check_level_options(concurrency: str | None, kw: dict[str, Any]) -> None:
    """A trace and a profile choose their own levels: no level options beside them."""
    if kw["trace"] and kw["profile"]:
        raise ConfigError("use --trace or --profile, not both")
    if kw["trace"] and (concurrency or kw["rate"]):
        raise ConfigError("--trace replays the trace's own schedule; drop --concurrency/--rate")
    if kw["profile"] == "saturation" and (concurrency or kw["rate"]):
        raise ConfigError("--profile saturation chooses its own levels; drop "
                          "--concurrency/--rate")
    if kw["profile"] == "slo-search" and ("," in (concurrency or "") or "," in (kw["rate"] or "")):
        raise ConfigError("--profile slo-search takes one --concurrency (or --rate with "
                          "--rate-search) to start from, not a list")
    if kw["rate_search"] and kw["profile"] != "slo-search":
        raise ConfigError("--rate-search applies to --profile slo-search")
    if kw["trace"] and kw["ramp_up"]:
        raise ConfigError("--ramp-up does not apply to --trace (the trace has its own timing)")
    if kw["trace"] and kw["warmup"]:
        raise ConfigError("--warmup does not apply to --trace (the trace is replayed once)")


def workload_from_options(kw: dict[str, Any]) -> WorkloadSettings:
    """Pops this module's options from ``kw``; reads the shared prompt options."""
    mine = {key: kw.pop(key) for key in _KEYS}
    return WorkloadSettings.with_slo_texts(
        tuple(mine.pop("slos")), hdr_interval_s=mine.pop("hdr_interval"),
        think_s=mine.pop("think_time"),
        input_tokens_stdev=mine.pop("input_tokens_stdev"),
        output_tokens_stdev=mine.pop("output_tokens_stdev"),
        input_tokens=kw["input_tokens"], output_tokens=kw["output_tokens"],
        min_tokens=kw["min_tokens"], prompts_file=kw["prompts_file"], seed=kw["seed"], **mine)
