"""Token-level fidelity: logprobs asked, parsed from both APIs, compared; servers that refuse."""

from __future__ import annotations

import asyncio
import dataclasses
import math

import pytest

from loadgen.config import RequestOptions
from loadgen.fidelity import (
    LOGPROBS_AVAILABLE,
    LOGPROBS_UNAVAILABLE,
    FidelityResult,
    fidelity_options,
    run_fidelity,
)
from loadgen.fidelity_sim import L4_SIMULATED_SEEDS, make_simulated_responder
from loadgen.fidelity_tokens import compare_tokens, first_divergence, kl_topk
from loadgen.report.compare import compare_fidelity, token_fidelity_line
from loadgen.simulator import SimProfile
from loadgen.targets import open_target
from loadgen.targets.openai_http import OpenAIHTTPTarget


def _position(token: str, probs: dict[str, float]) -> tuple:
    top = tuple(sorted(((t, math.log(p)) for t, p in probs.items()), key=lambda x: -x[1]))
    return (token, math.log(probs[token]), top)


def test_identical_sequences_agree_everywhere_with_zero_kl():
    seq = [_position("a", {"a": 0.7, "b": 0.2}), _position("c", {"c": 0.9, "d": 0.05})]
    out = compare_tokens(seq, seq)
    assert out["first_divergence"] is None
    assert (out["positions"], out["agreeing"]) == (2, 2)
    assert out["kl_mean"] == pytest.approx(0.0, abs=1e-12)


def test_divergence_counts_the_shared_prefix_and_the_diverging_position():
    a = [_position(t, {t: 0.8, "z": 0.1}) for t in "abcx"]
    b = [_position(t, {t: 0.8, "z": 0.1}) for t in "abcyq"]
    assert first_divergence(a, b) == 3
    out = compare_tokens(a, b)
    assert (out["positions"], out["agreeing"], out["first_divergence"]) == (4, 3, 3)
    assert first_divergence(a[:2], a) == 2  # a prefix diverges where it ends


def test_kl_is_exact_when_the_top_k_lists_hold_all_the_mass():
    p = {"a": 0.6, "b": 0.3, "c": 0.1}
    q = {"a": 0.5, "b": 0.25, "c": 0.25}
    exact = sum(p[t] * math.log(p[t] / q[t]) for t in p)
    assert kl_topk(_position("a", p), _position("a", q)) == pytest.approx(exact, rel=1e-9)


def test_kl_estimate_leans_low_when_the_tail_is_merged():
    # A vocabulary of 6 tokens; only the top 2 are reported (k = 2).
    p = {"a": 0.5, "b": 0.2, "c": 0.15, "d": 0.1, "e": 0.04, "f": 0.01}
    q = {"a": 0.3, "b": 0.3, "c": 0.05, "d": 0.05, "e": 0.2, "f": 0.1}
    exact = sum(p[t] * math.log(p[t] / q[t]) for t in p)
    top2 = lambda d: dict(sorted(d.items(), key=lambda x: -x[1])[:2])  # noqa: E731
    estimate = kl_topk(_position("a", top2(p)), _position("a", top2(q)))
    assert 0 < estimate < exact


FAST = SimProfile(ttft_s=0.0, itl_s=0.0)
BF16 = dataclasses.replace(FAST, model="google/gemma-4-E2B-it")
QAT = dataclasses.replace(FAST, model="google/gemma-4-E2B-it-qat-w4a16-ct")


async def _fidelity(url: str, api: str = "chat", top_logprobs: int | None = 5) -> FidelityResult:
    options = fidelity_options(RequestOptions(api=api))
    async with open_target(OpenAIHTTPTarget(url, options)) as target:
        return await run_fidelity(target, options, top_logprobs=top_logprobs)


@pytest.mark.integration
def test_two_checkpoints_compared_token_by_token(start_sim):
    bf16 = asyncio.run(_fidelity(start_sim(BF16, responder=make_simulated_responder(
        L4_SIMULATED_SEEDS["bf16"]))))
    qat_url = start_sim(QAT, responder=make_simulated_responder(L4_SIMULATED_SEEDS["qat"]))
    qat = asyncio.run(_fidelity(qat_url))
    completions = asyncio.run(_fidelity(qat_url, api="completions"))
    assert bf16.logprobs == qat.logprobs == completions.logprobs == LOGPROBS_AVAILABLE
    for answer in bf16.answers:
        assert answer.logprobs and "".join(t for t, _, _ in answer.logprobs) == answer.response
        assert all(len(top) == 5 and top[0][0] == token for token, _, top in answer.logprobs)
    # The completions API's parallel lists parse to the same numbers as chat's objects.
    assert [a.logprobs for a in completions.answers] == [a.logprobs for a in qat.answers]

    fid = compare_fidelity(bf16, qat, ("bf16", "qat"))
    tokens = fid["tokens"]
    assert tokens["available"] and tokens["compared_questions"] == 40
    assert tokens["identical_token_sequences"] == fid["identical"]  # one token per word
    diverging = [q for q in tokens["questions"] if q["first_divergence"] is not None]
    assert {q["id"] for q in diverging} == {m["id"] for m in fid["mismatches"]}
    # Where both answers agree, a small checkpoint-dependent difference; where they diverge,
    # the diverging position (same context, different top-1) weighs far more.
    agreeing_kl = [q["kl_mean"] for q in tokens["questions"] if q["first_divergence"] is None]
    assert 0 < max(agreeing_kl) < 0.05
    assert tokens["kl_mean"] > sum(agreeing_kl) / len(agreeing_kl)
    assert 0.5 < tokens["top1_agreement"] < 1
    assert "top-1 agreement" in token_fidelity_line(fid)

    same = compare_fidelity(qat, qat, ("qat", "qat"))["tokens"]
    assert same["top1_agreement"] == 1 and same["kl_mean"] == 0
    # Saved and loaded, the logprobs survive (phase files keep them).
    assert FidelityResult.from_dict(qat.to_dict()) == qat


@pytest.mark.integration
def test_a_server_that_refuses_logprobs_still_gets_every_question(start_sim):
    refusing = dataclasses.replace(FAST, max_logprobs=0)
    url = start_sim(refusing, responder=make_simulated_responder(8))
    result = asyncio.run(_fidelity(url))
    assert result.logprobs.startswith(LOGPROBS_UNAVAILABLE + ": it refused them (http_400")
    assert "greater than max allowed: 0" in result.logprobs
    assert (result.score, result.total, result.errors) == (37, 40, 0)
    assert all(a.logprobs is None for a in result.answers)
    fid = compare_fidelity(result, result)
    assert fid["tokens"] == {"available": False, "questions": []}
    assert token_fidelity_line(fid).startswith("Token-level fidelity: not available (not "
                                               "available from this server: it refused them")
