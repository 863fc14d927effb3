"""Counting tokens: exactly with a local Hugging Face tokenizer, or by estimate.

``--tokenizer PATH`` takes a tokenizer directory (with ``tokenizer.json``) or the file
itself, loaded with the ``tokenizers`` library (the optional ``loadgen[tokenizer]``
extra). Counts exclude special tokens and chat templates: they are the tokens of the
text loadgen wrote, so a server that adds a BOS token or a chat template reports more
in ``usage.prompt_tokens`` (recorded separately, mismatches counted).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError

INSTALL_HINT = "pip install 'loadgen[tokenizer]'"


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` without a tokenizer: about 4 characters per token, at least 1."""
    return max(1, (len(text) + 3) // 4)


class TokenCounter:
    """A loaded tokenizer: count tokens, and cut text to an exact token count."""

    def __init__(self, tokenizer, source: str) -> None:
        self._tokenizer = tokenizer
        self.source = source

    def _offsets(self, text: str) -> list[tuple[int, int]]:
        return self._tokenizer.encode(text, add_special_tokens=False).offsets

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def cut(self, text: str, tokens: int) -> str | None:
        """The longest prefix of ``text`` that encodes to exactly ``tokens`` tokens, or
        None when no prefix does (the caller then tries other text).

        Cutting at the ``tokens``-th token's end usually re-encodes to that count; BPE
        merges across the cut can shift it by one or two, so the neighbouring token
        boundaries are tried as well.
        """
        offsets = self._offsets(text)
        if len(offsets) < tokens:
            return None
        ends = sorted({end for _, end in offsets})
        guess = min(range(len(ends)), key=lambda k: abs(k + 1 - tokens))
        for k in sorted(range(max(0, guess - 3), min(len(ends), guess + 4)),
                        key=lambda k: abs(k - guess)):
            prefix = text[:ends[k]]
            if self.count(prefix) == tokens:
                return prefix
        return None


def load_tokenizer(path: str | Path) -> TokenCounter:
    """A :class:`TokenCounter` from a tokenizer directory or ``tokenizer.json``."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ConfigError(f"--tokenizer needs the tokenizers library: {INSTALL_HINT}") from None
    path = Path(path)
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise ConfigError(f"--tokenizer {path}: no tokenizer.json there; give a local Hugging "
                          "Face tokenizer directory or its tokenizer.json")
    try:
        return TokenCounter(Tokenizer.from_file(str(file)), str(file))
    except Exception as exc:  # the Rust library raises plain Exception for bad files
        raise ConfigError(f"--tokenizer {file}: not a tokenizers JSON file "
                          f"({str(exc).splitlines()[0][:120]})") from None


