"""A stand-in model for the fidelity suite (``--simulate`` runs and tests): deterministic
answers, right or slipped by a seeded rule, worded the same for every seed."""

from __future__ import annotations

import hashlib
import re
from typing import Callable

from .fidelity import load_capitals

_ARITHMETIC_PROMPT = re.compile(r"What is (\d+) \+ (\d+) - (\d+)\?")
_MULTIPLICATION_PROMPT = re.compile(r"What is (\d+) × (\d+)\?")
_CAPITAL_PROMPT = re.compile(r"capital of (.+?)\?")
# Plausible slips on an a + b - c problem (the L4 study saw 926 → 1026 and 355 → 655).
_SLIPS = (100, -100, 300, 200, -10, 10)
_NUMBER_FORMATS = ("{}", "{}", "{}", "The answer is {}.", "**{}**", "{}.")
# Responder seeds that reproduce the L4 study's fidelity on suite seed 0 with the default
# wrong_rate: 37/40 each, 35/40 responses identical, all slips on a + b - c questions.
L4_SIMULATED_SEEDS = {"bf16": 8, "qat": 18}


def _unit(*parts: object) -> float:
    """A deterministic number in [0, 1) from ``parts`` (stable across processes)."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def make_simulated_responder(seed: int, wrong_rate: float = 0.2) -> Callable[[str], str]:
    """A stand-in model for ``--simulate`` runs: answers every suite prompt correctly,
    except each ``a + b - c`` question is answered wrong with probability ``wrong_rate``
    (decided by a hash of seed and prompt, so it is deterministic). The answer's
    wording depends on the prompt only, so two responders with different seeds give
    character-identical responses wherever both are right."""
    capitals = {e["country"]: e["capital"] for e in load_capitals()}

    def respond(prompt: str) -> str:
        style = _NUMBER_FORMATS[int(_unit("style", prompt) * len(_NUMBER_FORMATS))]
        if match := _ARITHMETIC_PROMPT.search(prompt):
            a, b, c = map(int, match.groups())
            answer = a + b - c
            if _unit(seed, prompt) < wrong_rate:
                answer += _SLIPS[int(_unit("slip", seed, prompt) * len(_SLIPS))]
            return style.format(answer)
        if match := _MULTIPLICATION_PROMPT.search(prompt):
            return style.format(int(match.group(1)) * int(match.group(2)))
        if match := _CAPITAL_PROMPT.search(prompt):
            country = match.group(1)
            return capitals.get(country, "I do not know.")
        return "I do not know."

    return respond
