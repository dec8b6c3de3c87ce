"""moto's UpdateItem, made cheaper (loom.local.emulator.moto_speed): the same answers, errors, items as moto's."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto import backends, mock_aws
from moto.dynamodb.models.dynamo_type import DynamoType, Item
from moto.dynamodb.parsing import validators

from loom.local.emulator import moto_speed
from tests.unit.moto_tables import pk_sk_table

pytestmark = pytest.mark.unit

KEY = {"PK": {"S": "EXEC#e1"}, "SK": {"S": "STEP#0000#a"}}
COMMIT = (
    "SET #s = :done, #r = :r, idx = :i, #n = :name, finished_at = :f, last_attempt = :a, "
    "started_at = if_not_exists(started_at, :st), wt = :wt, "
    "attempts = list_append(if_not_exists(attempts, :empty), :att) REMOVE #e"
)
COMMIT_VALUES = {
    ":done": {"S": "COMPLETED"},
    ":r": {"S": "{}"},
    ":i": {"N": "0"},
    ":name": {"S": "a"},
    ":f": {"N": "2.5"},
    ":st": {"N": "1.5"},
    ":a": {"N": "1"},
    ":empty": {"L": []},
    ":att": {"L": [{"S": '{"attempt": 1}'}]},
    ":wt": {"S": "token-1"},
}
ONE = {":one": {"N": "1"}, ":k": {"S": "e1:0"}}

# Each: the call's arguments beyond TableName and Key. Successes, conditional failures, and
# every validation error the replaced passes raise (several clauses, overlapping and repeated paths, syntax).
CALLS: list[dict[str, Any]] = [
    {
        "UpdateExpression": COMMIT,
        "ConditionExpression": "(attribute_not_exists(#s) OR #s <> :done) AND (attribute_not_exists(wt) OR wt <> :wt)",
        "ExpressionAttributeNames": {"#s": "status", "#r": "result", "#n": "name", "#e": "error"},
        "ExpressionAttributeValues": COMMIT_VALUES,
        "ReturnValues": "ALL_OLD",
    },
    {
        "UpdateExpression": COMMIT,
        "ConditionExpression": "(attribute_not_exists(#s) OR #s <> :done) AND (attribute_not_exists(wt) OR wt <> :wt)",
        "ExpressionAttributeNames": {"#s": "status", "#r": "result", "#n": "name", "#e": "error"},
        "ExpressionAttributeValues": COMMIT_VALUES,
        "ReturnValues": "ALL_OLD",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    },
    {
        "UpdateExpression": "ADD runs :one SET idempotency_key = :k",
        "ExpressionAttributeValues": ONE,
        "ReturnValues": "UPDATED_NEW",
    },
    {
        "UpdateExpression": "ADD runs :one SET idempotency_key = :k",
        "ExpressionAttributeValues": ONE,
        "ReturnValues": "UPDATED_NEW",
    },
    {
        "UpdateExpression": "SET effect = :e, m = :m, l = :l",
        "ConditionExpression": "attribute_not_exists(effect)",
        "ExpressionAttributeValues": {
            ":e": {"S": "x"},
            ":m": {"M": {"a": {"M": {"b": {"N": "1"}}}}},
            ":l": {"L": [{"N": "0"}, {"N": "1"}, {"N": "2"}, {"N": "3"}]},
        },
    },
    {
        "UpdateExpression": "SET effect = :e",
        "ConditionExpression": "attribute_not_exists(effect)",
        "ExpressionAttributeValues": {":e": {"S": "y"}},
    },
    {
        "UpdateExpression": "SET m.a.b = m.a.b + :one, m.c = :k REMOVE l[2], l[0]",
        "ExpressionAttributeValues": ONE,
        "ReturnValues": "ALL_NEW",
    },
    {"UpdateExpression": "SET a = :one SET b = :one", "ExpressionAttributeValues": {":one": {"N": "1"}}},
    {"UpdateExpression": "ADD c :one ADD d :one", "ExpressionAttributeValues": {":one": {"N": "1"}}},
    {"UpdateExpression": "SET m = :one, m.a = :one", "ExpressionAttributeValues": {":one": {"N": "1"}}},
    {
        "UpdateExpression": "SET #x = :one, #x = :one",
        "ExpressionAttributeNames": {"#x": "x"},
        "ExpressionAttributeValues": {":one": {"N": "1"}},
    },
    {"UpdateExpression": "SET = :one", "ExpressionAttributeValues": {":one": {"N": "1"}}},
    {"UpdateExpression": "SET missing.deeper = :one", "ExpressionAttributeValues": {":one": {"N": "1"}}},
    {"UpdateExpression": "SET PK = :k", "ExpressionAttributeValues": {":k": {"S": "other"}}},
    # One expression text, names that pass and then name a key: the expression-only checks kept
    # for the first set of names must not let the second through.
    {
        "UpdateExpression": "SET #k = :k",
        "ExpressionAttributeNames": {"#k": "other"},
        "ExpressionAttributeValues": {":k": {"S": "x"}},
    },
    {
        "UpdateExpression": "SET #k = :k",
        "ExpressionAttributeNames": {"#k": "SK"},
        "ExpressionAttributeValues": {":k": {"S": "x"}},
    },
    {
        "UpdateExpression": "SET #k = :k, #j = :k",
        "ExpressionAttributeNames": {"#k": "a", "#j": "b"},
        "ExpressionAttributeValues": {":k": {"S": "x"}},
    },
    {
        "UpdateExpression": "SET #k = :k, #j = :k",
        "ExpressionAttributeNames": {"#k": "a", "#j": "a"},
        "ExpressionAttributeValues": {":k": {"S": "x"}},
    },
    {
        "UpdateExpression": "DELETE tags :t",
        "ExpressionAttributeValues": {":t": {"SS": ["a"]}},
        "ReturnValues": "UPDATED_OLD",
    },
]


def outcomes() -> list[Any]:
    """Every call's answer (or error code and message) and the item after it, twice over (the second pass
    reads what the parse cache kept)."""
    out: list[Any] = []
    with mock_aws():
        db = pk_sk_table()
        for _ in range(2):
            db.delete_item(TableName="t", Key=KEY)
            for call in CALLS:
                out += updated(db, KEY, call)
    return out


def updated(db: Any, key: dict[str, Any], call: dict[str, Any]) -> list[Any]:
    """One update's answer (or error code, message and returned item), then the item after it."""
    try:
        answer = db.update_item(TableName="t", Key=key, **call)
        answer.pop("ResponseMetadata", None)
        seen: list[Any] = [("ok", answer)]
    except ClientError as exc:
        seen = [("error", exc.response["Error"], exc.response.get("Item"))]
    return [*seen, ("item", db.get_item(TableName="t", Key=key).get("Item"))]


