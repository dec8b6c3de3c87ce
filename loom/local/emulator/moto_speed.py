"""moto's SQS queue scans, made as cheap as the answers they give (the embedded emulator only).

moto 5 builds a queue's whole attribute dict (three approximate counts, each a pass over every
message reading the clock per message) for each message a ReceiveMessage hands out (its
retention check asks GetQueueAttributes for ``MessageRetentionPeriod``), and three times per
name a GetQueueAttributes asks for. Under a backlog of a thousand messages every receive then
costs tens of thousands of clock reads, and the emulator, not the engine, sets the pace: the
1,000-execution soak ran at under one step a second with moto's server at 80 % CPU, most of it
there. Its SendMessage builds the same attribute dict (to read ``ContentBasedDeduplication``),
and every scan of the messages (the visible list, the three counts) reads the clock twice per
message. The replacements return what moto's own code returns, from one pass at most, reading
the clock once per pass.

moto 5.2 also answers every DynamoDB call through its generic, shape-driven serializer, which
walks botocore's model member by member for each attribute of each item: a quarter of the
emulator's time in the 1,000-execution soak. An item's attribute values are already in their
wire form when they reach it, so a value made only of the types the serializer copies unchanged
(S, N, BOOL, NULL, SS, NS, L, M) is copied as is; anything else (binary, which it encodes) takes
moto's own path.

And its Query on a table (not an index) sorts every item of the table, then keeps the
partition asked for: a step's history read cost a pass over all 20,000 items the soak's
executions had written, and the soak's final check of 1,000 histories took minutes. The
replacement runs moto's own Query over a view of the table that holds only that partition. An
index Query sorted the whole table the same way before keeping the items with the asked hash key
(the sweeper's tick took 75 % of the emulator after 20,000 items): it now runs over a view holding
the items whose index hash key matches, found in one pass without sorting, sorted by moto.

Its UpdateItem was a step's biggest cost (three a step, 10 ms of the emulator's CPU each, 32 of
the 40 ms a step took there): every visit of every node by each of the ten validators rebuilt the
validator's dict of node types to processors (bound methods included) just to read its keys, and
the expression was parsed twice per call (the request layer to check the names it uses, the
backend to run it), the same strings every step. The validators now build that dict once each;
a parse is kept by its expression string (moto deep-copies the tree before validating it, so the
kept one is never changed); and moto's request routing lists its installed services once, not
with a directory scan per request, and each response class's methods once, not per request.

After those, the engine's own commit (one UpdateItem a step, the write every step pays) still
cost 13 ms of the emulator's CPU: its ConditionExpression was lexed anew on every call (a dozen
regular expressions looked up per token, 1.4 ms), and of the ten validator passes the three that
look only at the expression, its names and the table's keys ran twice for every new item. The
lexed tokens are now kept by the condition's text, and those three passes are skipped for a
parse, names and key schema they have already passed (see ``validate_update``).

Then the commit's condition was still parsed twice a call, a dozen passes over its tokens each:
a third of the commit's cost in a burst. A parse is now kept per thread by the condition's text,
its names and its values' names and types, and each call puts its own values in the kept tree's
value leaves (``parse_condition``).

And its TransactWriteItems deep-copied every table a transaction names before running it, to
put the copy back should the transaction be cancelled: a pass over the whole table per
transaction. The 1,000-execution soak (fan-out items, callbacks and children commit by
transaction) spent half the emulator's time there and grew it to 4.5 GB. Now only the items the
transaction writes are copied, and only those are put back (``transact_write_items``).

After all that, a step's two writes still paid for work done twice or quadratically: a new item's
UpdateItem (the commit makes one every step) was validated twice, the second time to the same
answer (``validator_init``); an item's dict summed the sizes of all its attributes for each one
added (``item_init``); and the request parser rebuilt every attribute value, member by member, from
the request's own JSON (``parse_structure``).
"""

from __future__ import annotations

import copy
import functools
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from moto import backends
from moto.core import parse as _parse
from moto.core import responses as _core_responses
from moto.core import serialize
from moto.core.utils import unix_time, unix_time_millis
from moto.dynamodb import comparisons as _comparisons
from moto.dynamodb import models as _dynamodb_models
from moto.dynamodb.models import dynamo_type as _dynamo_type
from moto.dynamodb.models.table import Table
from moto.dynamodb.parsing import ast_nodes as _ast_nodes
from moto.dynamodb.parsing import expressions as _expressions
from moto.dynamodb.parsing import validators
from moto.sqs import models
from moto.sqs.exceptions import InvalidAttributeName

