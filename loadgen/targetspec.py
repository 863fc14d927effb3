"""Where a run's requests go, parsed once: :class:`TargetSpec`.

A target is the built-in simulator (no URL, or ``"simulator"``), a SageMaker endpoint
(``sagemaker://ENDPOINT[?region=R]``, with the SageMaker options) or an OpenAI-compatible
HTTP server (``http(s)://host:port``). :func:`target_kind` is the one place a target's
text is told apart and its form checked; the targets (:mod:`loadgen.targets`) are built
from a TargetSpec.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .codecs.sagemaker_formats import PAYLOAD_FORMATS
from .bounds import host_problem, shown, text_problem
from .errors import ConfigError
from .option import option

_SM = "SageMaker (sagemaker:// targets only)"
SIMULATOR = "simulator"  # the target that means: the built-in simulator, started for the run
_SM = "SageMaker (sagemaker:// targets only)"


def sagemaker_url(url: str) -> tuple[str, str | None]:
    """``sagemaker://ENDPOINT_NAME[?region=R]``: the endpoint name and the URL's region."""
    parts = urlsplit(url)
    if not parts.netloc or parts.path not in ("", "/"):
        raise ConfigError(f"bad SageMaker target {url!r}: write sagemaker://ENDPOINT_NAME"
                          "[?region=REGION]")
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - {"region"})
    if unknown:
        raise ConfigError(f"unknown option(s) {', '.join(unknown)} in {url!r}: only "
                          "?region=REGION is accepted (other settings are keywords/flags)")
    return parts.netloc, query.get("region", [None])[-1]


def target_kind(url: str | None) -> str:
    """``simulator``, ``sagemaker`` or ``http``; a one-line error for anything else. The
    one place a target URL is told apart (and its form checked)."""
    if url is None or url == SIMULATOR:
        return SIMULATOR
    if not isinstance(url, str) or not url.strip():
        raise ConfigError("give a target: an http(s):// URL, sagemaker://ENDPOINT, or "
                          f"{SIMULATOR!r} for the built-in simulator")
    if message := text_problem(url):
        raise ConfigError(f"--target {message}; give a URL like http://127.0.0.1:8000")
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
    except ValueError as exc:
        raise ConfigError(f"--target {shown(url)} is not a URL ({exc})") from None
    if parts.scheme == "sagemaker":
        sagemaker_url(url)
        return "sagemaker"
    if parts.scheme in ("http", "https") and hostname:
        if message := host_problem(url):
            raise ConfigError(f"--target {message}; give a URL like http://127.0.0.1:8000")
        return "http"
    raise ConfigError(f"--target {shown(url)} is not a URL like http://127.0.0.1:8000, "
                      f"sagemaker://ENDPOINT_NAME or {SIMULATOR!r}")


@dataclass(frozen=True)
class TargetSpec:
    """Where requests go, parsed once: ``url`` None (or ``"simulator"``) is the built-in
    simulator (started by the run), ``sagemaker://ENDPOINT[?region=R]`` a SageMaker
    endpoint, anything else must be an http(s) URL.

    The other fields only apply to ``sagemaker://`` URLs; giving one for another target
    is an error.
    """

    url: str | None = option(None, "Target", "http://host:port (vLLM/OpenAI) or "
                             "sagemaker://ENDPOINT.", metavar="URL", key="target",
                             none_means="the built-in simulator")
    region: str | None = option(None, _SM, "AWS region.", none_means="AWS_REGION / your profile")
    endpoint_url: str | None = option(None, _SM, "Runtime endpoint URL override.",
                                      metavar="URL")
    inference_component: str | None = option(None, _SM, "Inference component name.")
    custom_attributes: str | None = option(None, _SM, "X-Amzn-SageMaker-Custom-Attributes.")
    target_variant: str | None = option(None, _SM, "Production variant.")
    payload_format: str = option("auto", _SM, "Container payload format.",
                                 choices=PAYLOAD_FORMATS)

    def __post_init__(self) -> None:
        kind = target_kind(self.url)
        if kind == SIMULATOR:
            object.__setattr__(self, "url", None)
        if kind == "sagemaker":
            endpoint, url_region = sagemaker_url(self.url)
            if url_region and self.region and url_region != self.region:
                raise ConfigError(f"conflicting regions: {self.region!r} (--region) and "
                                  f"{url_region!r} (in {self.url!r}); give one")
            object.__setattr__(self, "region", self.region or url_region)
        self.check()

    @property
    def kind(self) -> str:
        """``simulator``, ``sagemaker`` or ``http``."""
        return target_kind(self.url)

    @property
    def is_sagemaker(self) -> bool:
        return self.kind == "sagemaker"

    @property
    def endpoint_name(self) -> str | None:
        return sagemaker_url(self.url)[0] if self.is_sagemaker else None

    def given_sagemaker_options(self) -> list[str]:
        """Names of the SageMaker-only fields that were set (``payload_format`` "auto" is unset)."""
        return [f.name for f in dataclasses.fields(self) if f.name != "url"
                and getattr(self, f.name) not in (None, "auto")]

    def check(self) -> "TargetSpec":
        given = self.given_sagemaker_options()
        if given and not self.is_sagemaker:
            flags = ", ".join("--" + name.replace("_", "-") for name in given)
            raise ConfigError(f"{flags} only apply to sagemaker:// targets")
        return self

    def sagemaker_options(self) -> dict[str, Any]:
        """Keyword arguments for a SageMaker target ({} for HTTP URLs)."""
        if not self.is_sagemaker:
            return {}
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name != "url" and getattr(self, f.name) is not None}




__all__ = ["SIMULATOR", "TargetSpec", "target_kind", "sagemaker_url"]