def new_item_outcomes() -> list[Any]:
    """Every call made on an item that does not exist yet (a key of its own), with its answer or
    error and the item after it: moto validates each twice, before making the item and after."""
    out: list[Any] = []
    with mock_aws():
        db = pk_sk_table()
        for index, call in enumerate([*CALLS, NAMES_A_KEY, READS_A_KEY]):
            out += updated(db, {**KEY, "SK": {"S": f"STEP#{index:04d}"}}, call)
    return out


# Expressions that name a key attribute: a new item's two validations may differ (the first sees
# no key attribute, the second sees them), so both run.
NAMES_A_KEY = {
    "UpdateExpression": "SET copy = if_not_exists(#h, :k)",
    "ExpressionAttributeNames": {"#h": "PK"},
    "ExpressionAttributeValues": {":k": {"S": "x"}},
}
READS_A_KEY = {"UpdateExpression": "SET copy = SK"}


def install(monkeypatch: pytest.MonkeyPatch) -> None:
    moto_speed._parsed.cache_clear()
    moto_speed._lexed.cache_clear()
    moto_speed._checked.clear()
    moto_speed._fresh.__dict__.clear()
    moto_speed._conditions.__dict__.clear()
    for owner, name, value in moto_speed.expression_replacements():
        monkeypatch.setattr(owner, name, value, raising=False)