from loom.local.emulator import moto_index, moto_scan

# moto's expression modules carry no types (``# type: ignore`` at their top): reach them untyped.
ast_nodes: Any = _ast_nodes
parse: Any = _parse  # moto's request parser carries no types either
dynamo_type: Any = _dynamo_type
ITEM_BOUND = 405_000  # moto's LimitedSizeDict bound (DynamoDB's is 400 KB)
core_responses: Any = _core_responses
UpdateExpressionParser: Any = getattr(_expressions, "UpdateExpressionParser")  # noqa: B009  # untyped module
ConditionExpressionParser: Any = getattr(_comparisons, "ConditionExpressionParser")  # noqa: B009  # untyped module


def is_message_valid_based_on_retention_period(self: Any, queue_name: str, message: Any) -> bool:
    """moto's check, reading the one attribute it needs instead of building all of them."""
    retention_period = self.get_queue(queue_name).message_retention_period
    return bool(int(retention_period) + message.sent_timestamp / 1000 > unix_time())


def get_queue_attributes(self: Any, queue_name: str, attribute_names: list[str]) -> dict[str, Any]:
    """moto's GetQueueAttributes with the attribute dict built once, not three times a name."""
    queue = self.get_queue(queue_name)
    if not attribute_names:
        return {}
    valid_names = ["All", *queue.BASE_ATTRIBUTES, *queue.FIFO_ATTRIBUTES, *queue.KMS_ATTRIBUTES]
    invalid_name = next((name for name in attribute_names if name not in valid_names), None)
    if invalid_name or invalid_name == "":
        raise InvalidAttributeName(invalid_name)
    everything: dict[str, Any] = queue.attributes
    if "All" in attribute_names:
        return everything
    return {name: everything[name] for name in attribute_names if everything.get(name) is not None}


def visible_messages(self: Any) -> list[Any]:
    """moto's ``Queue.messages``: visible and not delayed, at one instant."""
    now = unix_time_millis()
    return [m for m in self._messages if now > m.visible_at and not now < m.delayed_until]


def count_not_visible(self: Any) -> int:
    now = unix_time_millis()
    return sum(1 for m in self._messages if not now > m.visible_at)


def count_delayed(self: Any) -> int:
    now = unix_time_millis()
    return sum(1 for m in self._messages if now < m.delayed_until)


_SCALARS = {"S": str, "N": str, "BOOL": bool, "NULL": bool}


def is_wire_value(value: Any) -> bool:
    """An AttributeValue the JSON serializer would copy unchanged (no binary anywhere in it)."""
    if not isinstance(value, dict) or len(value) != 1:
        return False
    ((kind, inner),) = value.items()
    if kind in _SCALARS:
        return isinstance(inner, _SCALARS[kind])
    if kind in ("SS", "NS"):
        return isinstance(inner, list) and all(isinstance(x, str) for x in inner)
    if kind == "L":
        return isinstance(inner, list) and all(is_wire_value(x) for x in inner)
    if kind == "M":
        return isinstance(inner, dict) and all(isinstance(k, str) and is_wire_value(x) for k, x in inner.items())
    return False


_moto_structure = serialize.BaseJSONSerializer._serialize_type_structure


def serialize_structure(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
    """moto's JSON structure serializer, with a DynamoDB attribute value in wire form copied."""
    if key and shape.name == "AttributeValue" and is_wire_value(value):
        self._default_serialize(serialized, value, shape, key)
        return
    _moto_structure(self, serialized, value, shape, key)


_moto_parse_structure = parse.BaseJSONParser._parse_structure


def parse_structure(self: Any, shape: Any, value: Any) -> Any:
    """moto's JSON request parse of a structure, with a DynamoDB attribute value in wire form taken
    as it came: moto walks its ten members to rebuild the same dict (an execution item's twenty
    attributes on every PutItem), and what it rebuilds is the request's own fresh JSON."""
    if shape.name == "AttributeValue" and is_wire_value(value):
        return value
    return _moto_parse_structure(self, shape, value)


class _Partition:
    """A table as its Query reads it, holding one partition: the rest is the table's."""

    def __init__(self, table: Any, hash_key: Any) -> None:
        self._table = table
        found = table.items.get(hash_key)
        self.items = {} if found is None else {hash_key: found}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._table, name)

    def all_items(self) -> list[Any]:
        return moto_scan.all_items(self)  # moto's order over only what the view has


