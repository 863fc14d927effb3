"""run_fidelity end to end: real HTTP to the built-in simulator, failures as data."""

from __future__ import annotations

import asyncio

import pytest

from loadgen.config import RequestOptions
from loadgen.errors import ConfigError
from loadgen.fidelity import (
    fidelity_options,
    generate_questions,
    run_fidelity,
)
from loadgen.fidelity_sim import make_simulated_responder
from loadgen.record import Prompt, RequestRecord
from loadgen.simulator import SimProfile
from loadgen.targets import open_target
from loadgen.targets.openai_http import OpenAIHTTPTarget

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator

FAST = SimProfile(ttft_s=0.001, itl_s=0.0005)


async def _fidelity_over_http(url: str, seed: int = 0):
    options = fidelity_options(RequestOptions())
    async with open_target(OpenAIHTTPTarget(url, options)) as target:
        return await run_fidelity(target, options, seed=seed)


def test_fidelity_over_http_scores_the_simulated_model(start_sim):
    url = start_sim(FAST, responder=make_simulated_responder(8))
    result = asyncio.run(_fidelity_over_http(url))
    assert (result.score, result.total, result.errors) == (37, 40, 0)
    expected = make_simulated_responder(8)
    for answer in result.answers:
        # Raw text survives the stream unchanged, and greedy/EOS options were honoured.
        assert answer.response == expected(answer.question.prompt)
    assert result.duration_s is not None and result.duration_s > 0


def test_failed_requests_are_recorded_not_raised(start_sim):
    profile = SimProfile(ttft_s=0.001, itl_s=0.0005, fault_500=0.3, seed=3)
    url = start_sim(profile, responder=make_simulated_responder(1, wrong_rate=0.0))
    result = asyncio.run(_fidelity_over_http(url))
    failed = [a for a in result.answers if a.error]
    assert 0 < len(failed) < 40
    assert all(not a.correct and a.response is None for a in failed)
    assert all(a.error.startswith("http_500") for a in failed), failed[0].error
    assert result.score == 40 - len(failed)


class _BrokenTarget:
    """A target with a bug: raises for capitals, fails the record for arithmetic."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    def describe(self) -> dict:
        return {"kind": "broken"}

    async def send(self, prompt: Prompt, record: RequestRecord) -> None:
        if "capital" in prompt.text:
            raise RuntimeError("target bug\nsecond line")
        if " + " in prompt.text:
            record.fail("timeout", "no bytes for 120 s", 1)
            return
        record.text = make_simulated_responder(0, 0.0)(prompt.text)


def test_target_exceptions_and_failures_become_errors():
    result = asyncio.run(run_fidelity(_BrokenTarget(), seed=2))
    errors = {a.question.category: a.error for a in result.answers if a.error}
    assert errors == {"capital": "RuntimeError: target bug",
                      "arithmetic": "timeout: no bytes for 120 s"}
    assert result.score == 15 and result.errors == 25
    assert [a.question for a in result.answers] == generate_questions(2)


def test_options_that_would_spoil_answers_are_refused():
    with pytest.raises(ConfigError, match="fidelity_options"):
        asyncio.run(run_fidelity(_BrokenTarget(), RequestOptions()))  # ignore_eos on
    assert fidelity_options(RequestOptions(temperature=0.7)).temperature == 0
