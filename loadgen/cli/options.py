"""The options of ``loadgen run`` and ``loadgen sweep``, grouped by purpose for ``--help``.

Each group is a cloup option group (a heading in ``--help``); every option belongs to one
(tests/test_cli_help.py checks it, so a new option can't be added ungrouped). Defaults are
read from the run configuration's dataclasses (:mod:`loadgen.runconfig`): defined there,
once. Every numeric option names its unit (s, ms, tokens, req/s, requests, streams) and
shows its default; where the default is "none" the help says what that means.
"""

from __future__ import annotations

from typing import Callable

import click
import cloup

from ..codecs.sagemaker_formats import PAYLOAD_FORMATS
from ..config import APIS, TRANSPORTS, RequestOptions, Timeouts
from ..load import ARRIVALS, ArrivalRate, StopRule
from ..runconfig import RunConfig, TargetConfig, default
from ..workload.datasets import FORMATS
from ..workload.settings import WorkloadSettings

request, timeouts, workload = RequestOptions, Timeouts, WorkloadSettings


def _target() -> Callable:
    return cloup.option_group(
        "Target",
        click.option("--target", metavar="URL", show_default="the built-in simulator",
                     help="http://host:port (vLLM/OpenAI) or sagemaker://ENDPOINT."),
        click.option("--api", type=click.Choice(APIS), default=default(request, "api"),
                     help="OpenAI API the requests use."),
        click.option("--model", show_default="ask the server's /v1/models",
                     help="Model id sent with each request."),
        click.option("--api-key-env", default=default(request, "api_key_env"),
                     help="Environment variable holding the API key."),
        click.option("--transport", type=click.Choice(TRANSPORTS),
                     default=default(request, "transport"),
                     help="HTTP client: loadgen's streaming transport, or aiohttp (to compare)."),
    )


def _load(concurrency: Callable) -> Callable:
    return cloup.option_group(
        "Load (per level)",
        concurrency,
        click.option("--rate", metavar="REQ/S[,REQ/S...]", show_default="closed loop",
                     help="Open loop: arrival rate of each level, in requests/s."),
        click.option("--arrival", type=click.Choice(ARRIVALS),
                     default=default(ArrivalRate, "arrival"), help="Open-loop arrival process."),
        click.option("--max-in-flight", type=int, metavar="REQUESTS", show_default="no cap",
                     help="Open loop: cap on requests in flight; requests due while full are "
                          "counted as dropped."),
        click.option("--max-rate", type=float, metavar="REQ/S", show_default="no cap",
                     help="Closed loop: cap on requests/s."),
        click.option("--requests", "n_requests", type=int, metavar="REQUESTS",
                     show_default="4 waves of the concurrency, at least 20, if no --duration",
                     help="Measured requests per level."),
        click.option("--duration", type=float, metavar="S", show_default="end by --requests",
                     help="Seconds per level."),
        click.option("--warmup", type=int, default=default(StopRule, "warmup"),
                     metavar="REQUESTS", help="Warm-up requests per level, excluded from metrics."),
        click.option("--ramp-up", type=float, default=default(StopRule, "ramp_up_s"), metavar="S",
                     help="Seconds over which each level's streams start (rates ramp "
                          "linearly); requests started meanwhile are not measured."),
        click.option("--graceful-stop", type=float, default=default(StopRule, "graceful_stop_s"),
                     metavar="S", help="Seconds in-flight requests get after the stop point."),
        click.option("--seed", type=int, default=default(ArrivalRate, "seed"),
                     help="Seed for Poisson arrivals and dataset sampling."),
        click.option("--profile", type=click.Choice(["saturation", "slo-search"]),
                     show_default="none",
                     help="saturation: measure one stream and --saturation-concurrency "
                          "streams, then --profile-rates constant rates evenly between their "
                          "request rates. slo-search: the highest concurrency (or rate, "
                          "--rate-search) meeting every --slo, by doubling then bisection."),
        click.option("--profile-rates", type=int, metavar="LEVELS",
                     default=default(workload, "profile_rates"),
                     help="Rate levels of --profile saturation."),
        click.option("--saturation-concurrency", type=int, metavar="STREAMS",
                     default=default(workload, "saturation_concurrency"),
                     help="Streams of --profile saturation's unthrottled level."),
        click.option("--rate-search", is_flag=True, default=default(workload, "rate_search"),
                     help="--profile slo-search: search open-loop rates (from --rate, "
                          "default 1/s) instead of concurrency."),
        click.option("--search-precision", type=float, metavar="FRACTION",
                     default=default(workload, "search_precision"),
                     help="--profile slo-search stops when (high - low) / low is at most "
                          "this."),
        click.option("--max-probes", type=int, metavar="LEVELS",
                     default=default(workload, "max_probes"),
                     help="--profile slo-search: most levels it probes."),
    )


