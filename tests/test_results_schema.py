"""The results file is :class:`loadgen.Results`: README's "Results file" section names every
key the class writes, a run's file holds no key the class does not declare, and an older
file (without the keys added since) still loads."""

import asyncio
import json
import re
from pathlib import Path

import pytest

import loadgen
from loadgen.metrics import ALL_METRICS
from loadgen.results import LEVEL_KEYS, RESULTS_KEYS, Results

README = Path(__file__).resolve().parent.parent / "README.md"


def _section() -> str:
    text = README.read_text(encoding="utf-8")
    return text.split("\n## Results file\n", 1)[1].split("\n## ", 1)[0]


def test_readme_results_section_names_every_key_of_the_class():
    section = _section()
    named = set(re.findall(r'"(\w+)"\s*:', section)) | set(re.findall(r"`(\w+)`", section))
    missing = [key for key in (*RESULTS_KEYS, *LEVEL_KEYS, *ALL_METRICS) if key not in named]
    assert missing == []


@pytest.mark.integration
def test_a_runs_file_has_only_declared_keys_and_loads_back(sim_url, tmp_path):
    out = tmp_path / "r.json"
    result = asyncio.run(loadgen.sweep(sim_url, loads=[loadgen.ConstantConcurrency(1)],
                                       stop=loadgen.StopRule(requests=2), out=out,
                                       prompts=loadgen.PromptSource(8, 4)))
    data = json.loads(out.read_text())
    assert set(data) <= set(RESULTS_KEYS)
    assert set(data["levels"][0]) <= set(LEVEL_KEYS) | set(ALL_METRICS)
    assert Results.load(out).to_dict() == data == result.to_dict()
    assert result.levels[0].measured.metrics.counts.completed == 2  # the engine's level
    # An older file: only the keys of the first releases.
    old = {"target": data["target"], "started_at": data["started_at"], "partial": False,
           "levels": [{key: data["levels"][0][key] for key in
                       ("load", "requests", "duration_s", "output_tokens", "ttft_ms")}]}
    (tmp_path / "old.json").write_text(json.dumps(old))
    level = Results.load(tmp_path / "old.json").levels[0]
    assert level.requests.completed == 2 and level.ttft_ms.count == 2
    assert level.measured is None and level.records is None and level.client == {}
