"""vLLM's periodic stats lines as a server series: the wordings of the V0 and V1 engines,
and the lines read from an endpoint's CloudWatch log (moto in server mode)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from loadgen.cli.endpoint import facts as facts_command
from loadgen.vllm.stats_log import parse_stats_line, stats_series
from tests.helpers.aws_env import isolate_aws, reset_moto, write_endpoint_log

V0 = ("INFO 05-02 10:11:12 metrics.py:455] Avg prompt throughput: 512.4 tokens/s, Avg generation "
      "throughput: 25.3 tokens/s, Running: 2 reqs, Swapped: 0 reqs, Pending: 3 reqs, GPU KV cache "
      "usage: 1.2%, CPU KV cache usage: 0.0%.")
V1 = ("\x1b[1;36m(APIServer pid=7)\x1b[0;0m INFO 12-02 01:05:27 [loggers.py:123] Engine 000: Avg "
      "prompt throughput: 0.0 tokens/s, Avg generation throughput: 1234.5 tokens/s, Running: 16 "
      "reqs, Waiting: 4 reqs, GPU KV cache usage: 87.5%, Prefix cache hit rate: 12.0%")
V1_EARLY = ("INFO 02-01 09:00:00 loggers.py:40] Avg prompt throughput: 10.0 tokens/s, "
            "Avg generation throughput: 20.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs ")
NEWER = ("Engine 001: Avg prompt throughput: 1.5 tokens/s, Avg generation throughput: 2.5 "
         "tokens/s, Running: 3 reqs, Waiting: 1 reqs, KV cache usage: 50.0%, Prefix cache hit "
         "rate: 0.0%")


def test_every_known_wording_parses_into_the_metrics_names():
    assert parse_stats_line(V0) == {
        "prompt_tokens_per_s": 512.4, "generation_tokens_per_s": 25.3, "num_requests_running": 2,
        "num_requests_waiting": 3, "kv_cache_usage_perc": 0.012, "engine": 0}
    assert parse_stats_line(V1) == {
        "prompt_tokens_per_s": 0.0, "generation_tokens_per_s": 1234.5, "num_requests_running": 16,
        "num_requests_waiting": 4, "kv_cache_usage_perc": 0.875, "prefix_cache_hit_rate": 0.12,
        "engine": 0}
    early = parse_stats_line(V1_EARLY)
    assert early["num_requests_waiting"] == 0 and "kv_cache_usage_perc" not in early
    newer = parse_stats_line(NEWER)
    assert newer["engine"] == 1 and newer["kv_cache_usage_perc"] == 0.5
    assert parse_stats_line("INFO Loading weights took 3.1 seconds") is None


def test_series_keeps_order_and_marks_missing_fields():
    series = stats_series([(10.0, V0), (11.0, "unrelated"), (20.0, V1_EARLY)])
    assert series["rows"] == 2 and series["t_unix_s"] == [10.0, 20.0]
    assert series["num_requests_running"] == [2, 1]
    assert series["kv_cache_usage_perc"] == [0.012, None]


def test_cli_stats_from_a_log_file(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text("\n".join(["starting", V1, V0]) + "\n")
    result = CliRunner().invoke(facts_command, ["--log", str(log), "--stats", "--json"])
    assert result.exit_code == 0, result.output
    series = json.loads(result.stdout)
    assert series["num_requests_waiting"] == [4, 3] and series["t_unix_s"] == [None, None]
    table = CliRunner().invoke(facts_command, ["--log", str(log), "--stats"])
    assert "87.5" in table.output and "running" in table.output


@pytest.mark.integration
def test_cli_stats_from_an_endpoints_cloudwatch_log(moto_url, monkeypatch, tmp_path):
    isolate_aws(monkeypatch, tmp_path, region="us-east-1")
    reset_moto(moto_url)
    write_endpoint_log(moto_url, "us-east-1", "gemma", ["Loading weights took 3.1 seconds", V1, NEWER])
    result = CliRunner().invoke(facts_command, ["--endpoint", "gemma", "--stats", "--json",
                                                "--endpoint-url", moto_url, "--region", "us-east-1"])
    assert result.exit_code == 0, result.output
    series = json.loads(result.stdout)
    assert series["endpoint"] == "gemma" and series["rows"] == 2
    assert series["num_requests_running"] == [16, 3] and series["engine"] == [0, 1]
    assert series["kv_cache_usage_perc"] == [0.875, 0.5]
    assert all(isinstance(t, float) for t in series["t_unix_s"])
    assert series["t_unix_s"][0] <= series["t_unix_s"][1]
    missing = CliRunner().invoke(facts_command, ["--endpoint", "nobody", "--stats",
                                                 "--endpoint-url", moto_url, "--region", "us-east-1"])
    assert missing.exit_code != 0 and "no CloudWatch log group" in missing.output


def test_cli_stats_refuses_a_metrics_url():
    result = CliRunner().invoke(facts_command, ["--url", "http://127.0.0.1:9", "--stats"])
    assert result.exit_code == 2 and "--stats reads a log" in result.output
