"""A target from its description: the one place a URL or :class:`TargetSpec` becomes a
transport (the API, the workers and scenarios build targets here)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ..config import RequestOptions
from ..errors import ConfigError
from ..targetspec import SIMULATOR, TargetSpec
from .base import Target

if TYPE_CHECKING:
    from ..load import Load


def pool_size_for(loads: Sequence[Load]) -> int:
    """Connections needed: the most streams of any level, 0 (unlimited) when a level has
    no cap on them (an open loop without ``max_in_flight``)."""
    streams = [load.streams for load in loads]
    return 0 if None in streams else max(streams, default=1)


def make_target(url: str | TargetSpec, options: RequestOptions = RequestOptions(),
                pool_size: int = 100, **sagemaker_options) -> Target:
    """A target for ``http(s)://...`` (OpenAI-compatible) or ``sagemaker://ENDPOINT`` (a
    URL, with SageMaker options as keywords, or a :class:`TargetSpec`)."""
    spec = url if isinstance(url, TargetSpec) else TargetSpec(url, **sagemaker_options)
    if spec.kind == SIMULATOR:
        raise ConfigError("make_target needs the simulator's URL: start it first")
    if spec.is_sagemaker:  # botocore is imported only for SageMaker targets
        from .sagemaker import SageMakerTarget

        return SageMakerTarget(spec.endpoint_name, options, pool_size=pool_size or 1000,
                               **spec.sagemaker_options())
    from .openai_http import OpenAIHTTPTarget

    return OpenAIHTTPTarget(spec.url, options, pool_size=pool_size)
