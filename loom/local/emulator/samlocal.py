"""``events/local-env.json``: `sam local invoke` pointed at a running `loom up`.

SAM only overrides environment variables the template declares, which is why
template.yaml declares AWS_ENDPOINT_URL (empty in AWS). The values here are
what ``loom up`` creates on its default port, derived from the template:

    python -m loom.local.emulator.samlocal [--endpoint http://127.0.0.1:5230] > events/local-env.json

The embedded emulator checks signatures, and `sam local invoke` hands the container the shell's
AWS credentials; ``--credentials`` prints the running stack's admin key (from its owner-only
stack file) as ``export`` lines for that shell:

    eval "$(python -m loom.local.emulator.samlocal --credentials)"
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from loom import stackfile
from loom.template import Template, function_environment, local_stack_id

DEFAULT_ENDPOINT = "http://127.0.0.1:5230"
ACCOUNT = "123456789012"


def local_refs(template: Template, endpoint: str, region: str = "us-east-1") -> dict[str, Any]:
    """The refs create_resources returns against moto at ``endpoint``, without asking moto."""
    refs: dict[str, Any] = {**template.parameter_defaults(), "AWS::Region": region, "AWS::AccountId": ACCOUNT}
    refs["AWS::StackName"] = f"loom-{refs.get('Stage', 'dev')}"
    refs["AWS::StackId"] = local_stack_id(refs)
    for logical_id, res in template.of_type("AWS::SQS::Queue").items():
        name = str(template.resolve(res.get("Properties", {}).get("QueueName", logical_id), refs))
        refs[logical_id] = f"{endpoint}/{ACCOUNT}/{name}"
        refs[f"{logical_id}.Arn"] = f"arn:aws:sqs:{region}:{ACCOUNT}:{name}"
        refs[f"{logical_id}.QueueName"] = name
    for logical_id, res in template.of_type("AWS::DynamoDB::Table").items():
        name = str(template.resolve(res["Properties"]["TableName"], refs))
        refs[logical_id] = name
        refs[f"{logical_id}.Arn"] = f"arn:aws:dynamodb:{region}:{ACCOUNT}:table/{name}"
    return refs


def env_vars(endpoint: str = DEFAULT_ENDPOINT, template: Template | None = None) -> dict[str, dict[str, str]]:
    tpl = template or Template()
    refs = local_refs(tpl, endpoint)
    out = {}
    for logical_id, spec in tpl.functions().items():
        env = function_environment(spec, refs, tpl)
        env["AWS_ENDPOINT_URL"] = endpoint
        out[logical_id] = dict(sorted(env.items()))
    return out


def credential_exports(info: dict[str, Any] | None) -> str:
    """``export`` lines for the stack's emulator admin key (sam local invoke passes the shell's on)."""
    keys = (info or {}).get("emulator_credentials")
    if not keys:
        raise ValueError("no running embedded stack here (its stack file names no emulator credentials): `loom up`")
    return (
        f"export AWS_ACCESS_KEY_ID={keys['access_key_id']}\n"
        f"export AWS_SECRET_ACCESS_KEY={keys['secret_access_key']}\n"
        "unset AWS_SESSION_TOKEN\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loom.local.emulator.samlocal", description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default=DEFAULT_ENDPOINT, help="the emulator as the container reaches it")
    parser.add_argument("--credentials", action="store_true", help="print the running stack's emulator key as exports")
    args = parser.parse_args(argv)
    if args.credentials:
        try:
            sys.stdout.write(credential_exports(stackfile.read()))
        except ValueError as exc:
            sys.stderr.write(f"samlocal: {exc}\n")
            return 1
        return 0
    sys.stdout.write(json.dumps(env_vars(args.endpoint), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