class _Matching:
    """A table as an index Query reads it, holding only the items whose index hash key attributes
    equal the query's: the rest is the table's. Items are kept where moto's own test would keep them
    and possibly more (moto applies its test again), in moto's order (its own sort, of fewer items)."""

    def __init__(self, table: Any, conditions: list[tuple[str, Any]]) -> None:
        self._table = table
        self.items: dict[Any, Any] = {}
        keys = moto_index.candidates(table, conditions)
        if keys is not None:  # the index's map: only the items with the asked value
            for key in keys:
                item = moto_index.item_at(table, key)
                if item is not None and _matches(item, conditions):
                    if table.range_key_attr:
                        self.items.setdefault(key[0], {})[key[1]] = item
                    else:
                        self.items[key[0]] = item
            return
        for hash_key, held in table.items.items():
            if table.range_key_attr:
                kept = {k: item for k, item in held.items() if _matches(item, conditions)}
                if kept:
                    self.items[hash_key] = kept
            elif _matches(held, conditions):
                self.items[hash_key] = held

    def __getattr__(self, name: str) -> Any:
        return getattr(self._table, name)

    def all_items(self) -> list[Any]:
        return moto_scan.all_items(self)  # moto's order over only what the view has


def _matches(item: Any, conditions: list[tuple[str, Any]]) -> bool:
    attrs = getattr(item, "attrs", None)
    if attrs is None:
        return True  # not an Item: moto's loop decides
    for name, value in conditions:
        found = attrs.get(name)
        if found is None or found != value:
            return False
    return True


_moto_query = Table.query


