"""botocore errors mapped to Loom's typed errors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from botocore.exceptions import BotoCoreError, ClientError

from engine.errors import ConflictError, PayloadTooLarge, ResourceMissing, TransientError

TRANSIENT_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "Throttling",
        "RequestLimitExceeded",
        "InternalServerError",
        "InternalFailure",
        "ServiceUnavailable",
        "RequestThrottled",
        "TransactionInProgressException",
        "AWS.SimpleQueueService.RequestThrottled",
    }
)
MISSING_CODES = frozenset({"ResourceNotFoundException", "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"})


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


@contextmanager
def mapped(resource: str) -> Iterator[None]:
    try:
        yield
    except ClientError as exc:
        code = error_code(exc)
        message = exc.response.get("Error", {}).get("Message", "")
        if code == "ConditionalCheckFailedException":
            raise ConflictError(f"conditional write on {resource} lost") from exc
        if code in TRANSIENT_CODES:
            raise TransientError(f"{resource}: {code}: {message}") from exc
        if code in MISSING_CODES:
            raise ResourceMissing(f"{resource} does not exist ({code}); is the stack deployed?") from exc
        if code == "ValidationException" and "size" in message.lower():
            raise PayloadTooLarge(f"{resource}: {message}") from exc
        raise
    except BotoCoreError as exc:
        raise TransientError(f"{resource}: {exc}") from exc
