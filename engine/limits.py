"""AWS size limits, checked before they bite."""

from __future__ import annotations

import re

from engine.errors import InvalidExecutionId, PayloadTooLarge

DYNAMODB_ITEM_LIMIT = 400 * 1024
SQS_MESSAGE_LIMIT = 256 * 1024
# Room for the attributes around the JSON documents (keys, status, timestamps...).
ITEM_OVERHEAD_RESERVE = 2 * 1024
# Room a FAILED write needs for its error (engine/error_report.FULL plus the step's
# name, index and reason): an execution item that was accepted must always be able
# to fail with its real error.
ERROR_RESERVE = 4 * 1024
# A step's history record keeps every attempt. The first ones keep their full error
# (a traceback included), later ones a brief one, so the record's size has a bound
# that depends only on the attempt number.
FULL_DETAIL_ATTEMPTS = 10
FULL_ATTEMPT_BYTES = 4 * 1024
BRIEF_ATTEMPT_BYTES = 640
# The input is stored twice in the execution's item (as the input and as the first
# context), with room for the error it may fail with, so the largest input is under
# half the item limit. The guide states it (docs/guide/workflows.md).
INPUT = "the input"
MAX_INPUT_BYTES = (DYNAMODB_ITEM_LIMIT - ITEM_OVERHEAD_RESERVE - ERROR_RESERVE) // 2
ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def check_execution_id(execution_id: object) -> str:
    if not isinstance(execution_id, str) or not ID_RE.fullmatch(execution_id):
        raise InvalidExecutionId(
            "execution id must be 1 to 128 characters of letters, digits, '-' and '_'",
            execution_id=str(execution_id)[:140],
        )
    return execution_id


def truncate_middle(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, keeping its head and its tail."""
    size = utf8_len(text)
    if size <= limit:
        return text
    marker = f" ...[{size} bytes, cut to {limit}]... "
    room = max(0, limit - utf8_len(marker))
    data = text.encode("utf-8")
    head = data[: room // 2].decode("utf-8", "ignore")
    tail = data[size - (room - room // 2) :].decode("utf-8", "ignore")
    return head + marker + tail


def meta_item_size(input_json: str, context_json: str) -> int:
    """Upper bound of the execution item's size, with room for the error it may fail with."""
    return utf8_len(input_json) + utf8_len(context_json) + ITEM_OVERHEAD_RESERVE + ERROR_RESERVE


def full_detail(attempt: int) -> bool:
    """Whether attempt number ``attempt`` keeps its full error in the step's history."""
    return attempt <= FULL_DETAIL_ATTEMPTS


def history_item_size(result_json: str, attempts: int) -> int:
    """Upper bound of a step's history record holding ``result_json`` and ``attempts`` attempts."""
    full = min(attempts, FULL_DETAIL_ATTEMPTS)
    brief = max(0, attempts - FULL_DETAIL_ATTEMPTS)
    records = full * FULL_ATTEMPT_BYTES + brief * BRIEF_ATTEMPT_BYTES
    return utf8_len(result_json) + records + ITEM_OVERHEAD_RESERVE


def check_item(size: int, what: str) -> None:
    if size > DYNAMODB_ITEM_LIMIT:
        raise PayloadTooLarge(too_large(size, what), size=size, limit=DYNAMODB_ITEM_LIMIT)


def too_large(size: int, what: str) -> str:
    """What to tell the caller: for the input, its own size against the largest input there is
    (``size`` is ``meta_item_size(input, input)``), not the doubled item size."""
    if what == INPUT:
        input_bytes = (size - ITEM_OVERHEAD_RESERVE - ERROR_RESERVE) // 2
        return (
            f"the input is {input_bytes:,} bytes of JSON; the largest input is {MAX_INPUT_BYTES:,} bytes "
            f"(an execution stores it twice, as its input and its first context, "
            f"in one DynamoDB item of at most {DYNAMODB_ITEM_LIMIT:,} bytes (400 KB))"
        )
    return (
        f"{what} would make a DynamoDB item of about {size:,} bytes, "
        f"over the {DYNAMODB_ITEM_LIMIT:,}-byte (400 KB) item limit"
    )


def check_message(body: str) -> None:
    size = utf8_len(body)
    if size > SQS_MESSAGE_LIMIT:
        raise PayloadTooLarge(
            f"queue message of {size} bytes is over the {SQS_MESSAGE_LIMIT}-byte (256 KB) SQS limit",
            size=size,
            limit=SQS_MESSAGE_LIMIT,
        )
