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


# -- one sampler: the same prompts for the same seed, whatever the number of processes ----

def test_iterating_is_prompt_by_index(tmp_path, counter):
    """What one process sends (iteration) is prompt(0), prompt(1), ... : what workers send."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(orjson.dumps({"prompt": f"row {i}", "max_tokens": 3 + i}).decode()
                            + "\n" for i in range(5)))
    from loadgen.workload.datasets import load_dataset

    data = load_dataset(rows)
    sources = [PromptSource(100, 40, input_stdev=20, output_stdev=6, seed=7, salt="s-"),
               PromptSource(60, 8, tokenizer=counter, input_stdev=9, seed=2, salt="s-",
                            shared_prefix_tokens=12, prefix_groups=2),
               PromptSource(output_tokens=None, output_stdev=2, dataset=data, seed=3),
               PromptSource(dataset=data, replacement=True, seed=3),
               PromptSource(16, 8, texts=("a b", "c d e"), output_stdev=2, seed=1),
               PromptSource(12, 6, turns=3, input_stdev=3, seed=5, salt="s-")]
    for source in sources:
        assert take(source, 12) == [source.prompt(i) for i in range(12)]
    # Three passes over the 5 rows: each pass holds every row once, in a seeded order.
    texts = [p.text for p in take(sources[2], 15)]
    assert all(sorted(texts[i:i + 5]) == [f"row {j}" for j in range(5)] for i in (0, 5, 10))
    # Without a salt, a run picks one: the rest of every prompt is what prompt(i) makes.
    unsalted = PromptSource(100, 40, input_stdev=20, seed=7)
    tail = [p.text.split(" ", 1)[1] for p in take(unsalted, 6)]
    assert tail == [unsalted.prompt(i).text.split(" ", 1)[1] for i in range(6)]
    assert [p.input_tokens for p in take(unsalted, 6)] == [
        unsalted.prompt(i).input_tokens for i in range(6)]


class SeenPrompts:
    """A simulator responder that keeps every prompt it was sent."""

    def __init__(self):
        self.texts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.texts.append(prompt)
        return "fine " * 40

    def take(self) -> dict[int, str]:
        """Prompts by request index (their text says it: "HASH request N: ..."), without the
        run's salted hash."""
        seen, self.texts = self.texts, []
        return {int(text.split()[2].rstrip(":")): text.split(" ", 1)[1] for text in seen}


SEEDED = ["--seed", "7", "--input-tokens", "60", "--input-tokens-stdev", "20",
          "--output-tokens", "8", "--output-tokens-stdev", "3"]


def test_same_seed_same_prompts_in_one_process_with_workers_and_through_the_api(
        tmp_path, start_sim):
    """Issue 17 item 3: one process, two workers and the API send every request the same
    prompt and max_tokens; --save-requests and --hdr-log come out as one file each."""
    import asyncio

    import loadgen
    from hdrh.log import HistogramLogReader

    from loadgen.metrics import new_histogram

    seen = SeenPrompts()
    url = start_sim(responder=seen)
    runs = {}
    for name, extra in (("one", []), ("two", ["--workers", "2"])):
        out, rows = tmp_path / f"{name}.json", tmp_path / f"{name}.jsonl"
        done = CliRunner().invoke(cli, [
            "run", "--target", url, "--concurrency", "4", "--requests", "12", *SEEDED,
            "--out", str(out), "--quiet", "--server-metrics-interval", "0",
            "--save-requests", str(rows), "--hdr-log", str(tmp_path / f"{name}-hdr"),
            "--hdr-interval", "0.05", *extra], catch_exceptions=False)
        assert done.exit_code == 0, done.output
        lines = [orjson.loads(line) for line in rows.read_text().splitlines()]
        runs[name] = ({line["request_id"]: line for line in lines}, seen.take(),
                      orjson.loads(out.read_bytes()))
    workload = loadgen.WorkloadSettings(seed=7, input_tokens=60, input_tokens_stdev=20,
                                        output_tokens=8, output_tokens_stdev=3)
    result = asyncio.run(loadgen.sweep(url, loads=[loadgen.ConstantConcurrency(4)],
                                       stop=loadgen.StopRule(requests=12), workload=workload,
                                       keep_records=True, server_metrics_interval_s=None))
    api_rows = {rec.request_id: {"input_tokens": rec.input_tokens,
                                 "max_tokens": rec.max_tokens}
                for rec in result.levels[0].records}
    api_prompts = seen.take()

    # Every request of every run has the prompt and max_tokens the seeded source gives its
    # run-wide index (which requests a closed loop sends last can vary from run to run).
    expected = workload.prompt_source()
    for rows, prompts in (runs["one"][:2], runs["two"][:2], (api_rows, api_prompts)):
        assert len(rows) == len(prompts) == 12
        assert sorted(prompts) == sorted(request_id - 1 for request_id in rows)
        for request_id, row in rows.items():
            prompt = expected.prompt(request_id - 1)
            assert (row["input_tokens"], row["max_tokens"]) == (
                prompt.input_tokens, prompt.max_tokens)
            # What the server received, past the run's own salted hash.
            assert prompts[request_id - 1] == prompt.text.split(" ", 1)[1]
    assert len({row["max_tokens"] for row in runs["one"][0].values()}) > 2  # draws vary
    two_rows, _, two_data = runs["two"]
    assert {line["level"] for line in two_rows.values()} == {1}
    assert {line["load"] for line in two_rows.values()} == {"concurrency 4"}
    assert two_data["workers"]["count"] == 2

    # --hdr-log: one set of files, every completed request in exactly one merged interval.
    for name in ("one", "two"):
        directory = tmp_path / f"{name}-hdr"
        assert len(list(directory.iterdir())) == 7
        reader = HistogramLogReader(str(directory / "01-concurrency-4.e2e_ms.hlog"),
                                    new_histogram("e2e_ms"))
        intervals = []
        while (hist := reader.get_next_interval_histogram()) is not None:
            intervals.append(hist)
        reader.close()
        assert sum(h.get_total_count() for h in intervals) == 12
        starts = [h.get_start_time_stamp() for h in intervals]
        assert starts == sorted(starts) and len(set(starts)) == len(starts)
