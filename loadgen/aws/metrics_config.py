"""The endpoint config's ``MetricsConfig``: how often SageMaker publishes the endpoint's
CloudWatch metrics, and at what granularity.

- ``EnableEnhancedMetrics``: invocation and utilization metrics also per instance
  (``InstanceId``) and per GPU (``AcceleratorId``); the endpoint-level series loadgen reads
  (``EndpointName``/``VariantName``) stay as they were.
- ``MetricPublishFrequencyInSeconds``: 10, 30, 60, 120, 180, 240 or 300 (AWS's default is
  60). It applies to utilization metrics always and, with enhanced metrics, to invocation
  metrics too: at 10 s a short load level gets several points instead of one a minute.
- ``EnableDetailedObservability``: also scrape the container's Prometheus ``/metrics`` into
  CloudWatch (opt-in: more metrics, more CloudWatch cost).

botocore added these fields in 1.44; with an older botocore the deploy goes on without them
(one warning: :func:`metrics_config_argument`).
"""

from __future__ import annotations

from typing import Any, Callable

from ..cloudwatch_settings import PUBLISH_FREQUENCIES_S, EndpointMetricsConfig

__all__ = ["PUBLISH_FREQUENCIES_S", "EndpointMetricsConfig", "metrics_config_argument",
           "supports_metrics_config"]

def supports_metrics_config(service_model: Any) -> bool:
    """Whether this botocore's SageMaker model has CreateEndpointConfig's MetricsConfig."""
    operation = service_model.operation_model("CreateEndpointConfig")
    return "MetricsConfig" in operation.input_shape.members


def metrics_config_argument(sagemaker_client: Any, metrics: EndpointMetricsConfig,
                            warn: Callable[[str], None]) -> dict[str, Any]:
    """``{"MetricsConfig": ...}`` for create_endpoint_config, or ``{}`` (and one ``warn``
    line) when the installed botocore predates the field."""
    if supports_metrics_config(sagemaker_client.meta.service_model):
        return {"MetricsConfig": metrics.to_api()}
    import botocore

    warn(f"botocore {botocore.__version__} has no MetricsConfig: deploying without enhanced "
         "metrics (SageMaker's 60 s publishing); pip install -U 'botocore>=1.44' to get them")
    return {}
