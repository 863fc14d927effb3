"""Datasets: ShareGPT JSON, JSONL (prompt/messages/max_tokens), plain text; sampling; errors."""

from __future__ import annotations

import itertools
import json

import orjson
import pytest
from click.testing import CliRunner

from loadgen.cli.main import cli
from loadgen.errors import ConfigError
from loadgen.workload.datasets import load_dataset
from loadgen.workload.prompts import PromptSource
from loadgen.workload.tokenizer import estimate_tokens, load_tokenizer

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator

SHAREGPT = [
    {"id": "a", "conversations": [{"from": "human", "value": "What is a KV cache?"},
                                  {"from": "gpt", "value": "It stores keys and values."}]},
    {"id": "b", "conversations": [{"from": "gpt", "value": "Hello!"}]},  # no user turn: skipped
    {"id": "c", "conversations": [{"from": "system", "value": "Be brief."},
                                  {"from": "human", "value": "Name a prime."},
                                  {"from": "gpt", "value": "Seven, which is a prime number."},
                                  {"from": "human", "value": "Another?"}]},
]


def write(path, text):
    path.write_text(text)
    return path


def sharegpt_file(tmp_path, entries=SHAREGPT, name="data.json"):
    return write(tmp_path / name, json.dumps(entries, indent=2))


def test_sharegpt_takes_the_first_user_turn_and_its_answer(tmp_path):
    data = load_dataset(sharegpt_file(tmp_path))
    assert data.format == "sharegpt" and data.skipped == 1
    assert [(r.text, r.reference) for r in data.rows] == [
        ("What is a KV cache?", "It stores keys and values."),
        ("Name a prime.", "Seven, which is a prime number.")]
    assert [r.line for r in data.rows] == [2, 24]  # where each entry starts


def test_sharegpt_reference_length_is_the_output_length(tmp_path, tokenizer_path):
    counter = load_tokenizer(tokenizer_path)
    data = load_dataset(sharegpt_file(tmp_path))
    prompts = list(itertools.islice(iter(PromptSource(output_tokens=None, dataset=data,
                                                      tokenizer=counter)), 2))
    by_text = {p.text: p for p in prompts}
    for row in data.rows:
        prompt = by_text[row.text]
        assert prompt.max_tokens == counter.count(row.reference)
        assert prompt.input_tokens == counter.count(row.text) and prompt.input_tokens_exact
    # --output-tokens wins over the reference.
    fixed = next(iter(PromptSource(output_tokens=7, dataset=data)))
    assert fixed.max_tokens == 7 and fixed.input_tokens == estimate_tokens(fixed.text)


@pytest.mark.parametrize("entries, line, message", [
    ([{"conversations": [{"from": "human", "value": "ok"}, {"from": "gpt", "value": "ok"}]},
      {"id": "x"}], 14, "conversations"),
    ([{"conversations": [{"from": "human", "value": 3}]}], 2, "conversations[0]"),
    ({"conversations": []}, 1, "JSON list"),
])
def test_bad_sharegpt_entries_name_their_line(tmp_path, entries, line, message):
    path = sharegpt_file(tmp_path, entries)
    with pytest.raises(ConfigError) as err:
        load_dataset(path)
    assert str(err.value).startswith(f"{path}:{line}: ") and message in str(err.value)


def test_broken_sharegpt_json_names_the_line(tmp_path):
    path = write(tmp_path / "d.json", '[\n {"conversations": []},\n {"conversations": [}\n]')
    with pytest.raises(ConfigError, match=r"d\.json:3: not valid JSON"):
        load_dataset(path)


def test_jsonl_rows_prompt_messages_and_max_tokens(tmp_path):
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": "Count to three."}]
    path = write(tmp_path / "d.jsonl", "\n".join([
        json.dumps({"prompt": "one", "max_tokens": 5}), "",
        json.dumps({"messages": messages}), json.dumps("bare string")]))
    rows = load_dataset(path).rows
    assert [(r.text, r.max_tokens, r.line) for r in rows] == [
        ("one", 5, 1), ("Count to three.", None, 3), ("bare string", None, 4)]
    assert rows[1].messages == tuple(messages)
    prompts = {p.text: p for p in itertools.islice(iter(PromptSource(output_tokens=None,
                                                                     dataset=load_dataset(path))), 3)}
    assert prompts["one"].max_tokens == 5 and prompts["bare string"].max_tokens == 128
    assert prompts["Count to three."].input_tokens == sum(estimate_tokens(m["content"])
                                                          for m in messages)


