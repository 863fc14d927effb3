"""Settings of a SageMaker endpoint's CloudWatch metrics, for every front door (CLI,
scenarios, MCP, API): what a deploy asks SageMaker to publish (:class:`EndpointMetricsConfig`,
the endpoint config's ``MetricsConfig``) and how a run reads them back
(:class:`CloudWatchSettings`, whose run options are declared on its fields). Plain
dataclasses: no AWS import here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import ConfigError
from .option import option

_SAGEMAKER = "SageMaker (sagemaker:// targets only)"

# MetricPublishFrequencyInSeconds values SageMaker accepts.
PUBLISH_FREQUENCIES_S = (10, 30, 60, 120, 180, 240, 300)


@dataclass(frozen=True)
class EndpointMetricsConfig:
    """What a deploy asks for (``--metrics-frequency``, ``--detailed-observability``)."""

    frequency_s: int = 10  # MetricPublishFrequencyInSeconds
    detailed_observability: bool = False  # EnableDetailedObservability
    enhanced: bool = True  # EnableEnhancedMetrics

    def validate(self) -> "EndpointMetricsConfig":
        if isinstance(self.frequency_s, bool) or self.frequency_s not in PUBLISH_FREQUENCIES_S:
            choices = ", ".join(str(s) for s in PUBLISH_FREQUENCIES_S)
            raise ConfigError(f"--metrics-frequency must be one of {choices} seconds "
                              f"(got {self.frequency_s!r})")
        return self

    def to_api(self) -> dict[str, Any]:
        """The ``MetricsConfig`` structure of CreateEndpointConfig."""
        return {"EnableEnhancedMetrics": self.enhanced,
                "MetricPublishFrequencyInSeconds": self.frequency_s,
                "EnableDetailedObservability": self.detailed_observability}


@dataclass(frozen=True)
class CloudWatchSettings:
    """``sagemaker://`` runs: reading each level's endpoint metrics from CloudWatch
    (:mod:`loadgen.aws.level_metrics`). CloudWatch publishes them a minute or more late."""

    wait_s: float = option(90.0, _SAGEMAKER, "After each level, wait up to S seconds (in the "
                           "background) for the endpoint's CloudWatch metrics, which arrive "
                           "late (0: don't read them).", metavar="S", low=0, high=3600,
                           key="cloudwatch_wait_s", flag="--cloudwatch-wait")
    endpoint_url: str | None = option(None, _SAGEMAKER, "CloudWatch API endpoint (a VPC "
                                      "endpoint, or a local emulator).", metavar="URL",
                                      key="cloudwatch_endpoint_url",
                                      none_means="botocore's for the region")
    poll_s: float = 5.0  # between two GetMetricData polls while waiting
    period_s: int = 10  # the data points' period (the finest SageMaker publishes)
    # Scenario phases: don't fetch during the run; mark each level "pending" with its
    # window, fetched after the phase (loadgen.scenario.cloudwatch).
    defer: bool = False

    def __post_init__(self) -> None:
        if not (0 <= self.wait_s <= 3600):  # also refuses NaN
            raise ConfigError(f"--cloudwatch-wait must be 0 to 3600 seconds (got {self.wait_s})")
        if not (0 < self.poll_s <= 600):
            raise ConfigError("CloudWatch poll interval must be > 0 and <= 600 s "
                              f"(got {self.poll_s})")
