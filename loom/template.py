"""template.yaml, read: the one description of the system.

The local stack, the tests and the chaos kit create the table and queues from
here, so that what runs on a laptop is what ``sam deploy`` builds.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loom import schedule
from loom.jsonvalue import loads_object

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "template.yaml"
SERVERLESS_FUNCTION = "AWS::Serverless::Function"
_SUB_VARIABLE = re.compile(r"\$\{([^}]*)\}")


class TemplateError(ValueError):
    """template.yaml says something AWS would refuse, or something the local stack cannot read."""


def loads(text: str, filename: str = "template.yaml") -> dict[str, Any]:
    """Parse a template with cfn-lint's CloudFormation YAML decoder (short-form tags, duplicate keys)."""
    # Imported here: the decoder pulls in cfn-lint (a second of imports), which the function
    # processes that only need ROOT must not pay.
    from cfnlint.decode import cfn_yaml

    try:
        doc = cfn_yaml.loads(text, filename)
    except cfn_yaml.CfnParseError as exc:
        raise TemplateError(f"{filename}: {exc}") from exc
    if not isinstance(doc, Mapping) or "Resources" not in doc:
        raise TemplateError(f"{filename}: not a CloudFormation template (no Resources section)")
    # Plain dicts and strings: cfn-lint's nodes carry line marks we do not need downstream.
    return loads_object(json.dumps(doc, default=str), filename)


@functools.lru_cache(maxsize=8)
def _parsed(path: str, mtime_ns: int) -> str:
    return json.dumps(loads(Path(path).read_text(encoding="utf-8"), path))


def load(path: Path | str = TEMPLATE) -> dict[str, Any]:
    """The template at ``path`` as plain data; parsed once per file version (a fresh copy each call)."""
    resolved = Path(path).resolve()
    return loads_object(_parsed(str(resolved), resolved.stat().st_mtime_ns), str(resolved))


@dataclass(frozen=True)
class FunctionSpec:
    logical_id: str
    handler: str
    timeout: int
    memory: int
    environment: dict[str, Any]  # unresolved: Globals merged with the function's own
    events: dict[str, Any]
    reserved_concurrency: int | None = None  # ReservedConcurrentExecutions
    event_invoke: dict[str, Any] = field(default_factory=dict)  # EventInvokeConfig (async retries, event age)
    properties: dict[str, Any] = field(default_factory=dict)  # every property, Globals merged, unresolved

    def sqs_max_concurrency(self) -> int | None:
        """The SQS trigger's ScalingConfig.MaximumConcurrency, if one sets it."""
        for event in self.events.values():
            if event.get("Type") == "SQS":
                value = (event.get("Properties", {}).get("ScalingConfig") or {}).get("MaximumConcurrency")
                if value is not None:
                    return int(value)
        return None


