"""What a run sends, as one frozen settings object.

:class:`WorkloadSettings` gathers the workload options (prompt lengths and tokenizer,
dataset and sampling, trace, shared prefixes, turns, seed) so every front door passes one
value through; :meth:`prompt_source` and :meth:`describe` turn it into the prompts and
the results file's ``workload`` object. How the run is judged and exported is
:class:`loadgen.measurement.Measurement`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..bounds import input_tokens_problem, output_tokens_problem
from ..errors import ConfigError
from ..option import option
from .datasets import FORMATS, load_dataset
from .prompts import PromptSource, check_token_bounds
from .tokenizer import load_tokenizer
from .trace import MOONCAKE_BLOCK_TOKENS, TracePrompts, TraceReplay, load_trace


_R, _W, _L = ("Requests", "Workload (prompts, datasets, traces)", "Load (per level)")


@dataclass(frozen=True)
class WorkloadSettings:
    """What a run sends: prompts, lengths, dataset, trace, prefixes, turns, seed. Each
    field is a run option (:func:`loadgen.option.option`)."""

    input_tokens: int = option(128, _R, "Length of synthetic prompts, in tokens.",
                               metavar="TOKENS", low=1,
                               check=lambda v: input_tokens_problem(v, "is"))
    # None: a dataset row's own length, else 128
    output_tokens: int | None = option(None, _R, "max_tokens of each request.",
                                       metavar="TOKENS", low=1,
                                       check=lambda v: output_tokens_problem(v, "is"),
                                       none_means="a dataset row's own, else 128")
    min_tokens: int | None = option(None, _R, "vLLM min_tokens.", metavar="TOKENS", low=0,
                                    none_means="not sent")
    input_tokens_stdev: float = option(0.0, _R, "Synthetic prompt lengths: normal around "
                                       "--input-tokens.", metavar="TOKENS", low=0)
    output_tokens_stdev: float = option(0.0, _R, "max_tokens: normal around --output-tokens "
                                        "(or the dataset's).", metavar="TOKENS", low=0)
    # tokenizer directory or tokenizer.json
    tokenizer: str | None = option(None, _W, "Local Hugging Face tokenizer directory or "
                                   "tokenizer.json: exact prompt lengths and input token "
                                   "counts (pip install 'loadgen[tokenizer]').", metavar="PATH")
    dataset: str | None = option(None, _W, "Prompts from a file: ShareGPT JSON, JSONL (prompt "
                                 "or messages, optional max_tokens), or text.", metavar="FILE",
                                 path="file")
    dataset_format: str = option("auto", _W, "Dataset format (auto: by suffix, then content).",
                                 choices=FORMATS)
    # legacy --prompts: JSONL sent in file order
    prompts_file: str | None = option(None, _W, "Prompts sent in file order.",
                                      metavar="FILE.jsonl", flag="--prompts", path="file")
    sample_with_replacement: bool = option(False, _W, "Draw dataset rows independently "
                                           "(default: shuffled passes, seeded by --seed).")
    seed: int = option(0, _L, "Seed for Poisson arrivals and dataset sampling.")
    shared_prefix_tokens: int = option(0, _R, "Synthetic prompts of a group start with the "
                                       "same N tokens.", metavar="TOKENS", low=0)
    prefix_groups: int = option(1, _R, "Number of distinct shared prefixes (requests cycle "
                                "through them).", metavar="PREFIXES", low=1)
    turns: int = option(1, _R, "Multi-turn sessions of N turns (ShareGPT: the conversation's "
                        "own, at most N), each request carrying the history; metrics per "
                        "turn too.", metavar="TURNS", low=1)
    think_s: float = option(0.0, _R, "Seconds between an answer and the session's next turn.",
                            metavar="S", low=0, flag="--think-time")
    # Mooncake JSONL: replaces --concurrency/--rate and prompts
    trace: str | None = option(None, _W, "Replay a Mooncake trace (timestamp, input_length, "
                               "output_length, hash_ids) on its own schedule: one open-loop "
                               "level.", metavar="FILE.jsonl", path="file")
    trace_speedup: float = option(1.0, _W, "Replay the trace this many times faster.",
                                  metavar="TIMES", low=0, low_open=True)
    trace_block_tokens: int = option(MOONCAKE_BLOCK_TOKENS, _W, "Prompt tokens per trace hash "
                                     "id (512 in the Mooncake release).", metavar="TOKENS",
                                     low=1)
    def __post_init__(self) -> None:
        # Bounds here too (not only in PromptSource): a trace or dataset run is refused
        # before its file is even read, whatever front door built these settings.
        check_token_bounds(self.input_tokens, self.output_tokens, self.min_tokens,
                           self.input_tokens_stdev, self.output_tokens_stdev)

    def trace_load(self) -> TraceReplay:
        """The one level of a trace replay."""
        return TraceReplay(load_trace(self.trace), self.trace_speedup)

    def prompt_source(self) -> PromptSource | TracePrompts:
        """Loads the tokenizer and dataset or trace (one-line errors for bad ones)."""
        if sum(bool(x) for x in (self.dataset, self.prompts_file, self.trace)) > 1:
            raise ConfigError("use one of --dataset, --prompts and --trace")
        tokenizer = load_tokenizer(self.tokenizer) if self.tokenizer else None
        if self.trace:
            return TracePrompts(load_trace(self.trace), tokenizer, self.trace_block_tokens)
        dataset = load_dataset(self.dataset, self.dataset_format) if self.dataset else None
        texts = ()
        if self.prompts_file:
            texts = tuple(row.text for row in load_dataset(self.prompts_file, "jsonl").rows)
        return PromptSource(self.input_tokens, self.output_tokens, self.min_tokens, texts,
                            input_stdev=self.input_tokens_stdev,
                            output_stdev=self.output_tokens_stdev, tokenizer=tokenizer,
                            dataset=dataset, replacement=self.sample_with_replacement,
                            seed=self.seed, shared_prefix_tokens=self.shared_prefix_tokens,
                            prefix_groups=self.prefix_groups, turns=self.turns,
                            think_s=self.think_s)

    def describe(self, prompts: PromptSource | None = None) -> dict:
        """The results file's ``workload`` object."""
        out = {"tokenizer": self.tokenizer, "input_tokens": self.input_tokens,
               "input_tokens_stdev": self.input_tokens_stdev,
               "output_tokens": self.output_tokens,
               "output_tokens_stdev": self.output_tokens_stdev, "seed": self.seed,
               "shared_prefix_tokens": self.shared_prefix_tokens,
               "prefix_groups": self.prefix_groups, "turns": self.turns,
               "think_s": self.think_s,
               "dataset": None,
               "trace": None if not self.trace else {
                   "path": self.trace, "speedup": self.trace_speedup,
                   "block_tokens": self.trace_block_tokens}}
        dataset = prompts.dataset if prompts is not None else None
        if dataset is not None:
            out["dataset"] = {"path": dataset.path, "format": dataset.format,
                              "rows": len(dataset.rows), "skipped_rows": dataset.skipped,
                              "sampling": ("with replacement" if self.sample_with_replacement
                                           else "without replacement")}
        return out