def query_partition(self: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
    """moto's Query over a view of the table: one partition for the table itself (no index: the 8th
    argument), the items with the asked index hash key for an index."""
    index_name = args[6] if len(args) > 6 else kwargs.get("index_name")
    if index_name:
        conditions = kwargs.get("hash_key_conditions")
        if not conditions:
            return _moto_query(self, hash_key, *args, **kwargs)
        return _moto_query(_Matching(self, list(conditions)), hash_key, *args, **kwargs)  # type: ignore[arg-type]
    if hash_key is None:
        return _moto_query(self, hash_key, *args, **kwargs)
    return _moto_query(_Partition(self, hash_key), hash_key, *args, **kwargs)  # type: ignore[arg-type]


def processing_map(self: Any) -> Any:
    """A validator's node types and processors, built once per validator (moto builds it per node visited).

    Every validator's map is a literal of classes to its own bound methods: the same on every call.
    """
    found = self.__dict__.get("_loom_processing_map")
    if found is None:
        found = self.__dict__["_loom_processing_map"] = self._processing_map()
    return found


def nodes_to_be_processed(self: Any) -> tuple[type, ...]:
    """moto's ``nodes_to_be_processed``: the keys of the kept processing map."""
    found = self.__dict__.get("_loom_nodes")
    if found is None:
        found = self.__dict__["_loom_nodes"] = tuple(processing_map(self).keys())
    return tuple(found)


def process(self: Any, node: Any) -> Any:
    """moto's ``process``, reading the kept map."""
    for class_key, processor in processing_map(self).items():
        if isinstance(node, class_key):
            return processor(node)
    return None


_moto_find_clauses = ast_nodes.Node.find_clauses
_memo = threading.local()  # the clause lists of one read-only validator's traversal


def find_clauses(self: Any, clause_types: Any) -> list[Any]:
    """moto's ``find_clauses``; during a read-only validator's pass, each node's answer is kept.

    The first two validators check every nested UpdateExpression node, each a search of its whole
    subtree: quadratic in the expression's length. Their pass changes no node, so a node's clauses
    cannot change while it runs; the lists are dropped when it ends.
    """
    memo = getattr(_memo, "lists", None)
    if memo is None:
        return list(_moto_find_clauses(self, clause_types))
    key = (id(self), tuple(clause_types))
    found = memo.get(key)
    if found is None:
        found = memo[key] = _moto_find_clauses(self, clause_types)
    return list(found)


def read_only_traverse(self: Any, node: Any) -> Any:
    """A traversal by a validator that only checks (ActionCount, OverlappingPaths), with clause lists kept."""
    _memo.lists = {}
    try:
        return ast_nodes.DepthFirstTraverser.traverse(self, node)
    finally:
        _memo.lists = None


_IS_NODE: dict[type, bool] = {}
_NO_HOOK = ast_nodes.DepthFirstTraverser.pre_processing_of_child
_moto_traverse_node = ast_nodes.DepthFirstTraverser.traverse_node_recursively


_MISSING = object()
_HANDLED: dict[tuple[type, type], Any] = {}  # (validator class, node class): its processing map's key, or None


def _handler_key(self: Any, cls: type) -> Any:
    """moto's choice for a node of ``cls``: processed if it is one of the validator's node types, by the
    first entry of its processing map it is an instance of (``nodes_to_be_processed``, ``process``)."""
    found = _HANDLED.get((type(self), cls), _MISSING)
    if found is _MISSING:
        found = None
        if issubclass(cls, self.nodes_to_be_processed()):
            found = next(key for key in processing_map(self) if issubclass(cls, key))
        _HANDLED[(type(self), cls)] = found
    return found


def traverse(self: Any, node: Any) -> Any:
    """moto's ``traverse``: one depth-first, bottom-up pass, as its ``traverse_node_recursively`` makes
    it, asking "is it a node, is it one I process, by which processor" once per class, with the
    pass's hook and processors in the pass's own locals.

    moto asked ``isinstance`` against its abstract base classes for every node of every pass (a
    Python-level ABC check each), and looked its hook, map and methods up per node; seven passes a
    call over ~70 nodes made that the emulator's biggest single cost in a burst (its UpdateItem's
    validation). No node class is registered virtually, and every validator's node types are a
    literal of its class, so the two classes decide. A child that is not a node (a name, a value)
    is not visited: moto's visit returns it unchanged.
    """
    kind = type(self)
    if kind.traverse_node_recursively is not _moto_traverse_node:  # a traversal of its own: moto's path
        return self.traverse_node_recursively(node)
    pre = self.pre_processing_of_child if kind.pre_processing_of_child is not _NO_HOOK else None
    processors = processing_map(self)
    is_node, handled = _IS_NODE, _HANDLED

    def visit(node: Any, child_id: int) -> Any:
        cls = type(node)
        known = is_node.get(cls)
        if known is None:
            known = is_node[cls] = issubclass(cls, ast_nodes.Node)
        if not known:
            return node
        parent_node = node.parent
        children = node.children
        if children is not None:
            for i, child_node in enumerate(children):
                if pre is not None:
                    pre(node, i)
                if is_node.get(type(child_node), True):
                    visit(child_node, i)
        key = handled.get((kind, cls), _MISSING)
        if key is _MISSING:
            key = _handler_key(self, cls)
        if key is not None:
            node = processors[key](node)
            node.parent = parent_node
            if parent_node:
                parent_node.children[child_id] = node
        return node

    return visit(node, -1)


_AS_IS = frozenset({str, int, float, bool, type(None)})  # what deepcopy returns unchanged


def copy_node(self: Any, memo: dict[int, Any]) -> Any:
    """A deep copy of an expression tree node: its attributes copied, parent links kept in the copy.

    moto copies the whole tree before every validation (one UpdateItem: ~70 nodes, their child
    lists and names), which ``copy.deepcopy`` dispatches value by value through its type table: a
    tenth of the emulator's time in a burst. The node's own fields are only strings, child lists,
    nodes and moto's typed values, so those are copied here directly, with deepcopy's memo (a
    shared list or node stays shared); anything else is left to ``copy.deepcopy``.
    """
    cls: Any = type(self)
    new = cls.__new__(cls)
    memo[id(self)] = new
    fields = new.__dict__
    for name, value in self.__dict__.items():
        fields[name] = _copy_field(value, memo)
    return new


def _copy_field(value: Any, memo: dict[int, Any]) -> Any:
    kind = type(value)
    if kind in _AS_IS:
        return value
    found = memo.get(id(value), _MISSING)
    if found is not _MISSING:
        return found
    if kind is list:
        out: list[Any] = []
        memo[id(value)] = out
        for element in value:
            out.append(_copy_field(element, memo))
        return out
    if getattr(kind, "__deepcopy__", None) is copy_node:
        return copy_node(value, memo)
    return copy.deepcopy(value, memo)


_moto_make = UpdateExpressionParser.make.__func__


@functools.lru_cache(maxsize=512)
def _parsed(expression: str) -> Any:
    return _moto_make(UpdateExpressionParser, expression)


def make_update_expression(cls: Any, expression: str) -> Any:
    """moto's parse of an UpdateExpression, kept by its text (a failed parse is not kept: it raises again).

    The tree is shared: moto's three callers only read it (the request layer's check of the names
    and values used) or deep-copy it first (the validators, before they resolve it against the item),
    and the emulator serves DynamoDB one request at a time.
    """
    if cls is not UpdateExpressionParser:
        return _moto_make(cls, expression)
    return _parsed(expression)


_moto_lex = ConditionExpressionParser._lex_condition_expression


@functools.lru_cache(maxsize=512)
def _lexed(expression: str) -> tuple[Any, ...]:
    probe = ConditionExpressionParser.__new__(ConditionExpressionParser)
    probe.condition_expression = expression
    return tuple(_moto_lex(probe))


def lex_condition_expression(self: Any) -> Any:
    """moto's lexing of a ConditionExpression, kept by its text (1.4 ms a call: a dozen regular
    expressions looked up per token). It reads nothing but the text, and its tokens are named
    tuples whose children lists nothing appends to; the parser pops them off a deque of its own,
    so each call gets a new deque of the kept tokens. A text that does not lex raises again."""
    if type(self) is not ConditionExpressionParser:
        return _moto_lex(self)
    return deque(_lexed(self.condition_expression))


_moto_condition_parse = ConditionExpressionParser.parse
_moto_make_operand = ConditionExpressionParser._make_operand
AttributeValue: Any = getattr(_comparisons, "AttributeValue")  # noqa: B009  # untyped module
_CONDITIONS_MAX = 512
_conditions = threading.local()  # each thread its own trees: a kept tree is re-bound per call


def _value_types(values: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((name, next(iter(v)) if isinstance(v, dict) and v else repr(v)) for name, v in values.items()))


def parse_condition(self: Any) -> Any:
    """moto's parse of a ConditionExpression, kept per thread by its text, names and value types.

    An UpdateItem parsed its condition twice (the request layer for the names and values it uses,
    the backend to run it), each a dozen passes over the tokens: a third of the engine's commit
    in the emulator. A parse reads the values only to put each in an ``AttributeValue`` leaf
    (and ``BETWEEN`` refuses a NULL bound), so the same text, names, value names and value types
    give the same tree but for those leaves; a kept tree gets this call's values put back in its
    leaves by moto's own ``AttributeValue.__init__``. moto evaluates a tree before it parses
    another on the same thread (each condition of a transaction too), and a thread's trees are
    its own, so a re-bound tree is never one still in use. A text that fails to parse fails again.
    """
    if type(self) is not ConditionExpressionParser or not self.condition_expression:
        return _moto_condition_parse(self)
    values = self.expression_attribute_values or {}
    key = (
        self.condition_expression,
        tuple(sorted((self.expression_attribute_names or {}).items())),
        _value_types(values),
    )
    kept: dict[Any, Any] | None = getattr(_conditions, "trees", None)
    if kept is None:
        kept = _conditions.trees = {}
    entry = kept.get(key)
    if entry is None:
        self._loom_leaves = []
        tree = _moto_condition_parse(self)
        if len(kept) >= _CONDITIONS_MAX:
            kept.clear()
        kept[key] = (
            tree,
            tuple(self._loom_leaves),
            tuple(self.expr_attr_names_found),
            tuple(self.expr_attr_values_found),
        )
        return tree
    tree, leaves, names_found, values_found = entry
    for leaf, name in leaves:
        AttributeValue.__init__(leaf, values[name])
    self.expr_attr_names_found.extend(names_found)
    self.expr_attr_values_found.extend(values_found)
    return tree


def make_operand(self: Any, node: Any) -> Any:
    """moto's operand; a value leaf is noted with its placeholder while a kept parse is made."""
    operand = _moto_make_operand(self, node)
    leaves = getattr(self, "_loom_leaves", None)
    if leaves is not None and node.kind == ConditionExpressionParser.Kind.EXPRESSION_ATTRIBUTE_VALUE:
        leaves.append((operand, node.text))
    return operand


# The first three of UpdateExpressionValidator's ten passes check only the expression tree, its
# attribute names and the table's key attributes (too many clauses, overlapping paths, a key
# updated), and change nothing. Once they pass for one parse (kept by make_update_expression), one
# set of names and one key schema, they pass again for the same three: they are skipped then.
_EXPRESSION_ONLY = (
    validators.ActionCountValidator,
    validators.OverlappingPathsValidator,
    validators.UpdateHashRangeKeyValidator,
)
# key -> (the parse it was for, held so that its id is not reused; whether it names a key attribute)
_checked: dict[tuple[Any, ...], tuple[Any, bool]] = {}
_CHECKED_MAX = 4096
_moto_validator_init = validators.Validator.__init__

# A new item's UpdateItem is validated twice by moto: against an empty placeholder before the
# item is made (so that an invalid update makes nothing), then against the item it made, which
# holds only its key attributes. Of the ten passes only the attribute-resolving one reads the item,
# so when the expression names no key attribute the second validation can only repeat the
# first's answer: it is handed the first's validated tree (moto ignores the first's), never
# validating again. Whether an expression names a key is kept beside its expression-only checks
# (``_checked``), asked once per parse, names and key schema. The engine's commit writes a new
# step item every step.
_fresh = threading.local()  # .first: the last placeholder validation of this thread, for its second


@dataclass(frozen=True)
class _FirstPass:
    """A new item's validation against its placeholder, of an expression that names no key
    attribute: what moto's second validation may reuse."""

    source: Any  # the kept parse both validators are given
    names: Any  # the request's own dicts, held (identity is their test, so their ids stay theirs)
    values: Any
    table: Any
    tree: Any  # the validated tree the first validation returned

    def serves(self, source: Any, names: Any, values: Any, item: Any, table: Any) -> bool:
        """True for the same call's second validator: same parse, dicts and table, and an item
        holding only its key attributes."""
        if source is not self.source or names is not self.names or values is not self.values:
            return False
        return table is self.table and set(item.attrs) <= set(table.table_key_attrs)


def _attribute_names(node: Any, names: dict[str, str], out: set[str]) -> set[str]:
    """Every attribute an expression tree names, placeholders resolved (an unknown one as itself)."""
    if isinstance(node, ast_nodes.ExpressionAttribute):
        out.add(node.get_attribute_name())
    elif isinstance(node, ast_nodes.ExpressionAttributeName):
        placeholder = node.get_attribute_name_placeholder()
        out.add(names.get(placeholder, placeholder))
    for child in getattr(node, "children", None) or ():
        if isinstance(child, ast_nodes.Node):
            _attribute_names(child, names, out)
    return out


def _names_a_key(source: Any, names: Any, keys: list[str]) -> bool:
    return not _attribute_names(source, names or {}, set()).isdisjoint(keys)


def validator_init(
    self: Any, expression: Any, expression_attribute_names: Any, expression_attribute_values: Any, item: Any, table: Any
) -> None:
    """moto's Validator.__init__, remembering the parse it was given (moto deep-copies it); a new
    item's second validator takes the first's validated tree instead (see ``_FirstPass``)."""
    names, values = expression_attribute_names, expression_attribute_values
    first, _fresh.first = getattr(_fresh, "first", None), None
    if first is not None and first.serves(expression, names, values, item, table):
        self.__dict__.update(
            expression_attribute_names=names,
            expression_attribute_values=values,
            item=item,
            table=table,
            processors=[],
            node_to_validate=first.tree,
            _loom_source=expression,
            _loom_validated=True,
        )
        return
    self.__dict__["_loom_source"] = expression
    _moto_validator_init(self, expression, names, values, item, table)


def _checked_key(self: Any) -> tuple[Any, ...]:
    names = tuple(sorted((self.expression_attribute_names or {}).items()))
    return (id(self.__dict__.get("_loom_source")), names, tuple(self.table.table_key_attrs))


def validate_update(self: Any) -> Any:
    """moto's UpdateExpressionValidator.validate, less the expression-only checks already passed."""
    if self.__dict__.get("_loom_validated"):
        return self.node_to_validate
    key = _checked_key(self)
    source = self.__dict__.get("_loom_source")
    kept = _checked.get(key)
    if kept is not None and kept[0] is not source:
        kept = None
    known = source is not None and kept is not None
    node = self.node_to_validate
    for processor in self.processors:
        if known and isinstance(processor, _EXPRESSION_ONLY):
            continue
        node = processor.traverse(node)
    if source is None:
        return node
    if kept is None:
        if len(_checked) >= _CHECKED_MAX:
            _checked.clear()
        keys = self.table.table_key_attrs
        kept = _checked[key] = (source, _names_a_key(source, self.expression_attribute_names, keys))
    if not kept[1] and not self.item.attrs:  # a placeholder: the item is not made yet
        _fresh.first = _FirstPass(
            source, self.expression_attribute_names, self.expression_attribute_values, self.table, node
        )
    return node


# ------------------------------------------------------------------ an item's construction

# moto's item dict checks the 405,000-byte bound on every attribute it is given, by summing the
# sizes of all the attributes already in it: building an item of n attributes sizes n(n+1)/2 of
# them (210 for an execution item, on every PutItem). Sizes are never negative, so the running
# total first passes the bound at the same attribute whether it is summed anew each time or kept:
# the item is built in moto's order, each value sized once, and fails where moto's would.
_moto_item_init = dynamo_type.Item.__init__


def item_init(self: Any, hash_key: Any, range_key: Any, attrs: dict[str, Any]) -> None:
    """moto's Item.__init__: the same item, or the same error at the same attribute, in one pass."""
    self.hash_key, self.range_key = hash_key, range_key
    self.attrs = made = dynamo_type.LimitedSizeDict()
    total = 0
    for key, raw in attrs.items():
        value = dynamo_type.DynamoType(raw)
        total += dynamo_type.bytesize(key) + value.size()
        if total > ITEM_BOUND:
            raise dynamo_type.ItemSizeTooLarge
        dict.__setitem__(made, key, value)


# ------------------------------------------------------------------ TransactWriteItems

dynamodb_models: Any = _dynamodb_models
_WRITES = ("Put", "Update", "Delete")  # a ConditionCheck writes nothing
_tx = threading.local()  # set while a transaction runs with its writes backed up item by item


class _TablesKept:
    """The ``copy`` module as moto's DynamoDB backend sees it: while a transaction runs with its
    items backed up one by one, its ``deepcopy`` of a whole table hands the table back uncopied
    (its rollback then puts the same table back: a no-op); everything else is ``copy``'s own."""

    def deepcopy(self, value: Any, memo: Any = None) -> Any:
        if getattr(_tx, "items", None) is not None and isinstance(value, Table):
            return value
        return copy.deepcopy(value, memo)

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)


