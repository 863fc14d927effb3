"""The ``loadgen`` command line: a thin layer over :mod:`loadgen.api`.

Every user-facing failure is a :class:`~loadgen.errors.LoadgenError`, printed as
one ``Error: ...`` line with a non-zero exit; no tracebacks for bad input.
"""

from __future__ import annotations

import asyncio
import functools
import signal
import sys
import time
from typing import Any, Callable, Sequence

import click

from . import __version__
from .api import sweep as api_sweep
from .config import TRANSPORTS, RequestOptions, Timeouts
from .engine import RunControl
from .cli_common import run_async
from .errors import ConfigError
from .cli_workload import check_level_options, workload_from_options, workload_options
from .load import ARRIVALS, ArrivalRate, ConstantConcurrency, Load, StopRule, waves_warning
from .results import format_table
from .saturation import saturation_sweep


def _numbers(text: str | None, kind: Callable[[str], Any], option: str) -> list[Any]:
    if text is None:
        return []
    try:
        values = [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(f"{option} takes a comma-separated list of numbers (got {text!r})") from None
    if not values:
        raise ConfigError(f"{option} needs at least one value")
    return values


def build_loads(concurrency: str | None, rate: str | None, arrival: str,
                max_in_flight: int | None, max_rate: float | None, seed: int) -> list[Load]:
    if concurrency and rate:
        raise ConfigError("use either --concurrency (closed loop) or --rate (open loop), not both")
    if rate:
        if max_rate is not None:
            raise ConfigError("--max-rate caps closed-loop runs; with --rate the rate is the schedule")
        return [ArrivalRate(r, arrival, max_in_flight, seed) for r in _numbers(rate, float, "--rate")]
    if max_in_flight is not None:
        raise ConfigError("--max-in-flight applies to --rate runs; --concurrency is already a cap")
    return [ConstantConcurrency(c, max_rate)
            for c in _numbers(concurrency or "1", int, "--concurrency")]


def load_options(f: Callable) -> Callable:
    """Options shared by ``run`` and ``sweep``."""
    options = [
        click.option("--target", metavar="URL", help="http://host:port (vLLM/OpenAI) or "
                     "sagemaker://ENDPOINT. Omit to use the built-in simulator."),
        click.option("--api", type=click.Choice(["chat", "completions"]), default="chat",
                     show_default=True),
        click.option("--model", help="Model id (default: ask the server's /v1/models)."),
        click.option("--rate", metavar="R[,R...]", help="Open loop: requests/s per level."),
        click.option("--arrival", type=click.Choice(ARRIVALS), default="constant",
                     show_default=True, help="Open-loop arrival process."),
        click.option("--max-in-flight", type=int, help="Open loop: cap in-flight requests; "
                     "requests due while full are counted as dropped."),
        click.option("--max-rate", type=float, help="Closed loop: cap on requests/s."),
        click.option("--seed", type=int, default=0, show_default=True,
                     help="Seed for Poisson arrivals and dataset sampling."),
        click.option("--requests", "n_requests", type=int,
                     help="Measured requests per level (default: 4 waves of the level's "
                     "concurrency, at least 20, if no --duration)."),
        click.option("--duration", type=float, metavar="S", help="Seconds per level."),
        click.option("--warmup", type=int, default=0, show_default=True,
                     help="Warm-up requests per level, excluded from metrics."),
        click.option("--graceful-stop", type=float, default=30.0, show_default=True,
                     metavar="S", help="Seconds in-flight requests get after the stop point."),
        click.option("--input-tokens", type=int, default=128, show_default=True,
                     help="Length of synthetic prompts."),
        click.option("--output-tokens", type=int,
                     help="max_tokens per request (default: a dataset row's own, else 128)."),
        click.option("--min-tokens", type=int, help="vLLM min_tokens."),
        click.option("--ignore-eos/--no-ignore-eos", default=True, show_default=True,
                     help="vLLM: generate exactly --output-tokens."),
        click.option("--stream/--no-stream", default=True, show_default=True),
        click.option("--continuous-usage", is_flag=True,
                     help="Ask vLLM for per-chunk usage (exact tokens per chunk)."),
        click.option("--prompts", "prompts_file", type=click.Path(dir_okay=False),
                     help="JSONL file of prompts."),
        click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True,
                     help="Environment variable holding the API key."),
        click.option("--timeout", type=float, default=600.0, show_default=True,
                     help="Total seconds per request."),
        click.option("--idle-timeout", type=float, default=120.0, show_default=True,
                     help="Max seconds between two reads of a stream."),
        click.option("--connect-timeout", type=float, default=10.0, show_default=True),
        click.option("--transport", type=click.Choice(TRANSPORTS), default="stream",
                     show_default=True, help="HTTP client: loadgen's streaming transport, or "
                     "aiohttp (to compare)."),
        click.option("--server-metrics-interval", type=float, default=1.0, show_default=True,
                     metavar="S", help="vLLM HTTP targets: sample /metrics every S seconds "
                     "during each level (0: off)."),
        click.option("--region", help="SageMaker: AWS region."),
        click.option("--endpoint-url", help="SageMaker: runtime endpoint URL override."),
        click.option("--inference-component", help="SageMaker: inference component name."),
        click.option("--custom-attributes", help="SageMaker: X-Amzn-SageMaker-Custom-Attributes."),
        click.option("--target-variant", help="SageMaker: production variant."),
        click.option("--payload-format", default="auto", show_default=True,
                     type=click.Choice(["auto", "openai", "lmi", "tgi", "raw"]),
                     help="SageMaker: container payload format."),
        click.option("--out", type=click.Path(dir_okay=False),
                     help="Results JSON (default: loadgen-YYYYmmdd-HHMMSS.json)."),
        click.option("--quiet", is_flag=True, help="No progress line, no table."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _install_ctrl_c(control: RunControl) -> None:
    """First Ctrl-C: stop and write what was measured (partial). Second: abort."""
    loop = asyncio.get_running_loop()

    def first() -> None:
        click.echo("\nstopping: writing what was measured (Ctrl-C again to abort)", err=True)
        control.stop()
        loop.remove_signal_handler(signal.SIGINT)

    try:
        loop.add_signal_handler(signal.SIGINT, first)
    except (NotImplementedError, RuntimeError):  # not the main thread / Windows
        pass


class _Progress:
    """One status line on stderr, rewritten in place (TTY only)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, load: Load, snap: dict) -> None:
        if self.enabled:
            sys.stderr.write(f"\r{load.label}: {snap['elapsed_s']:.0f}s  done {snap['completed']}"
                             f"  failed {snap['failed']}  in flight {snap['in_flight']}  "
                             f"tokens {snap['output_tokens']}   ")
            sys.stderr.flush()

    def level_done(self, level: Any) -> None:
        if self.enabled:
            sys.stderr.write("\r\033[K")
        if level.client.warning:
            click.echo(f"warning: {level.load.label}: {level.client.warning}", err=True)


async def _run_command(loads: Sequence[Load], kw: dict[str, Any]) -> None:
    workload = workload_from_options(kw)
    if workload.trace:
        loads = [workload.trace_load()]
    stop = StopRule(kw["n_requests"], kw["duration"], kw["warmup"], kw["graceful_stop"],
                    ramp_up_s=kw["ramp_up"])
    options = RequestOptions(
        api=kw["api"], model=kw["model"], stream=kw["stream"], ignore_eos=kw["ignore_eos"],
        continuous_usage=kw["continuous_usage"], api_key_env=kw["api_key_env"],
        timeouts=Timeouts(kw["connect_timeout"], kw["timeout"], kw["idle_timeout"]),
        transport=kw["transport"])
    prompts = workload.prompt_source()
    out = kw["out"] or time.strftime("loadgen-%Y%m%d-%H%M%S.json")
    sagemaker = {k: kw[k] for k in ("region", "endpoint_url", "inference_component",
                                    "custom_attributes", "target_variant", "payload_format")}
    control = RunControl()
    _install_ctrl_c(control)
    progress = _Progress(not kw["quiet"] and sys.stderr.isatty())

    def on_level(level: Any) -> None:
        progress.level_done(level)
        warning = waves_warning(level.load, level.metrics.counts.requests)
        if warning:
            click.echo(f"warning: {warning}", err=True)

    runner = functools.partial(api_sweep, loads=loads)
    if workload.profile == "saturation":  # levels chosen as the run goes
        runner = functools.partial(saturation_sweep, rates=workload.profile_rates,
                                   concurrency=workload.saturation_concurrency)
    result = await runner(kw["target"], stop=stop, options=options,
                             prompts=prompts, workload=workload, out=out, control=control,
                             on_progress=progress, on_level=on_level,
                             server_metrics_interval_s=kw["server_metrics_interval"] or None,
                             **sagemaker)
    data = result.to_dict()
    if not kw["quiet"]:
        title = data["target"].get("url", "")
        if result.simulated:
            title = f"built-in simulator (SIMULATED) {title}"
        click.echo(f"{title}  model={data['target'].get('model')}")
        click.echo(format_table(data["levels"]))
        if data["target"].get("stream") is False:
            click.echo("non-streaming: TTFT is the full latency (the whole body arrives at once)")
    note = " (partial: stopped early)" if result.partial else ""
    click.echo(f"results: {out}{note}", err=True)
    if result.partial:
        sys.exit(130)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="loadgen")
def cli() -> None:
    """Load generator for LLM inference endpoints (vLLM HTTP, Amazon SageMaker)."""


@cli.command()
@click.option("--concurrency", metavar="N", help="Closed loop: concurrent streams (default 1).")
@load_options
@workload_options
@run_async
async def run(concurrency: str | None, **kw: Any) -> None:
    """Measure one load level."""
    check_level_options(concurrency, kw)
    if kw["profile"]:
        raise ConfigError("--profile runs several levels; use `loadgen sweep --profile ...`")
    if (concurrency and "," in concurrency) or (kw["rate"] and "," in kw["rate"]):
        raise ConfigError("run measures one level; use `loadgen sweep` for several values")
    loads = build_loads(concurrency, kw["rate"], kw["arrival"], kw["max_in_flight"],
                        kw["max_rate"], kw["seed"])
    await _run_command(loads, kw)


@cli.command()
@click.option("--concurrency", metavar="N[,N...]",
              help="Closed loop: concurrency levels (default 1,4,16).")
@load_options
@workload_options
@run_async
async def sweep(concurrency: str | None, **kw: Any) -> None:
    """Measure several load levels, each separately, into one results file."""
    check_level_options(concurrency, kw)
    if concurrency is None and kw["rate"] is None and not (kw["trace"] or kw["profile"]):
        concurrency = "1,4,16"
    loads = build_loads(concurrency, kw["rate"], kw["arrival"], kw["max_in_flight"],
                        kw["max_rate"], kw["seed"])
    await _run_command(loads, kw)


# Commands that live in their own modules.
from .cli_endpoint import endpoint, facts  # noqa: E402
from .cli_report import compare, report  # noqa: E402
from .scenario.cli import scenario  # noqa: E402
from .simulator import mock_server_command  # noqa: E402

for _command in (mock_server_command, endpoint, facts, report, compare, scenario):
    cli.add_command(_command)


def main() -> None:
    cli(prog_name="loadgen")


if __name__ == "__main__":
    main()
