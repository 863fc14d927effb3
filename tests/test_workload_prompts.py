"""Exact-length prompts from a tokenizer, length spreads, salts and shared prefixes."""

from __future__ import annotations

import itertools
import statistics
import sys

import orjson
import pytest
from click.testing import CliRunner

from loadgen.cli.main import cli
from loadgen.errors import ConfigError
from loadgen.workload.prompts import PromptSource
from loadgen.workload.tokenizer import estimate_tokens, load_tokenizer

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator


@pytest.fixture(scope="module")
def counter(tokenizer_path):
    return load_tokenizer(tokenizer_path)


def take(source, n):
    return list(itertools.islice(iter(source), n))


def test_every_prompt_has_exactly_the_drawn_length(counter):
    for length in (1, 2, 3, 5, 17, 64, 200):
        for prompt in take(PromptSource(length, 8, tokenizer=counter), 5):
            assert counter.count(prompt.text) == prompt.input_tokens == length
            assert prompt.input_tokens_exact


def test_input_stdev_spreads_lengths_and_each_stays_exact(counter):
    prompts = take(PromptSource(100, 8, tokenizer=counter, input_stdev=20, seed=3), 200)
    lengths = [p.input_tokens for p in prompts]
    assert all(counter.count(p.text) == p.input_tokens for p in prompts)
    assert 90 < statistics.mean(lengths) < 110 and 14 < statistics.stdev(lengths) < 26
    again = take(PromptSource(100, 8, tokenizer=counter, input_stdev=20, seed=3), 200)
    assert [p.input_tokens for p in again] == lengths  # seeded


def test_output_stdev_varies_max_tokens_around_the_mean():
    prompts = take(PromptSource(16, 100, output_stdev=10, seed=1), 300)
    outs = [p.max_tokens for p in prompts]
    assert 95 < statistics.mean(outs) < 105 and len(set(outs)) > 10 and min(outs) >= 1
    assert {p.max_tokens for p in take(PromptSource(16, 100), 20)} == {100}


def test_prompts_share_no_accidental_prefix(counter):
    prompts = take(PromptSource(40, 8, tokenizer=counter, salt="run-"), 50)
    starts = {tuple(counter._tokenizer.encode(p.text).ids[:8]) for p in prompts}
    assert len(starts) == 50
    assert len({p.text[0] for p in prompts}) > 8  # they differ from the first character
    # A second run (another salt) does not repeat the first run's prompts either.
    other = take(PromptSource(40, 8, tokenizer=counter), 50)  # a random salt
    assert not {p.text for p in prompts} & {p.text for p in other}
    # Without a tokenizer too.
    assert len({p.text.split()[0] for p in take(PromptSource(40, 8), 50)}) == 50


def test_shared_prefix_groups_share_exactly_their_prefix(counter):
    prompts = take(PromptSource(60, 8, tokenizer=counter, shared_prefix_tokens=24,
                                prefix_groups=3, salt="s-"), 9)
    ids = [counter._tokenizer.encode(p.text).ids for p in prompts]
    assert all(len(i) == 60 for i in ids)
    for group in range(3):
        members = ids[group::3]
        assert len({tuple(m[:24]) for m in members}) == 1
        assert len({tuple(m[:30]) for m in members}) == 3  # only the prefix is shared
    assert len({tuple(i[:24]) for i in ids}) == 3


def test_without_a_tokenizer_lengths_are_estimates():
    prompt = take(PromptSource(50, 8), 1)[0]
    assert prompt.input_tokens == 50 and not prompt.input_tokens_exact
    assert 45 <= len(prompt.text.split()) <= 50


def test_tokenizer_errors_are_one_line(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="no tokenizer.json"):
        load_tokenizer(tmp_path)
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not a tokenizer")
    with pytest.raises(ConfigError, match="not a tokenizers JSON file"):
        load_tokenizer(bad)
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as if the extra were missing
    with pytest.raises(ConfigError, match=r"pip install 'loadgen\[tokenizer\]'"):
        load_tokenizer(bad)


def test_bad_lengths_are_config_errors():
    with pytest.raises(ConfigError, match="--shared-prefix-tokens"):
        PromptSource(16, 8, shared_prefix_tokens=16)
    with pytest.raises(ConfigError, match="stdev"):
        PromptSource(16, 8, input_stdev=-1)


def run_cli(tmp_path, sim_url, *args):
    out = tmp_path / "r.json"
    requests = tmp_path / "requests.jsonl"
    result = CliRunner().invoke(cli, ["run", "--target", sim_url, "--requests", "6",
                                      "--output-tokens", "4", "--out", str(out), "--quiet",
                                      "--save-requests", str(requests), *args],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = [orjson.loads(line) for line in requests.read_text().splitlines()]
    return orjson.loads(out.read_bytes()), lines


def test_cli_counts_input_tokens_with_the_tokenizer(tmp_path, sim_url, tokenizer_path):
    data, lines = run_cli(tmp_path, sim_url, "--tokenizer", str(tokenizer_path),
                          "--input-tokens", "50")
    level = data["levels"][0]
    assert level["input_tokens"] == 300 and level["input_tokens_estimated"] is False
    assert data["workload"]["tokenizer"] == str(tokenizer_path)
    # The simulator counts its own way (characters / 4): recorded, and mismatches counted.
    assert [line["input_tokens"] for line in lines] == [50] * 6
    assert level["server_input_tokens"] == sum(line["server_input_tokens"] for line in lines)
    assert level["input_token_mismatches"] == sum(line["server_input_tokens"] != 50
                                                  for line in lines)


def test_cli_without_a_tokenizer_says_counts_are_estimated(tmp_path, sim_url):
    data, lines = run_cli(tmp_path, sim_url, "--input-tokens", "50")
    level = data["levels"][0]
    assert level["input_tokens"] == 300 and level["input_tokens_estimated"] is True
    assert level["input_token_mismatches"] == 0  # nothing exact to compare
    assert level["server_input_tokens"] == sum(line["server_input_tokens"] for line in lines)


def test_estimate_is_characters_over_four():
    assert estimate_tokens("") == 1 and estimate_tokens("abcd" * 10) == 10


def test_prompt_stream_fills_ahead_in_order():
    from loadgen.load import ArrivalRate, ConstantConcurrency, StopRule
    from loadgen.workload.prompts import PromptStream, prefill_count

    made = []

    def source():
        for i in itertools.count():
            made.append(i)
            yield i

    stream = PromptStream(source())  # any iterable (a trace's prompts): taken in order
    assert stream.prompt(0) == 0 and made == [0]
    stream.prefill(3)
    assert made == [0, 1, 2, 3]  # made ahead ...
    assert [stream.prompt(i) for i in range(1, 6)] == [1, 2, 3, 4, 5]  # ... sent in order
    # A PromptSource is asked by index: made ahead or not, request i gets prompt(i).
    seeded = PromptSource(20, 8, input_stdev=5, output_stdev=3, seed=4, salt="s-")
    by_index = PromptStream(seeded)
    by_index.prefill(4, start=10)
    assert [by_index.prompt(i) for i in (10, 3, 11)] == [seeded.prompt(i) for i in (10, 3, 11)]
    assert prefill_count(ConstantConcurrency(16), StopRule()) == 64
    assert prefill_count(ConstantConcurrency(4), StopRule(requests=10, warmup=2)) == 12
    assert prefill_count(ArrivalRate(5.0), StopRule(duration_s=60)) == 300
    assert prefill_count(ConstantConcurrency(4), StopRule(duration_s=60)) == 1000
