"""Token-level fidelity: how closely two checkpoints' greedy answers agree, token by token.

Both deployments answer each fidelity question greedily (temperature 0) and report, for
every generated token, its log-probability and the ``k`` most likely tokens (OpenAI
``logprobs``; k = 5 by default). For one question, with A's tokens ``a_0, a_1, ...`` and
B's ``b_0, b_1, ...``:

* **First divergence** ``d``: the first position where ``a_i != b_i`` (None when the two
  token sequences are identical; the shorter length when one is a prefix of the other).
* **Top-1 agreement**: at positions ``0..d`` (the shared greedy prefix and the divergence
  itself, where both models saw the same context) the share where both models' most
  likely token is the same. Greedy decoding generates the top-1 token, so this is
  ``d / (d + 1)`` for a diverging answer and 1 for identical ones; after ``d`` the
  contexts differ and positions are not comparable. Overall: agreeing positions / compared
  positions, summed over questions.
* **KL divergence estimate** ``KL(A || B)`` per position of the shared prefix ``0..d-1``
  (same context on both sides; at ``d`` too when both sent logprobs for it), in nats,
  from the two top-k lists only::

      KL_k = sum over t in topk(A) of p_A(t) * (log p_A(t) - log q(t))
             + r_A * (log r_A - log r_B)

  where ``q(t) = p_B(t)`` if ``t`` is in B's top-k, else B's k-th (smallest) reported
  probability (an upper bound on the true ``p_B(t)``); ``r_A = 1 - sum of A's top-k`` and
  ``r_B = max(1 - sum of q(t) over A's top-k, 1e-9)`` are the rest of the vocabulary, one
  bucket each. Bias: merging the tail into one bucket can only lower KL (data processing
  inequality), and the k-th-probability stand-in lowers the top-k terms, so the estimate
  leans low; it is exact when both top-k lists hold all the mass, and close when greedy
  distributions are peaked (the usual case at temperature 0). With k = 5 and flat
  distributions (many near-ties) read it as a lower bound, not a measurement.

Pure functions on the ``(token, logprob, ((alt, logprob), ...))`` triples of
:attr:`loadgen.record.RequestRecord.logprobs`.
"""

from __future__ import annotations

import math
from typing import Sequence

TokenLogprob = tuple[str, float, tuple[tuple[str, float], ...]]
_FLOOR = 1e-9


def first_divergence(a: Sequence[TokenLogprob], b: Sequence[TokenLogprob]) -> int | None:
    """Index of the first token that differs; None when both sequences are identical."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x[0] != y[0]:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _top1(entry: TokenLogprob) -> str:
    return entry[2][0][0] if entry[2] else entry[0]


def kl_topk(a: TokenLogprob, b: TokenLogprob) -> float:
    """``KL_k(A || B)`` of one position from the two top-k lists (formula above)."""
    top_a = a[2] or ((a[0], a[1]),)
    top_b = dict(b[2] or ((b[0], b[1]),))
    smallest_b = math.exp(min(top_b.values()))
    kl, mass_a, mass_q = 0.0, 0.0, 0.0
    for token, logprob in top_a:
        p = math.exp(logprob)
        q = math.exp(top_b[token]) if token in top_b else smallest_b
        kl += p * (logprob - math.log(max(q, _FLOOR)))
        mass_a += p
        mass_q += q
    rest_a, rest_b = max(1.0 - mass_a, 0.0), max(1.0 - mass_q, _FLOOR)
    if rest_a > 0:
        kl += rest_a * (math.log(rest_a) - math.log(rest_b))
    return max(kl, 0.0)


def compare_tokens(a: Sequence[TokenLogprob], b: Sequence[TokenLogprob]) -> dict:
    """One question: compared positions, agreeing ones, first divergence, mean KL."""
    divergence = first_divergence(a, b)
    shared = min(len(a), len(b)) if divergence is None else divergence
    compared = min(shared + 1, len(a), len(b))
    agreeing = sum(_top1(a[i]) == _top1(b[i]) for i in range(compared))
    kls = [kl_topk(a[i], b[i]) for i in range(compared)]
    return {"positions": compared, "agreeing": agreeing, "first_divergence": divergence,
            "kl_sum": sum(kls), "kl_positions": len(kls),
            "kl_mean": round(sum(kls) / len(kls), 6) if kls else None}


def compare_logprobs(pairs: Sequence[tuple[str, Sequence[TokenLogprob] | None,
                                           Sequence[TokenLogprob] | None]]) -> dict:
    """Every question ``(id, A's logprobs, B's logprobs)``: per question and overall.

    ``available`` is False (and nothing else is computed) when no question has logprobs
    from both sides.
    """
    questions = []
    for question_id, a, b in pairs:
        if a and b:
            questions.append({"id": question_id, **compare_tokens(a, b)})
    if not questions:
        return {"available": False, "questions": []}
    positions = sum(q["positions"] for q in questions)
    kl_positions = sum(q["kl_positions"] for q in questions)
    return {
        "available": True,
        "questions": questions,
        "compared_questions": len(questions),
        "identical_token_sequences": sum(q["first_divergence"] is None for q in questions),
        "positions": positions,
        "top1_agreement": round(sum(q["agreeing"] for q in questions) / positions, 6)
        if positions else None,
        "kl_mean": round(sum(q["kl_sum"] for q in questions) / kl_positions, 6)
        if kl_positions else None,
    }