def _requests() -> Callable:
    return cloup.option_group(
        "Requests",
        click.option("--input-tokens", type=int, metavar="TOKENS",
                     default=default(workload, "input_tokens"),
                     help="Length of synthetic prompts, in tokens."),
        click.option("--input-tokens-stdev", type=float, metavar="TOKENS",
                     default=default(workload, "input_tokens_stdev"),
                     help="Synthetic prompt lengths: normal around --input-tokens."),
        click.option("--output-tokens", type=int, metavar="TOKENS",
                     show_default="a dataset row's own, else 128",
                     help="max_tokens of each request."),
        click.option("--output-tokens-stdev", type=float, metavar="TOKENS",
                     default=default(workload, "output_tokens_stdev"),
                     help="max_tokens: normal around --output-tokens (or the dataset's)."),
        click.option("--min-tokens", type=int, metavar="TOKENS", show_default="not sent",
                     help="vLLM min_tokens."),
        click.option("--ignore-eos/--no-ignore-eos", default=default(request, "ignore_eos"),
                     help="vLLM: generate exactly --output-tokens."),
        click.option("--stream/--no-stream", default=default(request, "stream"),
                     help="Stream tokens (--no-stream: TTFT is the whole latency)."),
        click.option("--continuous-usage", is_flag=True,
                     default=default(request, "continuous_usage"),
                     help="Ask vLLM for per-chunk usage (exact tokens per chunk)."),
        click.option("--shared-prefix-tokens", type=int, metavar="TOKENS",
                     default=default(workload, "shared_prefix_tokens"),
                     help="Synthetic prompts of a group start with the same N tokens."),
        click.option("--prefix-groups", type=int, metavar="PREFIXES",
                     default=default(workload, "prefix_groups"),
                     help="Number of distinct shared prefixes (requests cycle through them)."),
        click.option("--turns", type=int, metavar="TURNS", default=default(workload, "turns"),
                     help="Multi-turn sessions of N turns (ShareGPT: the conversation's own, "
                          "at most N), each request carrying the history; metrics per turn too."),
        click.option("--think-time", type=float, metavar="S", default=default(workload, "think_s"),
                     help="Seconds between an answer and the session's next turn."),
    )


def _workload() -> Callable:
    return cloup.option_group(
        "Workload (prompts, datasets, traces)",
        click.option("--prompts", "prompts_file", type=click.Path(dir_okay=False),
                     metavar="FILE.jsonl", help="Prompts sent in file order."),
        click.option("--dataset", type=click.Path(dir_okay=False), metavar="FILE",
                     help="Prompts from a file: ShareGPT JSON, JSONL (prompt or messages, "
                          "optional max_tokens), or text."),
        click.option("--dataset-format", type=click.Choice(FORMATS),
                     default=default(workload, "dataset_format"),
                     help="Dataset format (auto: by suffix, then content)."),
        click.option("--sample-with-replacement", is_flag=True,
                     help="Draw dataset rows independently (default: shuffled passes, seeded "
                          "by --seed)."),
        click.option("--tokenizer", metavar="PATH",
                     help="Local Hugging Face tokenizer directory or tokenizer.json: exact "
                          "prompt lengths and input token counts "
                          "(pip install 'loadgen[tokenizer]')."),
        click.option("--trace", type=click.Path(dir_okay=False), metavar="FILE.jsonl",
                     help="Replay a Mooncake trace (timestamp, input_length, output_length, "
                          "hash_ids) on its own schedule: one open-loop level."),
        click.option("--trace-speedup", type=float, metavar="TIMES",
                     default=default(workload, "trace_speedup"),
                     help="Replay the trace this many times faster."),
        click.option("--trace-block-tokens", type=int, metavar="TOKENS",
                     default=default(workload, "trace_block_tokens"),
                     help="Prompt tokens per trace hash id (512 in the Mooncake release)."),
    )


