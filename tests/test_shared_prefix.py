"""Shared prefixes reach the server's prefix cache, and its cached-token counts are recorded."""

from __future__ import annotations

import asyncio

import orjson
import pytest

import loadgen
from loadgen.codecs.openai_stream import OpenAIStreamParser
from loadgen.record import RequestRecord
from loadgen.simulator import SimProfile

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator


def test_parser_records_cached_tokens_apart_from_prompt_tokens():
    rec = RequestRecord()
    parser = OpenAIStreamParser(rec)
    usage = {"prompt_tokens": 40, "completion_tokens": 1,
             "prompt_tokens_details": {"cached_tokens": 32}}
    parser.feed(b'data: {"choices":[{"delta":{"content":"x"},"finish_reason":"stop"}]}\n\n'
                + b"data: " + orjson.dumps({"choices": [], "usage": usage}) + b"\n\n"
                + b"data: [DONE]\n\n", 10)
    parser.close(11)
    assert (rec.server_input_tokens, rec.cached_tokens, rec.input_tokens) == (40, 32, None)


def run(url, tmp_path, **prompt_options):
    saved = tmp_path / f"requests-{len(list(tmp_path.iterdir()))}.jsonl"
    result = asyncio.run(loadgen.sweep(
        url, loads=[loadgen.ConstantConcurrency(1)], stop=loadgen.StopRule(requests=6),
        prompts=loadgen.PromptSource(200, 2, **prompt_options),
        measurement=loadgen.Measurement(save_requests=str(saved)),
        server_metrics_interval_s=None))
    lines = [orjson.loads(line) for line in saved.read_text().splitlines()]
    return result.to_dict()["levels"][0], [line["cached_tokens"] for line in lines]


def test_shared_prefix_groups_hit_the_prefix_cache(tmp_path, start_sim):
    url = start_sim(SimProfile(ttft_s=0.002, itl_s=0.001, prefix_caching=True))
    level, cached = run(url, tmp_path, shared_prefix_tokens=150, prefix_groups=2)
    # Requests 1 and 2 open groups 0 and 1; from then on each finds its group's prefix cached.
    assert cached[:2] == [0, 0] and all(c > 0 for c in cached[2:])
    assert cached[2] == cached[4] and cached[3] == cached[5]
    assert level["cached_input_tokens"] == sum(cached)
    # Without a shared prefix, no prompt shares a block with another.
    level, cached = run(url, tmp_path)
    assert cached == [0] * 6 and level["cached_input_tokens"] == 0


def test_cached_tokens_are_null_when_the_server_does_not_report_them(tmp_path, sim_url):
    level, cached = run(sim_url, tmp_path, shared_prefix_tokens=150)
    assert cached == [None] * 6 and level["cached_input_tokens"] is None