def _target(table: Any, op_type: str, op: Any) -> tuple[Any, Any] | None:
    """The (hash, range) key a Put, Update or Delete writes, as moto reads it; None when moto
    cannot read one either (it then fails that operation without writing)."""
    return moto_index.key_of(table, op.get("Item") if op_type == "Put" else op.get("Key"))


def _written_items(backend: Any, transact_items: Any) -> dict[tuple[str, Any, Any], Any] | None:
    """A copy of each item the transaction may write, as it is before (None where there is none),
    by (table, hash, range); None when a written table has a stream (its records roll back too)."""
    kept: dict[tuple[str, Any, Any], Any] = {}
    for entry in transact_items if isinstance(transact_items, list) else []:
        if not isinstance(entry, dict) or len(entry) != 1:
            continue
        op_type, op = next(iter(entry.items()))
        table = backend.tables.get(op.get("TableName")) if isinstance(op, dict) else None
        if op_type not in _WRITES or table is None:
            continue
        if table.stream_shard is not None:
            return None
        key = _target(table, op_type, op)
        if key is None or (op["TableName"], *key) in kept:
            continue
        try:
            current = table.get_item(*key)
        except Exception:  # moto refuses that key shape: the operation fails, writing nothing
            continue
        kept[(op["TableName"], *key)] = copy.deepcopy(current)
    return kept


