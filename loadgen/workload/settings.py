"""What a run sends and how it is judged and exported, as one frozen settings object.

:class:`WorkloadSettings` gathers the workload options (prompt lengths and tokenizer,
dataset and sampling, shared prefixes, SLOs, exports) so the CLI and the API pass one
value through; :meth:`prompt_source`, :meth:`open_exports` and :meth:`describe` turn it
into the running parts and the results file's ``workload`` object.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator

from ..errors import ConfigError
from ..export import GuardedExport, HdrIntervalLog, RequestLog
from ..slo import SLO, parse_slo
from .datasets import load_dataset
from .prompts import PromptSource, check_token_bounds
from .tokenizer import load_tokenizer
from .trace import MOONCAKE_BLOCK_TOKENS, TracePrompts, TraceReplay, load_trace


@dataclass(frozen=True)
class Exports:
    """The open exports of a run (either may be None), each stopped alone by a failed write."""

    requests: GuardedExport | None = None
    hdr: GuardedExport | None = None

    @property
    def sinks(self) -> tuple:
        return tuple(x for x in (self.requests, self.hdr) if x is not None)

    def begin_level(self, index: int, load) -> None:
        for sink in self.sinks:
            sink.begin_level(index, load)

    def end_level(self) -> None:
        for sink in self.sinks:
            sink.end_level()

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()

    def describe(self) -> dict[str, str]:
        """The results' ``exports`` object: ``ok`` or ``failed: <reason>`` for each export."""
        return {name: export.status for name, export in (("requests", self.requests),
                                                         ("hdr_log", self.hdr))
                if export is not None}


@dataclass(frozen=True)
class WorkloadSettings:
    input_tokens: int = 128
    output_tokens: int | None = None  # None: a dataset row's own length, else 128
    min_tokens: int | None = None
    input_tokens_stdev: float = 0.0
    output_tokens_stdev: float = 0.0
    tokenizer: str | None = None  # tokenizer directory or tokenizer.json
    dataset: str | None = None
    dataset_format: str = "auto"
    prompts_file: str | None = None  # legacy --prompts: JSONL sent in file order
    sample_with_replacement: bool = False
    seed: int = 0
    shared_prefix_tokens: int = 0
    prefix_groups: int = 1
    turns: int = 1
    think_s: float = 0.0
    slos: tuple[SLO, ...] = ()
    save_requests: str | None = None
    hdr_log: str | None = None
    hdr_interval_s: float = 5.0
    trace: str | None = None  # Mooncake JSONL: replaces --concurrency/--rate and prompts
    trace_speedup: float = 1.0
    trace_block_tokens: int = MOONCAKE_BLOCK_TOKENS
    # "saturation": bounds, then rates between (loadgen.saturation); "slo-search": the
    # highest load meeting every SLO (loadgen.knee)
    profile: str | None = None
    profile_rates: int = 5
    saturation_concurrency: int = 64
    rate_search: bool = False  # slo-search: open-loop rates instead of concurrency
    search_precision: float = 0.10  # slo-search: stop when (high - low) / low <= this
    max_probes: int = 10  # slo-search: probes at most

    def __post_init__(self) -> None:
        # Bounds here too (not only in PromptSource): a trace or dataset run is refused
        # before its file is even read, whatever front door built these settings.
        check_token_bounds(self.input_tokens, self.output_tokens, self.min_tokens,
                           self.input_tokens_stdev, self.output_tokens_stdev)

    @classmethod
    def with_slo_texts(cls, slo_texts: tuple[str, ...] = (), **kwargs) -> "WorkloadSettings":
        return cls(slos=tuple(parse_slo(text) for text in slo_texts), **kwargs)

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

    @contextlib.contextmanager
    def open_exports(self, warn: Callable[[str], None]) -> Iterator[Exports]:
        """The run's exports, closed (and flushed) however the run ends; a failed write
        stops only its export, with one line to ``warn``."""
        exports = Exports(
            GuardedExport("--save-requests", RequestLog(self.save_requests, self.slos), warn)
            if self.save_requests else None,
            GuardedExport("--hdr-log", HdrIntervalLog(self.hdr_log, self.hdr_interval_s), warn)
            if self.hdr_log else None)
        try:
            yield exports
        finally:
            exports.close()

    def describe(self, prompts: PromptSource | None = None) -> dict:
        """The results file's ``workload`` object."""
        out = {"tokenizer": self.tokenizer, "input_tokens": self.input_tokens,
               "input_tokens_stdev": self.input_tokens_stdev,
               "output_tokens": self.output_tokens,
               "output_tokens_stdev": self.output_tokens_stdev, "seed": self.seed,
               "shared_prefix_tokens": self.shared_prefix_tokens,
               "prefix_groups": self.prefix_groups, "turns": self.turns,
               "think_s": self.think_s,
               "slos": [slo.text for slo in self.slos],
               "save_requests": self.save_requests, "hdr_log": self.hdr_log,
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
