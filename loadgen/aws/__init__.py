"""SageMaker control plane: deploy an endpoint, time it to InService, read its log, tear it down.

The programmatic API (the scenario runner calls these; blocking, run them in a
thread from async code)::

    from loadgen.aws import DeploySpec, deploy_endpoint, delete_deployment

    dep = deploy_endpoint(DeploySpec(name="gemma-qat", image=IMAGE, role_arn=ROLE,
                                     model_id="google/gemma-4-E2B-it-qat-w4a16-ct"),
                          region="us-east-2", record_path="results/gemma-qat.deployment.json")
    print(dep.seconds_to_in_service, dep.facts)
    delete_deployment(dep)  # or delete_deployment("results/gemma-qat.deployment.json")
"""

from .deploy import (
    DEFAULT_INSTANCE_TYPE,
    DeployCancelled,
    DeployFailed,
    DeploySpec,
    deploy_endpoint,
    parse_env,
    with_hf_token,
)
from .inventory import endpoint_status, list_deployments
from .logs import endpoint_facts, endpoint_log_group, tail_endpoint_log
from .record import Deployment, load_record
from .resources import Teardown
from .session import AwsConfig
from .teardown import delete_deployment, delete_endpoint_named

__all__ = [
    "DEFAULT_INSTANCE_TYPE",
    "AwsConfig",
    "DeployCancelled",
    "DeployFailed",
    "DeploySpec",
    "Deployment",
    "Teardown",
    "delete_deployment",
    "delete_endpoint_named",
    "deploy_endpoint",
    "endpoint_facts",
    "endpoint_log_group",
    "endpoint_status",
    "list_deployments",
    "load_record",
    "parse_env",
    "tail_endpoint_log",
    "with_hf_token",
]