@pytest.mark.parametrize("line, message", [
    ("{nope", "not valid JSON"),
    ('{"prompt": ""}', '"prompt"'),
    ('{"prompt": "x", "max_tokens": 0}', "max_tokens"),
    ('{"messages": [{"role": "user"}]}', "messages[0]"),
    ("[1, 2]", "expected"),
])
def test_bad_jsonl_rows_name_their_line(tmp_path, line, message):
    path = write(tmp_path / "d.jsonl", '{"prompt": "fine"}\n\n' + line + "\n")
    with pytest.raises(ConfigError) as err:
        load_dataset(path)
    assert str(err.value).startswith(f"{path}:3: ") and message in str(err.value)


def test_text_file_is_one_prompt_a_line_and_formats_are_detected(tmp_path):
    path = write(tmp_path / "prompts.txt", "first prompt\n\n  second prompt  \n")
    data = load_dataset(path)
    assert data.format == "text" and [(r.text, r.line) for r in data.rows] == [
        ("first prompt", 1), ("second prompt", 3)]
    # No telling suffix: by content.
    assert load_dataset(write(tmp_path / "a.data", '{"prompt": "x"}\n')).format == "jsonl"
    assert load_dataset(sharegpt_file(tmp_path, name="b.data")).format == "sharegpt"
    assert load_dataset(write(tmp_path / "c.data", "plain\n")).format == "text"
    # Named explicitly: a .json file read as text lines.
    assert load_dataset(sharegpt_file(tmp_path), "text").format == "text"


def test_empty_or_missing_dataset(tmp_path):
    with pytest.raises(ConfigError, match="no prompts found"):
        load_dataset(write(tmp_path / "e.txt", "\n\n"))
    with pytest.raises(ConfigError, match="cannot read dataset"):
        load_dataset(tmp_path / "missing.jsonl")


def prompts_of(path, n, **kw):
    return [p.text for p in itertools.islice(iter(PromptSource(dataset=load_dataset(path),
                                                               **kw)), n)]


def test_sampling_without_replacement_is_seeded_shuffled_passes(tmp_path):
    path = write(tmp_path / "d.txt", "\n".join(f"prompt {i}" for i in range(10)))
    first = prompts_of(path, 20, seed=1)
    assert sorted(first[:10]) == sorted(first[10:]) == sorted(f"prompt {i}" for i in range(10))
    assert first[:10] != first[10:]  # each pass is shuffled anew
    assert prompts_of(path, 20, seed=1) == first and prompts_of(path, 20, seed=2) != first


def test_sampling_with_replacement_draws_independently(tmp_path):
    path = write(tmp_path / "d.txt", "\n".join(f"prompt {i}" for i in range(10)))
    draws = prompts_of(path, 30, seed=1, replacement=True)
    assert draws == prompts_of(path, 30, seed=1, replacement=True)
    assert len(set(draws[:10])) < 10  # a row came twice within the first ten draws


def invoke(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_cli_sends_dataset_rows_with_their_lengths(tmp_path, sim_url):
    path = sharegpt_file(tmp_path)
    out, saved = tmp_path / "r.json", tmp_path / "req.jsonl"
    result = invoke("run", "--target", sim_url, "--dataset", str(path), "--requests", "2",
                    "--out", str(out), "--quiet", "--save-requests", str(saved))
    assert result.exit_code == 0, result.output
    data = orjson.loads(out.read_bytes())
    # Two rows, no replacement: each sent once, generating its reference's (estimated) length.
    expected = sum(estimate_tokens(r.reference) for r in load_dataset(path).rows)
    assert data["levels"][0]["output_tokens"] == expected
    assert data["workload"]["dataset"] == {"path": str(path), "format": "sharegpt", "rows": 2,
                                           "skipped_rows": 1,
                                           "sampling": "without replacement"}


def test_cli_sends_message_history(tmp_path, sim_url):
    messages = [{"role": "user", "content": "A" * 40}, {"role": "assistant", "content": "B" * 40},
                {"role": "user", "content": "C" * 40}]
    path = write(tmp_path / "chat.jsonl", json.dumps({"messages": messages, "max_tokens": 3}))
    saved = tmp_path / "req.jsonl"
    result = invoke("run", "--target", sim_url, "--dataset", str(path), "--requests", "1",
                    "--out", str(tmp_path / "r.json"), "--quiet", "--save-requests", str(saved))
    assert result.exit_code == 0, result.output
    line = orjson.loads(saved.read_text().splitlines()[0])
    # The simulator estimates the prompt over every message it received: all three.
    assert line["server_input_tokens"] == estimate_tokens("A" * 40 + "B" * 40 + "C" * 40)
    assert line["output_tokens"] == 3


def test_cli_bad_dataset_is_one_line_error(tmp_path):
    path = write(tmp_path / "d.jsonl", '{"prompt": "ok"}\n{"prompt": 5}\n')
    result = invoke("run", "--dataset", str(path), "--requests", "1",
                    "--out", str(tmp_path / "r.json"))
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.strip() == (f'Error: {path}:2: needs a non-empty "prompt" string or a '
                                     '"messages" list')
    assert not (tmp_path / "r.json").exists()
