"""Multi-turn sessions: turns in order on one stream, each carrying the history with the
model's answers (checked by the simulator's prompt count), per-turn metrics. When each turn
is due (think time) is asserted exactly in test_scheduling.py."""

from __future__ import annotations

import asyncio
import itertools
import json

import orjson
import pytest
from click.testing import CliRunner

import loadgen
from loadgen.cli.main import cli
from loadgen.report.markdown import render_markdown
from loadgen.report.summary import build_summary
from loadgen.report.table import format_table
from loadgen.simulator import SimProfile
from loadgen.workload.tokenizer import estimate_tokens

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator


def run_sessions(url, requests, concurrency=2, **prompt_options):
    prompts = loadgen.PromptSource(24, 6, turns=3, salt="t-", **prompt_options)
    result = asyncio.run(loadgen.sweep(
        url, loads=[loadgen.ConstantConcurrency(concurrency)],
        stop=loadgen.StopRule(requests=requests), prompts=prompts, keep_records=True,
        server_metrics_interval_s=None))
    return result, list(itertools.islice(iter(prompts), requests))


def test_each_turn_carries_the_whole_history(sim_url):
    result, sessions = run_sessions(sim_url, 12)
    [level] = result.levels
    records = sorted(level.records, key=lambda r: r.request_id)
    assert len(records) == 12 and all(r.ok for r in records)
    by_session = {}
    for rec in records:
        by_session.setdefault(rec.session, []).append(rec)
    assert sorted(by_session) == [0, 1, 2, 3]
    for index, turns in by_session.items():
        assert [r.turn for r in turns] == [1, 2, 3]
        for earlier, later in zip(turns, turns[1:]):
            assert later.start_ns >= earlier.end_ns  # in order, one stream
        users = [p.text for p in sessions[index].turns]
        answers = [r.text for r in turns]
        for k, rec in enumerate(turns):
            contents = [c for pair in zip(users[:k], answers[:k]) for c in pair] + [users[k]]
            # The simulator counts what it received: every earlier question and answer.
            assert rec.server_input_tokens == estimate_tokens("".join(contents))
            assert rec.input_tokens == sum(estimate_tokens(c) for c in contents)


def test_metrics_per_turn(sim_url):
    result, _ = run_sessions(sim_url, 12)
    level = result.to_dict()["levels"][0]
    turns = level["turns"]
    assert [t["turn"] for t in turns] == [1, 2, 3]
    assert [t["completed"] for t in turns] == [4, 4, 4]
    assert sum(t["ttft_ms"]["count"] for t in turns) == level["ttft_ms"]["count"] == 12
    assert turns[0]["input_tokens"] < turns[1]["input_tokens"] < turns[2]["input_tokens"]
    assert sum(t["output_tokens"] for t in turns) == level["output_tokens"] == 72
    # ... and they appear in the CLI/MCP table and in the report, not only the JSON.
    table = format_table([level]).split("per turn:")[1].splitlines()
    assert table[1].split()[:3] == ["load", "turn", "ok/fail"]
    assert [row.split()[1:3] for row in table[3:6]] == [["1", "4/0"], ["2", "4/0"],
                                                        ["3", "4/0"]]
    report = render_markdown(build_summary([result.to_dict()]))
    section = report.split("Multi-turn sessions: per turn")[1]
    for turn in turns:
        assert f"| {turn['turn']} | {turn['completed']} / 0 |" in section


def test_a_failed_turn_ends_its_session(start_sim):
    url = start_sim(SimProfile(ttft_s=0.002, itl_s=0.001, fault_500=1.0))
    result, _ = run_sessions(url, 6)
    records = result.levels[0].records
    assert len(records) == 6 and {r.turn for r in records} == {1}
    assert {r.error_type for r in records} == {"http_500"}


def test_cli_sharegpt_sessions_use_the_conversation_turns(tmp_path, sim_url):
    path = tmp_path / "chat.json"
    path.write_text(json.dumps([{"conversations": [
        {"from": "human", "value": "First question?"}, {"from": "gpt", "value": "A" * 40},
        {"from": "human", "value": "Second question?"}, {"from": "gpt", "value": "B" * 80}]}]))
    saved = tmp_path / "req.jsonl"
    result = CliRunner().invoke(cli, [
        "run", "--target", sim_url, "--dataset", str(path), "--turns", "5", "--requests", "2",
        "--out", str(tmp_path / "r.json"), "--quiet", "--save-requests", str(saved)],
        catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = [orjson.loads(line) for line in saved.read_text().splitlines()]
    assert [(line["session"], line["turn"], line["output_tokens"]) for line in lines] == [
        (0, 1, 10), (0, 2, 20)]  # the conversation's two turns, answers' lengths (chars / 4)


def test_cli_turns_need_the_chat_api(tmp_path):
    result = CliRunner().invoke(cli, ["run", "--turns", "2", "--api", "completions",
                                      "--out", str(tmp_path / "r.json")])
    assert result.exit_code == 2 and "--api chat" in result.output