class Template:
    def __init__(self, doc: dict[str, Any] | None = None) -> None:
        self.doc = doc if doc is not None else load()
        self.resources: dict[str, Any] = self.doc["Resources"]
        self.parameters: dict[str, Any] = self.doc.get("Parameters", {})
        self.globals: dict[str, Any] = self.doc.get("Globals", {}).get("Function", {})
        self._functions = self._read_functions()
        self.check()

    def of_type(self, kind: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.resources.items() if v.get("Type") == kind}

    def parameter_defaults(self) -> dict[str, str]:
        return {k: str(v.get("Default", "")) for k, v in self.parameters.items()}

    def _read_functions(self) -> dict[str, FunctionSpec]:
        """Each function's properties with Globals merged the way SAM merges them (samtranslator's Globals)."""
        from samtranslator.model.exceptions import ExceptionWithMessage
        from samtranslator.plugins.globals.globals import Globals

        try:
            merger = Globals(copy.deepcopy(self.doc))
        except ExceptionWithMessage as exc:
            raise TemplateError(f"Globals: {exc.message}") from exc
        out = {}
        for logical_id, res in self.of_type(SERVERLESS_FUNCTION).items():
            props = copy.deepcopy(merger.merge(SERVERLESS_FUNCTION, copy.deepcopy(res.get("Properties", {}))))
            reserved = props.get("ReservedConcurrentExecutions")
            out[logical_id] = FunctionSpec(
                logical_id=logical_id,
                handler=props.get("Handler", ""),
                timeout=int(props.get("Timeout", 3)),
                memory=int(props.get("MemorySize", 128)),
                environment=dict((props.get("Environment") or {}).get("Variables") or {}),
                events=dict(props.get("Events") or {}),
                reserved_concurrency=None if reserved is None else int(reserved),
                event_invoke=dict(props.get("EventInvokeConfig") or {}),
                properties=props,
            )
        return out

    def functions(self) -> dict[str, FunctionSpec]:
        return dict(self._functions)

    # ------------------------------------------------------------ what AWS would refuse

    def check(self) -> None:
        """TemplateError for settings that `sam deploy` would fail on (the ones the local stack acts on)."""
        for spec in self._functions.values():
            where = spec.logical_id
            _check_range(f"{where}.ReservedConcurrentExecutions", spec.reserved_concurrency, 0, None)
            _check_range(
                f"{where}.EventInvokeConfig.MaximumRetryAttempts", spec.event_invoke.get("MaximumRetryAttempts"), 0, 2
            )
            _check_range(
                f"{where}.EventInvokeConfig.MaximumEventAgeInSeconds",
                spec.event_invoke.get("MaximumEventAgeInSeconds"),
                60,
                21600,
            )
            for name, event in spec.events.items():
                props = event.get("Properties", {})
                if event.get("Type") == "Schedule" and isinstance(props.get("Schedule"), str):
                    try:
                        schedule.check(props["Schedule"])
                    except schedule.ScheduleError as exc:
                        raise TemplateError(f"{where}.Events.{name}.Schedule: EventBridge rejects {exc}") from exc
                if event.get("Type") == "SQS":
                    limit = (props.get("ScalingConfig") or {}).get("MaximumConcurrency")
                    _check_range(f"{where}.Events.{name}.ScalingConfig.MaximumConcurrency", limit, 2, 1000)

    # ------------------------------------------------------------ intrinsic functions

    def resolve(self, value: Any, refs: dict[str, Any]) -> Any:
        """Resolve intrinsic functions in ``value`` against ``refs``.

        ``refs`` maps parameter names, pseudo parameters and logical ids to
        values, and ``"Logical.Attr"`` to attribute values. SAM CLI's resolver
        does Fn::If, the conditions, Join, Select, Split, FindInMap and Base64;
        Ref, GetAtt and Sub are ours (see _LocalIntrinsics).
        """
        return _LocalIntrinsics(self.doc, refs).resolve(value)

    def condition(self, name: str, refs: dict[str, Any]) -> bool:
        if name not in self.doc.get("Conditions", {}):
            raise TemplateError(f"condition {name!r} is not in the template")
        return bool(self.resolve({"Fn::If": [name, True, False]}, refs))

    def truth(self, expr: dict[str, Any], refs: dict[str, Any]) -> bool:
        """A rule expression (Fn::Equals, Fn::Contains, Fn::Not, Fn::And, Fn::Or): SAM CLI resolves only conditions."""
        ((key, arg),) = expr.items()
        if key == "Fn::Equals":
            a, b = (self.resolve(x, refs) for x in arg)
            return str(a) == str(b)
        if key == "Fn::Contains":
            options, value = (self.resolve(x, refs) for x in arg)
            return str(value) in [str(o) for o in options]
        if key == "Fn::Not":
            return not self.truth(arg[0], refs)
        if key in ("Fn::And", "Fn::Or"):
            results = [self.truth(x, refs) for x in arg]
            return all(results) if key == "Fn::And" else any(results)
        if key == "Condition":
            return self.condition(arg, refs)
        raise NotImplementedError(f"condition {key} is not supported locally")

    def broken_rules(self, refs: dict[str, Any]) -> list[str]:
        """The AssertDescription of every template rule these parameters break (CloudFormation
        refuses such a stack before it creates anything; the local stack does the same)."""
        broken = []
        for name, rule in self.doc.get("Rules", {}).items():
            if "RuleCondition" in rule and not self.truth(rule["RuleCondition"], refs):
                continue
            for assertion in rule.get("Assertions", []):
                if not self.truth(assertion["Assert"], refs):
                    broken.append(f"{name}: {assertion.get('AssertDescription', 'assertion failed')}")
        return broken


