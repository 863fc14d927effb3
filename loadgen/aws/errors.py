"""The one boundary where botocore exceptions become one-line loadgen errors.

Every control-plane call runs inside ``with aws_call("create model 'x'"):``. A
botocore exception leaving the block is re-raised as :class:`AwsError`,
:class:`AuthError` or :class:`ConfigError` whose message says what was being
done, what AWS said (shortened: enum lists and newlines removed) and how to fix
it. Known secret values (HF_TOKEN, ...) passed as ``secrets`` are masked in the
message, in case a parameter error echoes one back.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterable, Iterator

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    ParamValidationError,
    PartialCredentialsError,
    ProfileNotFound,
    ReadTimeoutError,
)

from ..errors import AuthError, AwsError, ConfigError, LoadgenError, one_line
from ..redact import redact_values

_ACCESS_DENIED = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"}
_BAD_CREDENTIALS = {
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "InvalidSignatureException",
    "SignatureDoesNotMatch",
    "IncompleteSignature",
    "MissingAuthenticationToken",
    "ExpiredToken",
    "ExpiredTokenException",
    "RequestExpired",
}
_QUOTA = {"ResourceLimitExceeded", "ServiceQuotaExceededException", "LimitExceededException"}
_THROTTLED = {"ThrottlingException", "Throttling", "TooManyRequestsException"}
_NOT_FOUND_CODES = {"ResourceNotFound", "ResourceNotFoundException"}



def _message_line(text: str) -> str:
    """AWS's message as one line, without the list of every valid value it may carry."""
    return one_line(re.sub(r"enum value set: \[[^\]]*\]", "enum value set: [...]", text))


def error_code(err: ClientError) -> str:
    return err.response.get("Error", {}).get("Code", "") or ""


def error_message(err: ClientError) -> str:
    return err.response.get("Error", {}).get("Message", "") or ""


def is_not_found(err: ClientError) -> bool:
    """SageMaker says "Could not find endpoint/model/..." with ValidationException."""
    code = error_code(err)
    if code in _NOT_FOUND_CODES:
        return True
    return code in ("ValidationException", "ValidationError") and "could not find" in error_message(err).lower()


def _validation_hint(message: str) -> str | None:
    """A fix for the ValidationException messages users meet when deploying."""
    lower = message.lower()
    instance = re.search(r"Value '([^']*)' at '[^']*instanceType' failed to satisfy constraint", message)
    if instance:
        return (
            f"unknown instance type '{instance.group(1)}': check the spelling (e.g. ml.g6.xlarge) "
            "and that SageMaker offers it for endpoints in this region"
        )
    if "assume role" in lower or "assume the role" in lower:
        role = re.search(r"arn:aws[\w-]*:iam::\d+:role/[\w+=,.@/-]+", message)
        shown = role.group(0) if role else "the execution role"
        return (
            f"SageMaker cannot assume {shown}: check that the role exists and its trust policy "
            "allows sagemaker.amazonaws.com (pass the role ARN with --role)"
        )
    if ("image" in lower or "repository" in lower) and any(
        word in lower for word in ("not found", "invalid", "does not exist", "cannot find", "not supported")
    ):
        return (
            f"container image not usable ({_message_line(message)}): check the --image URI, that it is in "
            "this region's ECR, and that the role may pull it"
        )
    return None


def map_client_error(err: ClientError, doing: str) -> LoadgenError:
    code = error_code(err)
    message = _message_line(error_message(err))
    if code in _ACCESS_DENIED:
        action = re.search(r"not authorized to perform: ([\w:*-]+)", message)
        needed = action.group(1) if action else "the permission for this call"
        return AuthError(
            f"{doing}: access denied: your AWS identity lacks {needed}; grant it in IAM or use another profile"
        )
    if code in _BAD_CREDENTIALS:
        return AuthError(
            f"{doing}: AWS rejected the credentials ({code}); refresh them (e.g. aws sso login) "
            "or check AWS_PROFILE / AWS_ACCESS_KEY_ID and the region"
        )
    if code in _QUOTA:
        return AwsError(f"{doing}: quota exceeded: {message} Request an increase in the Service Quotas console.")
    if code in _THROTTLED:
        return AwsError(f"{doing}: throttled by AWS ({code}); wait a minute and retry")
    if code == "ResourceInUse":
        return AwsError(f"{doing}: {message} (the name is taken: delete the old resource or choose another --name)")
    if code in ("ValidationException", "ValidationError"):
        hint = _validation_hint(message)
        return AwsError(f"{doing}: {hint or message}")
    return AwsError(f"{doing}: {code or 'error'}: {message}")


def map_botocore_error(err: BotoCoreError, doing: str) -> LoadgenError:
    if isinstance(err, (NoCredentialsError, PartialCredentialsError)):
        return AuthError(
            f"{doing}: no AWS credentials found; set AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, or run aws sso login"
        )
    if isinstance(err, NoRegionError):
        return ConfigError(f"{doing}: no AWS region; pass --region or set AWS_REGION")
    if isinstance(err, ProfileNotFound):
        return ConfigError(f"{doing}: {_message_line(str(err))}; check AWS_PROFILE")
    if isinstance(err, ParamValidationError):
        return ConfigError(f"{doing}: invalid parameter: {_message_line(str(err))}")
    if isinstance(err, (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError)):
        return AwsError(
            f"{doing}: cannot reach AWS ({_message_line(str(err))}); check --region, --endpoint-url and the network"
        )
    return AwsError(f"{doing}: {_message_line(str(err))}")


@contextmanager
def aws_call(doing: str, *, secrets: Iterable[str] = ()) -> Iterator[None]:
    """Map botocore exceptions raised inside the block to one-line loadgen errors.

    The botocore exception is not chained (``from None``): its text may hold a
    parameter value, and the mapped message already says what went wrong.
    """
    try:
        yield
    except ClientError as err:
        raise _masked(map_client_error(err, doing), secrets) from None
    except BotoCoreError as err:
        raise _masked(map_botocore_error(err, doing), secrets) from None


def _masked(err: LoadgenError, secrets: Iterable[str]) -> LoadgenError:
    return type(err)(redact_values(str(err), secrets))
