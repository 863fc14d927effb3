"""The Python API's results: typed objects from a run, the same objects read back from a file."""

import asyncio
import importlib.resources

import pytest

import loadgen
from loadgen.errors import ConfigError

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator


def test_run_results_are_typed_and_read_back_the_same(sim_url, tmp_path):
    out = tmp_path / "r.json"
    result = asyncio.run(loadgen.sweep(sim_url, loads=[loadgen.ConstantConcurrency(2)],
                                       stop=loadgen.StopRule(requests=4), out=out,
                                       prompts=loadgen.PromptSource(8, 5)))
    level = result.levels[0]
    assert isinstance(result, loadgen.Results) and isinstance(level.ttft_ms, loadgen.Stats)
    assert level.ttft_ms.count == 4 and 0 < level.ttft_ms.p50 <= level.ttft_ms.p99
    assert level.ttft_ms.p99 == result.to_dict()["levels"][0]["ttft_ms"]["p99"]
    assert level.requests.completed == 4 and level.requests.errors == {}
    assert level.histogram("itl_ms").get_total_count() == level.itl_ms.count == 4 * 4
    assert result.path == out and result.write_error is None

    again = loadgen.load_results(out)
    assert again == result  # same types, same values
    assert again.levels[0].ttft_ms.p99 == level.ttft_ms.p99 and again.path == out
    assert again.to_dict() == result.to_dict()
    with pytest.raises(AttributeError):
        level.no_such_metric


def test_load_results_rejects_what_is_not_a_results_file(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"phase": 1}')
    with pytest.raises(ConfigError, match="not a loadgen results file"):
        loadgen.load_results(bad)
    with pytest.raises(ConfigError, match="no such file"):
        loadgen.load_results(tmp_path / "missing.json")


def test_no_target_is_an_error_and_the_simulator_is_asked_for_by_name():
    stop = loadgen.StopRule(requests=1)
    with pytest.raises(ConfigError, match='target="simulator"'):
        asyncio.run(loadgen.run(None, load=loadgen.ConstantConcurrency(1), stop=stop))
    result = asyncio.run(loadgen.run(loadgen.SIMULATOR, load=loadgen.ConstantConcurrency(1),
                                     stop=stop, prompts=loadgen.PromptSource(8, 3)))
    assert result.simulated and result.levels[0].requests.completed == 1


def test_the_package_ships_type_hints():
    assert (importlib.resources.files("loadgen") / "py.typed").is_file()