def _check_range(where: str, value: Any, low: int, high: int | None) -> None:
    if value is None or isinstance(value, dict):  # unset, or an intrinsic resolved later
        return
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise TemplateError(f"{where}: {value!r} is not an integer") from None
    if number < low or (high is not None and number > high):
        span = f"{low}-{high}" if high is not None else f"at least {low}"
        raise TemplateError(f"{where}: {number} is outside what AWS accepts ({span})")


class _LocalIntrinsics:
    """SAM CLI's IntrinsicResolver with Ref, Fn::GetAtt and Fn::Sub answered from the local refs.

    SAM CLI guesses values it does not know (any ``X.Arn`` becomes a Lambda ARN) and
    its Fn::Sub leaves ``${!Literal}`` escaped; locally an unknown reference must fail
    loudly and Sub must follow CloudFormation exactly.
    """

    def __init__(self, doc: dict[str, Any], refs: Mapping[str, Any]) -> None:
        from samcli.lib.intrinsic_resolver.intrinsic_property_resolver import IntrinsicResolver
        from samcli.lib.intrinsic_resolver.intrinsics_symbol_table import IntrinsicsSymbolTable

        self.refs = refs
        shell = {k: doc[k] for k in ("Conditions", "Mappings", "Parameters") if k in doc}
        self._resolver = IntrinsicResolver(template=shell, symbol_resolver=IntrinsicsSymbolTable(template=shell))
        self._resolver.set_intrinsic_key_function_map(
            {
                **self._resolver.default_intrinsic_function_map(),
                "Ref": self._ref,
                "Fn::GetAtt": self._get_att,
                "Fn::Sub": self._sub,
            }
        )

    def resolve(self, value: Any) -> Any:
        from samcli.lib.intrinsic_resolver.invalid_intrinsic_exception import InvalidIntrinsicException

        try:
            return self._resolver.intrinsic_property_resolver(value, ignore_errors=False)
        except InvalidIntrinsicException as exc:
            raise TemplateError(str(exc)) from exc

    def _lookup(self, name: str, what: str) -> Any:
        if name not in self.refs:
            raise KeyError(f"template {what} {name!r} has no local value")
        return self.refs[name]

    def _ref(self, arg: Any, ignore_errors: bool) -> Any:
        return self._lookup(str(self.resolve(arg)), "reference")

    def _get_att(self, arg: Any, ignore_errors: bool) -> Any:
        parts = arg.split(".", 1) if isinstance(arg, str) else [self.resolve(a) for a in arg]
        return self._lookup(".".join(str(p) for p in parts), "attribute")

    def _sub(self, arg: Any, ignore_errors: bool) -> str:
        """Fn::Sub: ``${Name}``, ``${Logical.Attr}``, ``${!Literal}``; with a variable map in the two-argument form."""
        if isinstance(arg, str):
            text, variables = arg, {}
        elif isinstance(arg, list) and len(arg) == 2 and isinstance(arg[0], str) and isinstance(arg[1], dict):
            text, variables = arg[0], self.resolve(arg[1])
        else:
            raise TemplateError(f"Fn::Sub takes a string or [string, {{variables}}], not {arg!r}")

        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"  # ${!Literal} writes ${Literal}
            if name in variables:
                return str(variables[name])
            return str(self._lookup(name, "attribute" if "." in name else "reference"))

        return _SUB_VARIABLE.sub(one, text)


def local_stack_id(refs: dict[str, Any]) -> str:
    """Stands for the stack's id locally: one fixed value per stack name, so the list cursors
    it signs (LOOM_CURSOR_SECRET) stay good across restarts of the local stack."""
    return f"arn:aws:cloudformation:{refs['AWS::Region']}:{refs['AWS::AccountId']}:stack/{refs['AWS::StackName']}/local"