def _put_back(backend: Any, kept: dict[tuple[str, Any, Any], Any]) -> None:
    """Each kept item back as it was, behind moto's own writes: the index map is told too."""
    for (name, hash_value, range_value), before in kept.items():
        table = backend.tables[name]
        if table.has_range_key:
            if before is None:
                table.items.get(hash_value, {}).pop(range_value, None)
            else:
                table.items[hash_value][range_value] = before
        elif before is None:
            table.items.pop(hash_value, None)
        else:
            table.items[hash_value] = before
        moto_index.reindex(table, [(hash_value, range_value)])


_moto_transact_write_items = dynamodb_models.DynamoDBBackend.transact_write_items


def transact_write_items(self: Any, transact_items: Any) -> Any:
    """moto's TransactWriteItems, with its all-or-nothing kept by backing up only what it writes:
    on any error moto raises (a cancellation, a repeated item, a validation error) the written
    items are put back as they were, which is what moto's copy of the whole table restored."""
    kept = _written_items(self, transact_items)
    if kept is None:
        return _moto_transact_write_items(self, transact_items)
    _tx.items = kept
    try:
        return _moto_transact_write_items(self, transact_items)
    except BaseException:
        _put_back(self, kept)
        raise
    finally:
        _tx.items = None


_modules: tuple[str, ...] = ()
_moto_modules = backends.list_of_moto_modules


