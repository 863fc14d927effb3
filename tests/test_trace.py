"""Mooncake trace replay: each request sent at its timestamp (checked in the simulator's
request log), with speedup; shared hash ids share prompt blocks; bad lines name FILE:LINE."""

from __future__ import annotations

import json
import urllib.request

import orjson
import pytest
from click.testing import CliRunner

from loadgen.cli.main import cli
from loadgen.errors import ConfigError
from loadgen.simulator import SimProfile
from loadgen.workload.tokenizer import load_tokenizer
from loadgen.workload.trace import TracePrompts, TraceReplay, load_trace

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator

TRACE = [
    {"timestamp": 0, "input_length": 40, "output_length": 3, "hash_ids": [1, 2]},
    {"timestamp": 200, "input_length": 60, "output_length": 4, "hash_ids": [1, 3]},
    {"timestamp": 500, "input_length": 30, "output_length": 2},
    {"timestamp": 900, "input_length": 50, "output_length": 5, "hash_ids": [1, 2, 4]},
]


def write_trace(tmp_path, rows=TRACE):
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_schedule_with_speedup(tmp_path):
    rows = load_trace(write_trace(tmp_path))
    assert [r.hash_ids for r in rows] == [(1, 2), (1, 3), (), (1, 2, 4)]
    assert list(TraceReplay(rows).offsets_ns()) == [0, 200_000_000, 500_000_000, 900_000_000]
    assert list(TraceReplay(rows, 4.0).offsets_ns()) == [0, 50_000_000, 125_000_000,
                                                        225_000_000]
    assert TraceReplay(rows, 2.0).describe()["rate"] == pytest.approx(3 / 0.45)


def test_shared_hash_ids_share_prompt_blocks_at_exact_lengths(tmp_path, tokenizer_path):
    counter = load_tokenizer(tokenizer_path)
    rows = load_trace(write_trace(tmp_path))
    prompts = list(TracePrompts(rows, counter, block_tokens=16, salt="x-"))
    assert [counter.count(p.text) for p in prompts] == [40, 60, 30, 50]
    assert [p.max_tokens for p in prompts] == [3, 4, 2, 5]
    ids = [counter._tokenizer.encode(p.text).ids for p in prompts]
    assert ids[0][:16] == ids[1][:16] == ids[3][:16]  # hash id 1
    assert ids[0][:32] == ids[3][:32] and ids[0][16:32] != ids[1][16:32]  # 2 vs 3
    assert ids[2][:4] != ids[0][:4]  # no hash ids: nothing shared
    # Without a tokenizer: about one token per word.
    plain = list(TracePrompts(rows, block_tokens=16, salt="x-"))
    assert [len(p.text.split()) for p in plain] == [40, 60, 30, 50]
    assert plain[0].text.split()[:16] == plain[1].text.split()[:16]


@pytest.mark.parametrize("line, message", [
    ('{"timestamp": -1, "input_length": 1, "output_length": 1}', "timestamp"),
    ('{"timestamp": 5, "input_length": 0, "output_length": 1}', "input_length"),
    ('{"timestamp": 5, "input_length": 3}', "output_length"),
    ('{"timestamp": 5, "input_length": 3, "output_length": 1, "hash_ids": ["a"]}', "hash_ids"),
    ("not json", "not valid JSON"),
])
def test_bad_trace_lines_name_their_line(tmp_path, line, message):
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 3, "output_length": 1}\n' + line + "\n")
    with pytest.raises(ConfigError) as err:
        load_trace(path)
    assert str(err.value).startswith(f"{path}:2: ") and message in str(err.value)


def test_cli_replays_each_request_at_its_timestamp(tmp_path, start_sim):
    url = start_sim(SimProfile(ttft_s=0.002, itl_s=0.001, prefix_caching=True))
    out, saved = tmp_path / "r.json", tmp_path / "req.jsonl"
    result = CliRunner().invoke(cli, [
        "run", "--target", url, "--trace", str(write_trace(tmp_path)), "--trace-speedup", "2",
        "--trace-block-tokens", "16", "--out", str(out), "--save-requests", str(saved)],
        catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "trace x2" in result.output
    level = orjson.loads(out.read_bytes())["levels"][0]
    assert level["load"]["mode"] == "trace" and level["requests"]["completed"] == 4
    assert level["output_tokens"] == 3 + 4 + 2 + 5
    lines = [orjson.loads(line) for line in saved.read_text().splitlines()]
    intended = [line["intended_ns"] - lines[0]["intended_ns"] for line in lines]
    assert intended == [0, 100_000_000, 250_000_000, 450_000_000]  # timestamps / 2
    with urllib.request.urlopen(url + "/sim/log") as response:
        received = {entry["request_id"]: entry["received_ns"] for entry in json.load(response)}
    for line in lines:  # the simulator runs in this process: the same monotonic clock
        late_ns = received[str(line["request_id"])] - line["intended_ns"]
        # Never early; late only by the client's and server's own scheduling delay.
        assert 0 <= late_ns < 150e6, late_ns
    # Rows 2 and 4 reuse hash id 1 (and 4 also 2): the prefix cache sees it.
    assert [line["cached_tokens"] > 0 for line in lines] == [False, True, False, True]


def test_cli_trace_conflicts_are_one_line(tmp_path):
    path = write_trace(tmp_path)
    for extra, message in ((["--concurrency", "4"], "own schedule"),
                           (["--warmup", "2"], "--warmup")):
        result = CliRunner().invoke(cli, ["run", "--trace", str(path), *extra,
                                          "--out", str(tmp_path / "r.json")])
        assert result.exit_code == 2 and message in result.output
        assert len(result.output.strip().splitlines()) == 1