def _timeouts() -> Callable:
    return cloup.option_group(
        "Timeouts (per request)",
        click.option("--timeout", type=float, metavar="S", default=default(timeouts, "total_s"),
                     help="Seconds a request may take in total."),
        click.option("--idle-timeout", type=float, metavar="S",
                     default=default(timeouts, "idle_s"),
                     help="Most seconds between two reads of a stream."),
        click.option("--connect-timeout", type=float, metavar="S",
                     default=default(timeouts, "connect_s"),
                     help="Seconds to open a connection."),
    )


def _sagemaker() -> Callable:
    return cloup.option_group(
        "SageMaker (sagemaker:// targets only)",
        click.option("--region", show_default="AWS_REGION / your profile", help="AWS region."),
        click.option("--endpoint-url", metavar="URL", help="Runtime endpoint URL override."),
        click.option("--inference-component", help="Inference component name."),
        click.option("--custom-attributes", help="X-Amzn-SageMaker-Custom-Attributes."),
        click.option("--target-variant", help="Production variant."),
        click.option("--payload-format", type=click.Choice(PAYLOAD_FORMATS),
                     default=default(TargetConfig, "payload_format"),
                     help="Container payload format."),
    )


def _client() -> Callable:
    return cloup.option_group(
        "Load generator processes",
        click.option("--workers", default=str(default(RunConfig, "workers")), metavar="N|auto",
                     help="Worker processes generating the load (auto: min(cores - 1, what "
                          "the load needs)). Results are merged into one file."),
        click.option("--ray", metavar="ADDRESS", help="Generate the load with Ray actors: "
                     "'auto' (the cluster the environment points at), 'local' (start one) or "
                     "ray://HOST:PORT. Needs loadgen[ray]."),
    )


def _output() -> Callable:
    return cloup.option_group(
        "Measurement and output",
        click.option("--out", type=click.Path(dir_okay=False, allow_dash=True),
                     metavar="FILE.json", show_default="loadgen-YYYYmmdd-HHMMSS.json",
                     help="Results JSON; - for stdout."),
        click.option("--quiet", is_flag=True, help="No progress line, no table."),
        click.option("--slo", "slos", multiple=True, metavar="SPEC",
                     help="Latency SLO, repeatable: ttft_ms<=500 (each request), "
                          "e2e_ms:p99<=8000 (the level), decode_tokens_per_s>=20. Adds goodput."),
        click.option("--server-metrics-interval", type=float, metavar="S",
                     default=default(RunConfig, "server_metrics_interval_s"),
                     help="vLLM HTTP targets: sample /metrics every S seconds during each "
                          "level (0: off)."),
        click.option("--save-requests", type=click.Path(dir_okay=False), metavar="FILE.jsonl",
                     help="Write one JSON line per request (raw timestamps, tokens, errors)."),
        click.option("--hdr-log", type=click.Path(file_okay=False), metavar="DIR",
                     help="Write interval histograms per level and metric (HdrHistogram log "
                          "format)."),
        click.option("--hdr-interval", type=float, metavar="S",
                     default=default(workload, "hdr_interval_s"),
                     help="Seconds per --hdr-log interval histogram."),
    )


def run_options(concurrency: Callable) -> Callable:
    """Decorate ``run`` or ``sweep`` with every option, in help order. ``concurrency``: the
    command's own ``--concurrency`` option (one level, or a list)."""
    groups = [_target(), _load(concurrency), _requests(), _workload(), _timeouts(),
              _sagemaker(), _client(), _output()]

    def decorate(f: Callable) -> Callable:
        for group in reversed(groups):
            f = group(f)
        return f

    return decorate