def create_resources(
    session: Any, *, parameters: dict[str, str] | None = None, template: Template | None = None
) -> dict[str, str]:
    """Create the template's DynamoDB tables and SQS queues through ``session``.

    Returns refs for resolving function environments: parameter values, each
    logical id's Ref (table name, queue URL) and ``Logical.Arn`` attributes.
    Existing resources are reused, so calling it twice is harmless.
    """
    tpl = template or Template()
    refs: dict[str, Any] = {**tpl.parameter_defaults(), **(parameters or {})}
    refs.setdefault("AWS::Region", session.region_name)
    refs.setdefault("AWS::AccountId", "123456789012")
    refs.setdefault("AWS::StackName", f"loom-{refs.get('Stage', 'dev')}")
    refs.setdefault("AWS::StackId", local_stack_id(refs))
    broken = tpl.broken_rules(refs)
    if broken:
        raise ValueError("the template's rules refuse these parameters: " + "; ".join(broken))
    sqs = session.client("sqs")
    ddb = session.client("dynamodb")
    queues = tpl.of_type("AWS::SQS::Queue")
    # Queues that others point at (DLQs) first.
    ordered = sorted(queues, key=lambda q: "RedrivePolicy" in queues[q].get("Properties", {}))
    for logical_id in ordered:
        props = tpl.resolve(queues[logical_id].get("Properties", {}), refs)
        name = props.pop("QueueName", logical_id)
        attributes = {k: _attribute(v) for k, v in props.items() if k != "Tags"}
        url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        refs[logical_id], refs[f"{logical_id}.Arn"], refs[f"{logical_id}.QueueName"] = url, arn, name
    for res in tpl.of_type("AWS::SQS::QueuePolicy").values():
        props = tpl.resolve(res["Properties"], refs)
        for url in props["Queues"]:
            sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": json.dumps(props["PolicyDocument"])})
    for logical_id, res in tpl.of_type("AWS::DynamoDB::Table").items():
        props = tpl.resolve(res.get("Properties", {}), refs)
        name = props["TableName"]
        kwargs = {
            k: props[k]
            for k in (
                "TableName",
                "AttributeDefinitions",
                "KeySchema",
                "GlobalSecondaryIndexes",
                "BillingMode",
                "ProvisionedThroughput",
            )
            if k in props
        }
        if "SSESpecification" in props:
            kwargs["SSESpecification"] = _sse(props["SSESpecification"])
        try:
            ddb.create_table(**kwargs)
            ddb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
        except ddb.exceptions.ResourceInUseException:
            pass
        _enable_ttl(ddb, name, props.get("TimeToLiveSpecification"))
        arn = ddb.describe_table(TableName=name)["Table"]["TableArn"]
        refs[logical_id], refs[f"{logical_id}.Arn"] = name, arn
    # Not created locally (nothing reads CloudWatch Logs here), but the roles' policies name them.
    for logical_id, res in tpl.of_type("AWS::Logs::LogGroup").items():
        name = str(tpl.resolve(res.get("Properties", {}).get("LogGroupName", logical_id), refs))
        arn = f"arn:aws:logs:{refs['AWS::Region']}:{refs['AWS::AccountId']}:log-group:{name}:*"
        refs[logical_id], refs[f"{logical_id}.Arn"] = name, arn
    return refs


def _enable_ttl(ddb: Any, table: str, spec: dict[str, Any] | None) -> None:
    """The table's TimeToLiveSpecification, as CloudFormation applies it (moto records it and
    deletes nothing: loom/ttl.py does the deleting locally)."""
    if not spec or not spec.get("Enabled"):
        return
    now = ddb.describe_time_to_live(TableName=table).get("TimeToLiveDescription", {})
    if now.get("TimeToLiveStatus") in ("ENABLED", "ENABLING"):
        return  # set already (a restart): DynamoDB refuses to set it twice
    ddb.update_time_to_live(
        TableName=table, TimeToLiveSpecification={"AttributeName": spec["AttributeName"], "Enabled": True}
    )


def _attribute(value: Any) -> str:
    """A queue property as the SQS API's attribute string."""
    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _sse(spec: dict[str, Any]) -> dict[str, Any]:
    """CloudFormation's SSESpecification as CreateTable's."""
    out: dict[str, Any] = {"Enabled": bool(spec.get("SSEEnabled"))}
    if spec.get("SSEType"):
        out["SSEType"] = spec["SSEType"]
    if spec.get("KMSMasterKeyId"):
        out["KMSMasterKeyId"] = spec["KMSMasterKeyId"]
    return out


def function_environment(spec: FunctionSpec, refs: dict[str, Any], template: Template | None = None) -> dict[str, str]:
    tpl = template or Template()
    return {k: str(tpl.resolve(v, refs)) for k, v in spec.environment.items()}
