"""The 40-question suite: deterministic generation, answer extraction, scoring."""

from __future__ import annotations

import json
import re

import pytest

from loadgen.fidelity import (
    ARITHMETIC,
    CAPITAL,
    MULTIPLICATION,
    FidelityResult,
    Question,
    extract_capital,
    extract_number,
    generate_questions,
    is_correct,
    load_capitals,
    normalize_name,
    score_response,
)
from loadgen.fidelity_sim import L4_SIMULATED_SEEDS, make_simulated_responder


def _question(category: str, seed: int = 0):
    return next(q for q in generate_questions(seed) if q.category == category)


def test_suite_has_the_l4_studys_shape():
    questions = generate_questions(0)
    counts = {c: sum(q.category == c for q in questions)
              for c in (MULTIPLICATION, ARITHMETIC, CAPITAL)}
    assert counts == {MULTIPLICATION: 15, ARITHMETIC: 15, CAPITAL: 10}
    assert len({q.id for q in questions}) == 40
    assert len({q.prompt for q in questions}) == 40
    for q in questions:
        expected_kind = "the city name" if q.category == CAPITAL else "the number"
        assert q.prompt.endswith(f"Answer with just {expected_kind}.")


def test_expected_answers_are_right():
    """Recompute every expected answer from the prompt text itself."""
    capitals = {e["country"]: e["capital"] for e in load_capitals()}
    for q in generate_questions(7):
        if q.category == MULTIPLICATION:
            a, b = map(int, re.fullmatch(r"What is (\d+) × (\d+)\? .*", q.prompt).groups())
            assert q.expected == str(a * b) and a >= 10 and b >= 10
        elif q.category == ARITHMETIC:
            a, b, c = map(int, re.fullmatch(r"What is (\d+) \+ (\d+) - (\d+)\? .*",
                                            q.prompt).groups())
            assert all(100 <= n <= 999 for n in (a, b, c))
            assert q.expected == str(a + b - c)
        else:
            country = re.fullmatch(r"What is the capital of (.+)\? .*", q.prompt).group(1)
            assert q.expected == capitals[country]


def test_generation_is_deterministic_per_seed():
    assert generate_questions(3) == generate_questions(3)
    assert generate_questions(3) != generate_questions(4)
    # Stable across processes and Python versions: pin the first questions of seed 0.
    first = generate_questions(0)
    assert (first[0].label, first[0].expected) == ("59 × 63", "3717")
    assert (first[15].label, first[15].expected) == ("544 + 423 - 725", "242")


def test_capital_list_is_shipped_as_package_data():
    capitals = load_capitals()
    assert len(capitals) >= 10
    assert {"Australia", "Brazil", "Kazakhstan"} <= {c["country"] for c in capitals}


@pytest.mark.parametrize("response, expected", [
    ("926", "926"),
    ("The answer is 926.", "926"),
    ("**926**", "926"),
    ("926.", "926"),
    ("  \n926\n", "926"),
    ("\\boxed{926}", "926"),
    ("$\\boxed{1,026}$", "1026"),
    ("876 + 608 - 558 = 926", "926"),
    ("876 + 608 = 1484, and 1484 - 558 = 926", "926"),
    ("926 (876 + 608 − 558)", "926"),
    ("I think it's 926 because 876+608-558", "926"),
    ("Answer: 17,834", "17834"),
    ("482 × 37 is 17834", "17834"),
    ("17\\,834", "17834"),
    ("17 834", "17834"),
    ("17\u2009834", "17834"),
    ("17\u202f834", "17834"),
    ("17\u00a0834", "17834"),
    ("The answer is: 1,234,567.", "1234567"),
    ("926.0", "926"),
    ("-68", "-68"),
    ("\u221268", "-68"),
    ("The result is −68.", "-68"),
    ("608-558=50", "50"),
    ("**Answer:** `3,717`", "3717"),
    ("I don't know.", None),
    ("", None),
])
def test_extract_number_from_messy_responses(response, expected):
    assert extract_number(response) == expected


@pytest.mark.parametrize("response, correct", [
    ("Brasília", True),
    ("brasilia.", True),
    ("**BRASILIA**", True),
    ("The capital of Brazil is Brasília.", True),
    ("Rio de Janeiro", False),
    ("The capital of Brazil is Rio de Janeiro.", False),
    ("Brasil", False),
])
def test_capital_extraction_and_scoring(response, correct):
    brazil = next(q for q in generate_questions(0) if q.label == "capital of Brazil")
    answer = score_response(brazil, response)
    assert answer.correct is correct
    assert (answer.extracted == brazil.expected) is correct


def test_capital_alternative_spellings_count():
    entry = next(e for e in load_capitals() if e["country"] == "Kazakhstan")
    question = Question("cap-01", CAPITAL, "capital of Kazakhstan", "What is the capital of "
                        "Kazakhstan?", entry["capital"], tuple(entry["accept"]))
    assert score_response(question, "Nur-Sultan").correct
    assert score_response(question, "It is Astana.").correct
    assert extract_capital("The capital of Kazakhstan is Almaty.", question) == "Almaty"
    assert normalize_name("  Reykjavík! ") == "reykjavik"


def test_numbers_score_only_exact_values():
    q = _question(ARITHMETIC)
    assert is_correct(q, q.expected)
    assert not is_correct(q, str(int(q.expected) + 100))
    assert not is_correct(q, None)
    failed = score_response(q, None, "http_500: boom")
    assert (failed.correct, failed.extracted, failed.error) == (False, None, "http_500: boom")


def test_result_round_trips_through_json_with_every_answer():
    respond = make_simulated_responder(8)
    answers = tuple(score_response(q, respond(q.prompt)) for q in generate_questions(0))
    result = FidelityResult(0, answers)
    data = json.loads(json.dumps(result.to_dict()))
    assert data["score"] == result.score and data["total"] == 40
    assert {"prompt", "expected", "response", "extracted", "correct"} <= set(data["answers"][0])
    assert FidelityResult.from_dict(data) == result
    assert sum(c["total"] for c in result.by_category().values()) == 40


def test_simulated_profiles_reproduce_the_l4_fidelity_numbers():
    """37/40 each, 35/40 character-identical, mistakes only in a + b - c."""
    questions = generate_questions(0)
    bf16 = make_simulated_responder(L4_SIMULATED_SEEDS["bf16"])
    qat = make_simulated_responder(L4_SIMULATED_SEEDS["qat"])
    a = [score_response(q, bf16(q.prompt)) for q in questions]
    b = [score_response(q, qat(q.prompt)) for q in questions]
    assert sum(x.correct for x in a) == 37 and sum(x.correct for x in b) == 37
    assert sum(x.response == y.response for x, y in zip(a, b)) == 35
    assert {x.question.category for x in a + b if not x.correct} == {ARITHMETIC}
    # Deterministic: the same seed answers the same way every time.
    assert [bf16(q.prompt) for q in questions] == [make_simulated_responder(8)(q.prompt)
                                                   for q in questions]


def test_simulated_responder_without_mistakes_is_always_right():
    perfect = make_simulated_responder(1, wrong_rate=0.0)
    assert all(score_response(q, perfect(q.prompt)).correct for q in generate_questions(5))
    assert perfect("Tell me a joke") == "I do not know."
