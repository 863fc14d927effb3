"""Deterministic, checkpoint-dependent token log-probabilities (pure code, no I/O).

When a request asks for ``logprobs``, the simulator reports, for every generated token,
its log-probability and the ``k`` most likely tokens, as vLLM does. The numbers are a
made-up but proper distribution: logits are drawn from hashes of (prompt, position),
shared by every checkpoint, plus a small perturbation drawn from the served model's name,
so two checkpoints of one model disagree a little (a KL divergence above 0) while the
greedy token, the one generated, stays the top-1 on both. One more logit stands for the
rest of the vocabulary, so the reported probabilities sum to less than 1, as real ones do.
"""

from __future__ import annotations

import hashlib
import math

from .plan import FILLER_WORDS

# Alternatives the top-k lists draw from (distinct from the generated token).
_ALTERNATIVES = tuple(w.strip() for w in FILLER_WORDS) + ("0", "1", "2", "5", "9", ".")
_CHOSEN_LOGIT = 4.0  # above every alternative's (at most 3.0 + perturbation): greedy = top-1
_REST_LOGIT = 2.5  # the rest of the vocabulary, one bucket
_PERTURBATION = 0.4  # how far a checkpoint moves each logit (uniform in ±half of it)


def _unit(*parts: object) -> float:
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def _entry(token: str, logprob: float) -> dict:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode())}


def token_logprobs(tokens: list[str], prompt: str, model: str, top: int) -> list[dict]:
    """vLLM's chat ``logprobs.content`` list for ``tokens`` (``top`` alternatives each)."""
    out = []
    for i, token in enumerate(tokens):
        def logit(base: float, j: int) -> float:
            return base + _PERTURBATION * (_unit(model, prompt, i, j) - 0.5)

        names = [token]
        logits = [logit(_CHOSEN_LOGIT + 2.0 * _unit(prompt, i), 0)]
        j = 0
        while len(names) < top + 1 and j < 4 * top + 8:
            j += 1
            name = _ALTERNATIVES[int(_unit("alt", prompt, i, j) * len(_ALTERNATIVES))]
            if name not in names and name != token.strip():
                names.append(name)
                logits.append(logit(3.0 * _unit("logit", prompt, i, j), j))
        rest = logit(_REST_LOGIT, -1)
        norm = math.log(sum(math.exp(x) for x in logits) + math.exp(rest))
        ranked = sorted(zip(names, (x - norm for x in logits)), key=lambda p: -p[1])
        chosen = logits[0] - norm
        out.append({**_entry(token, chosen),
                    "top_logprobs": [_entry(n, lp) for n, lp in ranked[:top]]})
    return out


def completions_logprobs(content: list[dict]) -> dict:
    """The same numbers in the completions API's shape (parallel lists)."""
    offsets, at = [], 0
    for entry in content:
        offsets.append(at)
        at += len(entry["token"])
    return {"tokens": [e["token"] for e in content],
            "token_logprobs": [e["logprob"] for e in content],
            "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]}
                             for e in content],
            "text_offset": offsets}