def test_update_item_answers_errors_and_items_are_moto_s(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = outcomes()
    kinds = {o[1]["Code"] for o in expected if o[0] == "error"}
    assert {"ConditionalCheckFailedException", "ValidationException"} <= kinds, "the calls must reach both failures"
    install(monkeypatch)
    assert outcomes() == expected


def test_a_new_item_s_update_answers_errors_and_items_are_moto_s(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = new_item_outcomes()
    assert ("item", None) in expected, "some calls must fail on a new item, making nothing"
    assert sum(1 for o in expected if o[0] == "ok") >= 8, "and most make it"
    install(monkeypatch)
    assert new_item_outcomes() == expected


def _validations(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The items the attribute-resolving pass (the one pass that reads the item) ran against."""
    items: list[Any] = []
    moto_init = validators.ExpressionAttributeResolvingProcessor.__init__

    def counted(self: Any, names: Any, item: Any) -> None:
        items.append(None if item is None else dict(item.attrs))
        moto_init(self, names, item)

    monkeypatch.setattr(validators.ExpressionAttributeResolvingProcessor, "__init__", counted)
    return items


def test_a_new_item_is_validated_once(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch)
    items = _validations(monkeypatch)
    with mock_aws():
        db = pk_sk_table()
        db.update_item(TableName="t", Key=KEY, **CALLS[0])
        assert items == [{}], "the engine's commit on a new item: the placeholder's validation, reused"
        items.clear()
        db.update_item(TableName="t", Key=KEY, **CALLS[2])
        assert len(items) == 1 and set(items[0]) > {"PK", "SK"}, "an existing item: validated once, by moto too"


def test_a_first_validation_serves_only_an_expression_naming_no_key() -> None:
    parse = moto_speed._moto_make(moto_speed.UpdateExpressionParser, COMMIT)
    names = {"#s": "status", "#r": "result", "#n": "name", "#e": "error"}
    assert not moto_speed._names_a_key(parse, names, ["PK", "SK"])
    assert moto_speed._names_a_key(parse, {**names, "#e": "SK"}, ["PK", "SK"]), "a placeholder naming a key"
    nested = moto_speed._moto_make(moto_speed.UpdateExpressionParser, "SET copy = m.SK")
    assert moto_speed._names_a_key(nested, {}, ["PK", "SK"]), "a key's name anywhere in a path"
    # moto refuses such an expression before the pass that reads the item (a key "cannot be
    # updated"), so the two validations never disagree there today; the test keeps that true.
    with mock_aws():
        pk_sk_table()
        table = backends.get_backend("dynamodb")["123456789012"]["us-east-1"].get_table("t")
        first = moto_speed._FirstPass(parse, names, COMMIT_VALUES, table, tree=object())
        made = _item({"PK": {"S": "p"}, "SK": {"S": "s"}})
        assert first.serves(parse, names, COMMIT_VALUES, made, table)
        assert not first.serves(parse, dict(names), COMMIT_VALUES, made, table), "another call's dicts"
        grown = _item({"PK": {"S": "p"}, "SK": {"S": "s"}, "a": {"N": "1"}})
        assert not first.serves(parse, names, COMMIT_VALUES, grown, table), "an item holding more than its keys"


def _item(attrs: dict[str, Any]) -> Any:
    return Item(DynamoType(attrs["PK"]), DynamoType(attrs["SK"]), attrs)


def test_a_first_validation_is_reused_only_by_its_own_call(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch)
    items = _validations(monkeypatch)
    with mock_aws():
        db = pk_sk_table()
        db.update_item(TableName="t", Key=KEY, **CALLS[0])
        moto_speed._fresh.first = moto_speed._FirstPass(*(object(),) * 5)  # left by a call that failed after it
        items.clear()
        db.update_item(TableName="t", Key={**KEY, "SK": {"S": "STEP#0001#b"}}, **CALLS[0])
        assert items == [{}], "a new call's own first validation replaces what was left"
        items.clear()
        db.update_item(TableName="t", Key={**KEY, "SK": {"S": "STEP#0001#b"}}, **CALLS[2])
        assert len(items) == 1 and items[0], "an existing item's validator takes nothing left by the call before"


def test_each_update_expression_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch)
    parsed: list[str] = []
    moto_make = moto_speed._moto_make

    def counted(cls: Any, expression: str) -> Any:
        parsed.append(expression)
        return moto_make(cls, expression)

    monkeypatch.setattr(moto_speed, "_moto_make", counted)
    outcomes()
    valid = [c["UpdateExpression"] for c in CALLS if c["UpdateExpression"] != "SET = :one"]
    assert sorted(set(parsed) - {"SET = :one"}) == sorted(set(valid))
    assert sum(1 for e in parsed if e != "SET = :one") == len(set(valid)), "a valid expression is parsed once"
    assert parsed.count("SET = :one") == 2, "a failed parse is not kept: each of the two calls parses it again"


def test_a_validator_builds_its_processing_map_once_not_per_node(monkeypatch: pytest.MonkeyPatch) -> None:
    builds = {"n": 0}
    original = validators.ActionCountValidator._processing_map

    def counted(self: Any) -> Any:
        builds["n"] += 1
        return original(self)

    monkeypatch.setattr(validators.ActionCountValidator, "_processing_map", counted)
    with mock_aws():
        db = pk_sk_table()
        db.update_item(TableName="t", Key=KEY, **CALLS[0])
        by_moto = builds["n"]
        install(monkeypatch)
        builds["n"] = 0
        db.update_item(TableName="t", Key={**KEY, "SK": {"S": "STEP#0001#b"}}, **CALLS[0])
    # A new item is validated twice (before it is created and after); the second skips the
    # expression-only checks the first passed, so only the first ActionCountValidator runs.
    assert builds["n"] == 1
    assert by_moto > 20 * builds["n"], "moto rebuilt it for every node visited"


def test_moto_s_services_are_listed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    listed = tuple(backends.list_of_moto_modules())
    install(monkeypatch)
    assert tuple(backends.list_of_moto_modules()) == listed
    assert "dynamodb" in backends.list_of_moto_modules() and "sqs" in backends.list_of_moto_modules()


def test_a_response_class_s_methods_are_moto_s_list(monkeypatch: pytest.MonkeyPatch) -> None:
    from moto.core import responses as core_responses
    from moto.dynamodb.responses import DynamoHandler
    from moto.sqs.responses import SQSResponse

    expected = [core_responses.method_names_from_class(c) for c in (DynamoHandler, SQSResponse)]
    assert "update_item" in expected[0] and "receive_message" in expected[1]
    install(monkeypatch)
    assert [core_responses.method_names_from_class(c) for c in (DynamoHandler, SQSResponse)] == expected


def test_a_condition_is_lexed_once_per_text(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch)
    lexed: list[str] = []
    moto_lex = moto_speed._moto_lex

    def counted(parser: Any) -> Any:
        lexed.append(parser.condition_expression)
        return moto_lex(parser)

    monkeypatch.setattr(moto_speed, "_moto_lex", counted)
    outcomes()
    conditions = {c["ConditionExpression"] for c in CALLS if "ConditionExpression" in c}
    assert sorted(lexed) == sorted(conditions), "each text lexed once, over both passes of every call"
    # A text that does not lex raises moto's ValueError every time (its server answers 500): not kept.
    parser = moto_speed.ConditionExpressionParser("a ~ :one", {}, {})
    for _ in range(2):
        with pytest.raises(ValueError, match="Cannot parse condition"):
            parser._lex_condition_expression()
    assert lexed.count("a ~ :one") == 2


def test_the_expression_only_checks_run_once_per_parse_names_and_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch)
    runs = {"n": 0}
    moto_check = validators.OverlappingPathsValidator.check_for_overlapping_paths

    def counted(self: Any, node: Any) -> Any:
        runs["n"] += 1
        return moto_check(self, node)

    monkeypatch.setattr(validators.OverlappingPathsValidator, "check_for_overlapping_paths", counted)
    with mock_aws():
        db = pk_sk_table()
        for i in range(3):  # new items: each validated twice by moto (before it exists, and after)
            db.update_item(TableName="t", Key={**KEY, "SK": {"S": f"STEP#{i}"}}, **CALLS[0])
        once = runs["n"]
        other_names = {**CALLS[0], "ExpressionAttributeNames": {"#s": "state", "#r": "result", "#n": "name", "#e": "e"}}
        db.update_item(TableName="t", Key={**KEY, "SK": {"S": "STEP#9"}}, **other_names)
    assert once >= 1 and runs["n"] == 2 * once, "checked again for other names only"


def _shape(node: Any, seen: dict[int, int]) -> Any:
    """A node's structure: its class and fields, a node met again named by the order it was first met."""
    if id(node) in seen:
        return ("again", seen[id(node)])
    if isinstance(node, list):
        return [_shape(v, seen) for v in node]
    if not hasattr(node, "__dict__"):
        return repr(node)
    seen[id(node)] = len(seen)
    return (type(node).__name__, {k: _shape(v, seen) for k, v in sorted(node.__dict__.items())})


def _objects(node: Any, out: set[int]) -> set[int]:
    if id(node) in out or not (isinstance(node, list) or hasattr(node, "__dict__")):
        return out
    out.add(id(node))
    for value in node if isinstance(node, list) else node.__dict__.values():
        _objects(value, out)
    return out


def test_a_tree_copy_is_deepcopy_s_and_shares_nothing_with_the_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    """The validators change the copy; the kept parse must not change with it."""
    tree = moto_speed._moto_make(moto_speed.UpdateExpressionParser, COMMIT)
    monkeypatch.setattr(moto_speed.ast_nodes.Node, "__deepcopy__", None, raising=False)  # deepcopy's own way
    expected = _shape(copy.deepcopy(tree), {})
    install(monkeypatch)
    mine = copy.deepcopy(tree)
    assert _shape(mine, {}) == expected
    assert _objects(mine, set()).isdisjoint(_objects(tree, set()))
