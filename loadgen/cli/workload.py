"""The workload options of ``run`` and ``sweep`` (tokenizer, dataset, SLOs, exports),
gathered into one :class:`~loadgen.workload.WorkloadSettings`."""

from __future__ import annotations

from typing import Any, Callable

import click

from ..datasets import FORMATS
from ..errors import ConfigError
from ..workload import WorkloadSettings

_OPTIONS = [
    click.option("--tokenizer", metavar="PATH", help="Local Hugging Face tokenizer directory or "
                 "tokenizer.json: exact prompt lengths and input token counts "
                 "(pip install 'loadgen[tokenizer]')."),
    click.option("--input-tokens-stdev", type=float, default=0.0, show_default=True,
                 help="Synthetic prompt lengths: normal around --input-tokens."),
    click.option("--output-tokens-stdev", type=float, default=0.0, show_default=True,
                 help="max_tokens: normal around --output-tokens (or the dataset's)."),
    click.option("--dataset", type=click.Path(dir_okay=False), help="Prompts from a file: "
                 "ShareGPT JSON, JSONL (prompt or messages, optional max_tokens), or text."),
    click.option("--dataset-format", type=click.Choice(FORMATS), default="auto",
                 show_default=True, help="Dataset format (auto: by suffix, then content)."),
    click.option("--sample-with-replacement", is_flag=True,
                 help="Draw dataset rows independently (default: shuffled passes, seeded by "
                 "--seed)."),
    click.option("--shared-prefix-tokens", type=int, default=0, show_default=True,
                 help="Synthetic prompts of a group start with the same N tokens."),
    click.option("--prefix-groups", type=int, default=1, show_default=True,
                 help="Number of distinct shared prefixes (requests cycle through them)."),
    click.option("--ramp-up", type=float, default=0.0, show_default=True, metavar="S",
                 help="Start each level's streams spread over S seconds (rates ramp "
                 "linearly); requests started meanwhile are not measured."),
    click.option("--turns", type=int, default=1, show_default=True,
                 help="Multi-turn sessions of N turns (ShareGPT: the conversation's own, at "
                 "most N), each request carrying the history; metrics per turn too."),
    click.option("--think-time", type=float, default=0.0, show_default=True, metavar="S",
                 help="Pause between an answer and the session's next turn."),
    click.option("--slo", "slos", multiple=True, metavar="SPEC",
                 help="Latency SLO, repeatable: ttft_ms<=500 (each request), "
                 "e2e_ms:p99<=8000 (the level), decode_tokens_per_s>=20. Adds goodput."),
    click.option("--save-requests", type=click.Path(dir_okay=False), metavar="FILE.jsonl",
                 help="Write one JSON line per request (raw timestamps, tokens, errors)."),
    click.option("--hdr-log", type=click.Path(file_okay=False), metavar="DIR",
                 help="Write interval histograms per level and metric (HdrHistogram log "
                 "format)."),
    click.option("--hdr-interval", type=float, default=5.0, show_default=True, metavar="S",
                 help="Interval of --hdr-log histograms."),
    click.option("--trace", type=click.Path(dir_okay=False), metavar="FILE.jsonl",
                 help="Replay a Mooncake trace (timestamp, input_length, output_length, "
                 "hash_ids) on its own schedule: one open-loop level."),
    click.option("--trace-speedup", type=float, default=1.0, show_default=True, metavar="X",
                 help="Replay the trace X times faster."),
    click.option("--trace-block-tokens", type=int, default=512, show_default=True,
                 help="Prompt tokens per trace hash id (512 in the Mooncake release)."),
    click.option("--profile", type=click.Choice(["saturation"]),
                 help="saturation: measure one stream and --saturation-concurrency streams, "
                 "then --profile-rates constant rates evenly between their request rates."),
    click.option("--profile-rates", type=int, default=5, show_default=True,
                 help="Rate levels of --profile saturation."),
    click.option("--saturation-concurrency", type=int, default=64, show_default=True,
                 help="Streams of --profile saturation's unthrottled level."),
]

_KEYS = ("turns", "think_time", "tokenizer", "input_tokens_stdev", "output_tokens_stdev",
         "dataset", "dataset_format", "sample_with_replacement", "shared_prefix_tokens", "prefix_groups", "slos",
         "save_requests", "hdr_log", "hdr_interval", "trace", "trace_speedup",
         "trace_block_tokens", "profile", "profile_rates", "saturation_concurrency")


def workload_options(f: Callable) -> Callable:
    for option in reversed(_OPTIONS):
        f = option(f)
    return f


def check_level_options(concurrency: str | None, kw: dict[str, Any]) -> None:
    """A trace and a profile choose their own levels: no level options beside them."""
    if kw["trace"] and kw["profile"]:
        raise ConfigError("use --trace or --profile, not both")
    if kw["trace"] and (concurrency or kw["rate"]):
        raise ConfigError("--trace replays the trace's own schedule; drop --concurrency/--rate")
    if kw["profile"] and (concurrency or kw["rate"]):
        raise ConfigError("--profile saturation chooses its own levels; drop "
                          "--concurrency/--rate")
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