def list_of_moto_modules() -> tuple[str, ...]:
    """moto's installed services, listed once: its directory does not change while the emulator runs."""
    return _modules


_moto_method_names = core_responses.method_names_from_class


@functools.cache
def _method_names(clazz: type) -> tuple[str, ...]:
    return tuple(_moto_method_names(clazz))


def method_names_from_class(clazz: Any) -> list[str]:
    """moto's list of a response class's methods (``inspect.getmembers`` per request), made once per class."""
    return list(_method_names(clazz))


def expression_replacements() -> list[tuple[object, str, Any]]:
    """(owner, attribute, replacement) for moto's expression handling and request routing."""
    global _modules
    if not _modules:
        _modules = tuple(_moto_modules())
    return [
        (backends, "list_of_moto_modules", list_of_moto_modules),
        (core_responses, "method_names_from_class", method_names_from_class),
        (ast_nodes.DepthFirstTraverser, "nodes_to_be_processed", nodes_to_be_processed),
        (ast_nodes.DepthFirstTraverser, "process", process),
        (ast_nodes.DepthFirstTraverser, "traverse", traverse),
        (ast_nodes.Node, "find_clauses", find_clauses),
        (ast_nodes.Node, "__deepcopy__", copy_node),
        (validators.ActionCountValidator, "traverse", read_only_traverse),
        (validators.OverlappingPathsValidator, "traverse", read_only_traverse),
        (UpdateExpressionParser, "make", classmethod(make_update_expression)),
        (ConditionExpressionParser, "_lex_condition_expression", lex_condition_expression),
        (ConditionExpressionParser, "parse", parse_condition),
        (ConditionExpressionParser, "_make_operand", make_operand),
        (validators.Validator, "__init__", validator_init),
        (validators.UpdateExpressionValidator, "validate", validate_update),
    ]


def apply() -> None:
    """Install the replacements in moto (the emulator process calls it once)."""
    for owner, name, value in expression_replacements():
        setattr(owner, name, value)
    serialize.BaseJSONSerializer._serialize_type_structure = serialize_structure  # type: ignore[method-assign]
    parse.BaseJSONParser._parse_structure = parse_structure
    Table.query = query_partition  # type: ignore[method-assign]
    moto_scan.install()
    dynamodb_models.copy = _TablesKept()
    dynamo_type.Item.__init__ = item_init
    dynamodb_models.DynamoDBBackend.transact_write_items = transact_write_items
    models.Queue.messages = property(visible_messages)  # type: ignore[assignment,method-assign]
    models.Queue.approximate_number_of_messages_not_visible = property(count_not_visible)  # type: ignore[assignment,method-assign]
    models.Queue.approximate_number_of_messages_delayed = property(count_delayed)  # type: ignore[assignment,method-assign]
    models.SQSBackend.is_message_valid_based_on_retention_period = is_message_valid_based_on_retention_period  # type: ignore[method-assign]
    models.SQSBackend.get_queue_attributes = get_queue_attributes  # type: ignore[method-assign]
