"""The example steps' side-effect ledger, in the Loom table under LEDGER# keys."""

from __future__ import annotations

import json
from typing import Any

from engine.adapters.aws_errors import mapped
from engine.adapters.paging import query_items
from engine.adapters.write_token import ALL_OLD, TOKEN, conditional, new_token
from engine.errors import ConflictError


class DynamoLedger:
    def __init__(self, client: Any, table_name: str) -> None:
        self._db = client
        self._table = table_name

    @staticmethod
    def _key(key: str) -> dict[str, Any]:
        execution_id, _, step = key.partition(":")
        return {"PK": {"S": f"LEDGER#{execution_id}"}, "SK": {"S": f"EFFECT#{step}"}}

    def apply(self, key: str, effect: dict[str, Any]) -> bool:
        """Land ``effect`` once under ``key``: False (and a duplicate counted) if it had landed.
        A resend of this call's own write (its answer lost) is not a duplicate."""
        token = new_token()
        try:
            with conditional(f"table {self._table}", token):
                self._db.update_item(
                    TableName=self._table,
                    Key=self._key(key),
                    UpdateExpression=f"SET effect = :e, idempotency_key = :k, {TOKEN} = :wt",
                    ConditionExpression="attribute_not_exists(effect)",
                    ExpressionAttributeValues={
                        ":e": {"S": json.dumps(effect, sort_keys=True)},
                        ":k": {"S": key},
                        ":wt": {"S": token},
                    },
                    **ALL_OLD,
                )
        except ConflictError:
            with mapped(f"table {self._table}"):
                self._db.update_item(
                    TableName=self._table,
                    Key=self._key(key),
                    UpdateExpression="ADD duplicates :one",
                    ExpressionAttributeValues={":one": {"N": "1"}},
                )
            return False
        return True

    def ran(self, key: str) -> int:
        with mapped(f"table {self._table}"):
            answer = self._db.update_item(
                TableName=self._table,
                Key=self._key(key),
                UpdateExpression="ADD runs :one SET idempotency_key = :k",
                ExpressionAttributeValues={":one": {"N": "1"}, ":k": {"S": key}},
                ReturnValues="UPDATED_NEW",
            )
        return int(answer["Attributes"]["runs"]["N"])

    def entries(self, execution_id: str) -> dict[str, dict[str, Any]]:
        """Raw ledger rows: effect, runs and duplicates per idempotency key."""
        out: dict[str, dict[str, Any]] = {}
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "PK = :pk",
            "ExpressionAttributeValues": {":pk": {"S": f"LEDGER#{execution_id}"}},
            "ConsistentRead": True,
        }
        for item in query_items(self._db, f"table {self._table}", kwargs):
            out[item["idempotency_key"]["S"]] = {
                "effect": json.loads(item["effect"]["S"]) if "effect" in item else None,
                "runs": int(item.get("runs", {"N": "0"})["N"]),
                "duplicates": int(item.get("duplicates", {"N": "0"})["N"]),
            }
        return out

    def effects(self, execution_id: str) -> dict[str, dict[str, Any]]:
        return {k: v["effect"] for k, v in self.entries(execution_id).items() if v["effect"] is not None}
