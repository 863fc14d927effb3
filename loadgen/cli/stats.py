"""``loadgen facts --stats``: vLLM's periodic stats lines as a server series."""

from __future__ import annotations

import json
import sys

import click

from ..errors import ConfigError


def print_stats(log_file: str | None, endpoint_name: str | None, url: str | None,
                since: float | None, as_json: bool, region: str | None,
                endpoint_url: str | None) -> None:
    """``loadgen facts --stats``: the stats lines of a log file or an endpoint's CloudWatch log."""
    from ..aws.logs import endpoint_stats_series
    from ..vllm.stats_log import format_series, stats_series

    if url is not None:
        raise ConfigError("--stats reads a log (--log FILE or --endpoint NAME); a server's "
                          "/metrics is sampled during runs (--server-metrics-interval)")
    if endpoint_name is not None:
        series = endpoint_stats_series(endpoint_name, region=region, endpoint_url=endpoint_url,
                                       since_s=since)
    else:
        if since is not None:
            raise ConfigError("--since applies to --endpoint (a log file's lines carry no year)")
        lines = sys.stdin if log_file == "-" else _read_lines(log_file)
        series = stats_series((None, line) for line in lines)
    if not series["rows"]:
        click.echo("no vLLM stats lines found (\"Avg prompt throughput: ...\"; vLLM logs "
                   "them while it serves)", err=True)
    click.echo(json.dumps(series) if as_json else format_series(series))


def _read_lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().splitlines()
    except OSError as err:
        raise ConfigError(f"cannot read --log {path}: {err.strerror}") from None
