"""The fidelity suite of the L4 study: 40 questions, robust answer extraction, scoring.

The suite is generated deterministically from a seed, so two phases (bf16 and
QAT) asked with the same seed get exactly the same 40 prompts:

- 15 multi-digit multiplications   ("482 × 37")
- 15 ``a + b - c`` problems        ("876 + 608 - 558", three-digit numbers)
- 10 capital-city questions        (drawn from ``loadgen/data/capitals.json``)

Every question, its expected answer, the raw response, the extracted answer and
the verdict are kept in a :class:`FidelityResult`, so a comparison can later list
every mismatch and say which side was right.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import time
import unicodedata
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from importlib import resources
from typing import Any

from .config import RequestOptions
from .errors import ConfigError
from .fidelity_tokens import TokenLogprob
from .record import Prompt, RequestRecord

SUITE_NAME = "l4-fidelity-40"
MULTIPLICATION, ARITHMETIC, CAPITAL = "multiplication", "arithmetic", "capital"
CATEGORIES = (MULTIPLICATION, ARITHMETIC, CAPITAL)
# FidelityResult.logprobs: whether token-level fidelity (loadgen.fidelity_tokens) can be had.
LOGPROBS_AVAILABLE, LOGPROBS_NOT_ASKED = "available", "not asked"
LOGPROBS_UNAVAILABLE = "not available from this server"
# Operand sizes of the multiplications, cycled: 2×2, 3×2 and 3×3 digits.
_MULTIPLICATION_DIGITS = ((2, 2), (3, 2), (3, 3))


@dataclass(frozen=True)
class Question:
    id: str  # "mul-01", "arith-07", "cap-03"
    category: str
    label: str  # short form for reports: "876 + 608 - 558", "capital of Australia"
    prompt: str  # what is sent to the model
    expected: str  # canonical answer: "926", "Canberra"
    accept: tuple[str, ...] = ()  # other spellings that count as correct (capitals)


# --------------------------------------------------------------------------- questions


@lru_cache(maxsize=1)
def load_capitals() -> tuple[dict, ...]:
    """The shipped capital list: ``{"country", "capital", "accept"}`` per entry."""
    text = resources.files("loadgen").joinpath("data/capitals.json").read_text("utf-8")
    return tuple(json.loads(text)["capitals"])


def _operand(rng: random.Random, digits: int) -> int:
    # Multiples of ten make a multiplication trivially easy; draw again.
    while True:
        value = rng.randint(10 ** (digits - 1), 10**digits - 1)
        if value % 10:
            return value


def _multiplication(rng: random.Random, index: int) -> Question:
    da, db = _MULTIPLICATION_DIGITS[index % len(_MULTIPLICATION_DIGITS)]
    a, b = _operand(rng, da), _operand(rng, db)
    label = f"{a} × {b}"
    return Question(f"mul-{index + 1:02d}", MULTIPLICATION, label,
                    f"What is {label}? Answer with just the number.", str(a * b))


def _arithmetic(rng: random.Random, index: int) -> Question:
    a, b, c = (rng.randint(100, 999) for _ in range(3))
    label = f"{a} + {b} - {c}"
    return Question(f"arith-{index + 1:02d}", ARITHMETIC, label,
                    f"What is {label}? Answer with just the number.", str(a + b - c))


def _capital(entry: dict, index: int) -> Question:
    country = entry["country"]
    return Question(f"cap-{index + 1:02d}", CAPITAL, f"capital of {country}",
                    f"What is the capital of {country}? Answer with just the city name.",
                    entry["capital"], tuple(entry.get("accept", ())))


def generate_questions(seed: int = 0) -> list[Question]:
    """The 40 questions for ``seed``; the same seed always gives the same suite."""
    rng = random.Random(seed)
    questions = [_multiplication(rng, i) for i in range(15)]
    questions += [_arithmetic(rng, i) for i in range(15)]
    entries = rng.sample(load_capitals(), 10)
    questions += [_capital(entry, i) for i, entry in enumerate(entries)]
    return questions


# --------------------------------------------------------------------------- extraction

# A number as models write it: optional minus (ASCII, U+2212, en dash) glued to the
# digits, thousands grouped by commas, spaces, no-break or thin spaces, or apostrophes.
_NUMBER = re.compile(
    r"(?<![\w.])[-\u2212\u2013]?"
    r"(?:\d{1,3}(?:[,'\u00a0\u2009\u202f ]\d{3})+(?!\d)|\d+)"
    r"(?:\.\d+)?"
)
_BOXED = re.compile(r"\\boxed\s*\{([^{}]*)\}")
_ANSWER_MARKER = re.compile(r"(?:answer|result)\s*(?:is|:|=)?\s*[:=]?", re.IGNORECASE)
_EQUALS = re.compile(r"=")
# Words after which models explain themselves; the answer is usually before them.
_EXPLANATION = re.compile(r"\b(?:because|since|explanation|here'?s how|step\s*1|reasoning)\b",
                          re.IGNORECASE)
_PARENTHESES = re.compile(r"\([^()]*\)")
_MARKUP = re.compile(r"\*\*|__|`|\$|\\\(|\\\)|\\\[|\\\]|\\text\{|\\mathbf\{|\\displaystyle")


def _clean(text: str) -> str:
    """Drop Markdown/LaTeX decoration that wraps answers ("**926**", "$926$")."""
    text = text.replace("\\,", "").replace("{,}", ",").replace("\\!", "")
    return _MARKUP.sub("", text)


def canonical_number(token: str) -> str | None:
    """``"1,026"`` → ``"1026"``, ``"−68"`` → ``"-68"``, ``"926.0"`` → ``"926"``."""
    digits = re.sub(r"[,'\u00a0\u2009\u202f ]", "", token).replace("\u2212", "-")
    digits = digits.replace("\u2013", "-")
    try:
        value = Decimal(digits)
    except InvalidOperation:
        return None
    if value == value.to_integral_value():
        return str(int(value))
    return str(value.normalize())


def _first_number(text: str) -> str | None:
    match = _NUMBER.search(text)
    return canonical_number(match.group()) if match else None


def _last_number(text: str) -> str | None:
    matches = _NUMBER.findall(text)
    return canonical_number(matches[-1]) if matches else None


def extract_number(response: str) -> str | None:
    """The number a response gives as its answer, canonicalised; None if there is none.

    In order of trust: ``\\boxed{...}``; the number after the last "answer is" /
    "result:"; a first line that is only a number (a parenthesised aside allowed);
    then, in the text before any explanation ("because ...") if it holds a number:
    the number after the last "=", else the last number.
    """
    boxed = _BOXED.findall(response)
    if boxed:
        found = _first_number(_clean(boxed[-1]))
        if found is not None:
            return found
    text = _clean(response)
    markers = list(_ANSWER_MARKER.finditer(text))
    if markers:
        found = _first_number(text[markers[-1].end():])
        if found is not None:
            return found
    first_line = next((line for line in text.splitlines() if line.strip()), "")
    bare = _PARENTHESES.sub("", first_line).strip().strip(".:;!*_ ")
    if bare and _NUMBER.fullmatch(bare):
        return canonical_number(bare)
    explained = _EXPLANATION.search(text)
    if explained and _NUMBER.search(text[:explained.start()]):
        text = text[:explained.start()]
    equals = list(_EQUALS.finditer(text))
    if equals:
        found = _first_number(text[equals[-1].end():])
        if found is not None:
            return found
    return _last_number(text)


def normalize_name(text: str) -> str:
    """Case-, accent- and punctuation-insensitive form: ``"Brasília."`` → ``"brasilia"``."""
    decomposed = unicodedata.normalize("NFKD", text)
    plain = "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()
    return " ".join(re.sub(r"[^0-9a-z]+", " ", plain).split())


_CAPITAL_PREFIX = re.compile(
    r"^(?:the\s+)?(?:answer\s*(?:is|:)|capital(?:\s+city)?\s+of\s+.+?\s+is)\s*",
    re.IGNORECASE)


def extract_capital(response: str, question: Question) -> str | None:
    """The expected capital when the response names it (or an accepted spelling)
    anywhere, as a whole word sequence; otherwise the response's first line, cleaned,
    so a report can show what the model said instead."""
    haystack = f" {normalize_name(response)} "
    for name in (question.expected, *question.accept):
        if f" {normalize_name(name)} " in haystack:
            return question.expected
    first_line = next((line for line in _clean(response).splitlines() if line.strip()), "")
    guess = _CAPITAL_PREFIX.sub("", first_line.strip()).strip(" .!*_\"'")
    return guess[:80] or None


def extract_answer(question: Question, response: str | None) -> str | None:
    if response is None:
        return None
    if question.category == CAPITAL:
        return extract_capital(response, question)
    return extract_number(response)


def is_correct(question: Question, extracted: str | None) -> bool:
    if extracted is None:
        return False
    if question.category == CAPITAL:
        names = {normalize_name(n) for n in (question.expected, *question.accept)}
        return normalize_name(extracted) in names
    return extracted == question.expected


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class FidelityAnswer:
    question: Question
    response: str | None  # raw generated text; None when the request failed
    extracted: str | None
    correct: bool
    error: str | None = None  # "type: message" when the request failed
    # Per generated token: (token, logprob, ((alternative, logprob), ...)); None: not sent.
    logprobs: tuple[TokenLogprob, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        q = self.question
        out = {"id": q.id, "category": q.category, "label": q.label, "prompt": q.prompt,
               "expected": q.expected, "accept": list(q.accept), "response": self.response,
               "extracted": self.extracted, "correct": self.correct, "error": self.error}
        if self.logprobs is not None:
            out["logprobs"] = [[t, lp, [list(alt) for alt in top]]
                               for t, lp, top in self.logprobs]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FidelityAnswer:
        question = Question(d["id"], d["category"], d["label"], d["prompt"], d["expected"],
                            tuple(d.get("accept", ())))
        logprobs = d.get("logprobs")
        if logprobs is not None:
            logprobs = tuple((t, float(lp), tuple((a, float(v)) for a, v in top))
                             for t, lp, top in logprobs)
        return cls(question, d.get("response"), d.get("extracted"), bool(d["correct"]),
                   d.get("error"), logprobs)


def score_response(question: Question, response: str | None, error: str | None = None,
                   logprobs: tuple[TokenLogprob, ...] | None = None) -> FidelityAnswer:
    extracted = extract_answer(question, response)
    return FidelityAnswer(question, response, extracted, is_correct(question, extracted), error,
                          logprobs)


@dataclass(frozen=True)
class FidelityResult:
    seed: int
    answers: tuple[FidelityAnswer, ...]
    suite: str = SUITE_NAME
    max_tokens: int = 64
    duration_s: float | None = None
    # Token logprobs: "available", "not asked", or "not available from this server: why".
    logprobs: str = LOGPROBS_NOT_ASKED

    @property
    def score(self) -> int:
        return sum(a.correct for a in self.answers)

    @property
    def total(self) -> int:
        return len(self.answers)

    @property
    def errors(self) -> int:
        return sum(a.error is not None for a in self.answers)

    def by_category(self) -> dict[str, dict[str, int]]:
        out = {c: {"correct": 0, "total": 0} for c in CATEGORIES}
        for a in self.answers:
            bucket = out.setdefault(a.question.category, {"correct": 0, "total": 0})
            bucket["total"] += 1
            bucket["correct"] += a.correct
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"suite": self.suite, "seed": self.seed, "max_tokens": self.max_tokens,
                "score": self.score, "total": self.total, "errors": self.errors,
                "by_category": self.by_category(), "duration_s": self.duration_s,
                "logprobs": self.logprobs, "answers": [a.to_dict() for a in self.answers]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FidelityResult:
        answers = tuple(FidelityAnswer.from_dict(a) for a in d["answers"])
        return cls(int(d.get("seed", 0)), answers, d.get("suite", SUITE_NAME),
                   int(d.get("max_tokens", 64)), d.get("duration_s"),
                   d.get("logprobs", LOGPROBS_NOT_ASKED))


# --------------------------------------------------------------------------- running


async def _ask(target: Any, question: Question, max_tokens: int,
               top_logprobs: int | None) -> FidelityAnswer:
    record = RequestRecord(intended_ns=time.perf_counter_ns(), tag=question.id)
    try:
        await target.send(Prompt(question.prompt, max_tokens=max_tokens, tag=question.id,
                                 top_logprobs=top_logprobs), record)
    except Exception as exc:  # noqa: BLE001 - a target bug must not lose the other 39 answers
        record.fail(type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "",
                    time.perf_counter_ns())
    if record.error_type is not None or record.incomplete:
        error = f"{record.error_type or 'incomplete'}: {record.error_message or ''}".strip()
        return score_response(question, None, error.rstrip(":"))
    logprobs = tuple(record.logprobs) if record.logprobs else None
    return score_response(question, record.text or "", logprobs=logprobs)


def _refused_logprobs(answer: FidelityAnswer) -> bool:
    """A 400/422 on a question asked with logprobs: the server refuses them (vLLM's
    ``--max-logprobs``, servers without logprobs); ask again without."""
    return bool(answer.error) and answer.error.startswith(("http_400", "http_422"))


def fidelity_options(options: RequestOptions) -> RequestOptions:
    """The request options a fidelity run needs: keep the text, greedy decoding, and let
    the model stop at end-of-sequence (``ignore_eos`` would pad answers with noise)."""
    return dataclasses.replace(options, keep_text=True, temperature=0.0, ignore_eos=False)


async def run_fidelity(target: Any, options: RequestOptions | None = None, *, seed: int = 0,
                       max_tokens: int = 64, top_logprobs: int | None = 5) -> FidelityResult:
    """Ask the 40 questions one after another through an *opened* target.

    The target must have been built with :func:`fidelity_options` (``options`` is
    checked, not applied: the target owns its options). Failed requests are
    recorded as errors (scored wrong), never raised. Each question asks for every
    token's logprob and ``top_logprobs`` alternatives (None: don't ask); a server that
    refuses them (a 4xx on the first question) is asked again without, and the result
    says why token-level fidelity is not available.
    """
    if options is not None and options != fidelity_options(options):
        raise ConfigError("fidelity needs a target built with keep_text=True, temperature 0 "
                          "and ignore_eos off: use loadgen.fidelity.fidelity_options(options)")
    started = time.perf_counter()
    status = LOGPROBS_NOT_ASKED if top_logprobs is None else LOGPROBS_AVAILABLE
    answers = []
    for question in generate_questions(seed):
        answer = await _ask(target, question, max_tokens, top_logprobs)
        if top_logprobs is not None and not answers and _refused_logprobs(answer):
            status = f"{LOGPROBS_UNAVAILABLE}: it refused them ({answer.error})"
            top_logprobs = None
            answer = await _ask(target, question, max_tokens, None)
        answers.append(answer)
    if status == LOGPROBS_AVAILABLE and not any(a.logprobs for a in answers):
        status = f"{LOGPROBS_UNAVAILABLE}: it sent none"
    return FidelityResult(seed, tuple(answers), max_tokens=max_tokens,
                          duration_s=round(time.perf_counter() - started, 3), logprobs=status)
