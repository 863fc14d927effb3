"""``start_run``'s load: what the call asked for, checked against the server's limits,
and the one call into :func:`loadgen.api.sweep`.

``start_run`` takes every run option ``loadgen sweep`` takes, by the same names and with
the same defaults: its arguments are generated from the run description
(:func:`loadgen.runconfig.run_options`, see :mod:`.start_args`) and built into a
:class:`~loadgen.runconfig.RunConfig` by the builder every front door uses. Every call
from the MCP server into ``api.sweep`` is in :func:`measure`, so a change of that
signature is a change here only.

Files: the exports (``save_requests``, ``hdr_log``) are plain names, written in the
run's own directory; input files (datasets, traces, prompts, tokenizers) must be regular
files or directories (never devices, pipes or sockets).
"""

from __future__ import annotations

import dataclasses
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .. import api
from ..engine import LevelResult, RunControl
from ..errors import ConfigError
from ..load import DEFAULT_REQUESTS, Load
from ..runconfig import SIMULATOR, RunConfig, build_run, run_options
from ..saturation import level_plan
from .options import ServerOptions

OUTPUT_FILES = ("save_requests", "hdr_log")  # written into the run's directory
INPUT_FILES = ("dataset", "trace", "prompts_file", "tokenizer")

__all__ = ["LoadRequest", "measure", "SIMULATOR", "OUTPUT_FILES", "INPUT_FILES"]


@dataclass(frozen=True)
class LoadRequest:
    """One ``start_run`` call: the run options it gave (public names and values; the
    others take their defaults), against one target."""

    values: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The load as it will run: every run option, given or default."""
        out = {f.key: f.public_default() for f in run_options()}
        out["api_key_env"] = ""  # MCP's own default: no key unless named (start_args.py)
        out.update(self.values)
        return {key: list(v) if isinstance(v, tuple) else v for key, v in out.items()}

    def levels_total(self, config: RunConfig) -> int:
        return level_plan(config).total

    def checked(self, limits: ServerOptions) -> tuple["LoadRequest", list[str], RunConfig]:
        """This request within the server's limits, what was changed to get there, and
        the run it describes. Raises ConfigError for what can't be fixed silently (too
        much concurrency, levels longer than the run limit, bad values or combinations)."""
        notes: list[str] = []
        values = {k: v for k, v in self.values.items() if v is not None}
        values.setdefault("api_key_env", "")  # no key unless named (and allowed at start)
        if not str(values.get("target", "")).strip():
            raise ConfigError("give a target: an http(s):// URL, sagemaker://ENDPOINT, or "
                              f"{SIMULATOR!r} for the built-in simulator")
        if values.get("requests") is None and values.get("duration_s") is None \
                and not values.get("trace"):
            values["requests"] = DEFAULT_REQUESTS
            notes.append(f"neither requests nor duration_s given: {DEFAULT_REQUESTS} requests "
                         "per level")
        _check_files(values)
        cap = limits.max_concurrency
        streams = [*values.get("concurrency", ()), values.get("max_in_flight") or 0]
        if values.get("profile") == "saturation":
            streams.append(values.get("saturation_concurrency", 64))
        if values.get("profile") == "slo-search" and not values.get("rate_search"):
            ceiling = min(values.get("search_ceiling") or cap, cap)
            if ceiling != values.get("search_ceiling"):
                notes.append(f"slo-search probes at most concurrency {ceiling} (the server's "
                             "limit)")
            values["search_ceiling"] = ceiling
        if max(streams) > cap:
            raise ConfigError(f"concurrency {max(streams)} is above this server's limit of "
                              f"{cap} (loadgen mcp --max-concurrency)")
        if values.get("rate") and values.get("max_in_flight") is None:
            notes.append(f"max_in_flight set to the server's limit of {cap}: requests due "
                         "while it is full are counted as dropped")
            values["max_in_flight"] = cap
        config = build_run(values, where="argument")
        levels = self.levels_total(config)
        duration = config.stop.duration_s
        if duration is not None and duration * levels > limits.max_duration_s:
            raise ConfigError(f"{levels} level(s) of {duration:g} s is more than this "
                              f"server's run limit of {limits.max_duration_s:g} s "
                              "(loadgen mcp --max-duration)")
        return LoadRequest(values), notes, config


def _check_files(values: dict[str, Any]) -> None:
    """Exports go into the run's directory under a plain name (:func:`in_run_directory`);
    inputs must be regular files or directories."""
    for key in OUTPUT_FILES:
        name = values.get(key)
        if name is None:
            continue
        if not isinstance(name, str) or Path(name).name != name or name in (".", ".."):
            raise ConfigError(f"{key} takes a plain file name (it is written in the run's "
                              f"directory), got {name!r}")
    for key in INPUT_FILES:
        path = values.get(key)
        if path is None:
            continue
        try:
            mode = Path(path).stat().st_mode
        except (OSError, TypeError, ValueError):
            raise ConfigError(f"{key}: no such file {path!r}") from None
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise ConfigError(f"{key}: {path!r} is not a regular file")


ProgressFn = Callable[[Load, dict], None]
LevelFn = Callable[[LevelResult], None]


async def measure(config: RunConfig, out: Path, control: RunControl,
                  on_progress: ProgressFn, on_level: LevelFn) -> None:
    """Run the sweep as ``loadgen sweep`` would, writing the results file to ``out``
    after every level (so a stopped run keeps what it measured)."""
    await api.sweep(config=config, out=out, control=control, on_progress=on_progress,
                    on_level=on_level)


def with_cloudwatch_endpoint(config: RunConfig, aws_endpoint_url: str | None) -> RunConfig:
    """A sagemaker:// run reads its levels' CloudWatch metrics through the server's
    ``--aws-endpoint-url`` (a VPC endpoint or an emulator) unless the call named one.
    The run ends once they are in (or ``cloudwatch_wait_s`` after its last level)."""
    if (not aws_endpoint_url or config.cloudwatch.endpoint_url
            or not config.target.is_sagemaker):
        return config
    return dataclasses.replace(config, cloudwatch=dataclasses.replace(
        config.cloudwatch, endpoint_url=aws_endpoint_url))


def in_run_directory(config: RunConfig, directory: Path) -> RunConfig:
    """``config`` with its exports (plain names) written in the run's ``directory``."""
    exports = {key: str(directory / name) for key in OUTPUT_FILES
               if (name := getattr(config.measurement, key)) is not None}
    if not exports:
        return config
    return dataclasses.replace(config, measurement=dataclasses.replace(config.measurement,
                                                                       **exports))
