"""The console's ACLs (DescribeAcls) and SCRAM users (DescribeUserScramCredentials), as
the session's principal: both need DESCRIBE on the cluster (403 otherwise). On a broker
without security the answer is ``{"secured": false, "total": 0, "items": []}``."""

from __future__ import annotations

from typing import Any

from chronik.http.console.kafka import DESCRIBE_ACLS, DESCRIBE_SCRAM, KafkaSession, check
from chronik.http.console.params import int_param
from chronik.http.server import HttpError
from chronik.security.acl_model import Operation, PatternType, Permission, ResourceType

MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}


def _name(enum: Any, value: int) -> str:
    try:
        return str(enum(int(value)).name)
    except ValueError:
        return "UNKNOWN"


def _resource_type(text: str) -> int:
    if not text:
        return int(ResourceType.ANY)
    try:
        return int(ResourceType[text.upper()])
    except KeyError:
        raise HttpError(400, "bad_request", f"unknown resource_type {text!r}") from None


async def list_acls(kafka: KafkaSession, secured: bool, query: dict[str, str]) -> dict[str, Any]:
    if not secured:
        return {"secured": False, "total": 0, "items": []}
    principal = query.get("principal") or None
    response = await kafka.send(
        DESCRIBE_ACLS,
        resource_type_filter=_resource_type(query.get("resource_type", "")),
        resource_name_filter=None,
        pattern_type_filter=int(PatternType.ANY),
        principal_filter=principal,
        host_filter=None,
        operation=int(Operation.ANY),
        permission_type=int(Permission.ANY),
    )
    check(response.error_code, response.error_message, "cannot describe ACLs")
    items = [
        {
            "principal": acl.principal,
            "host": acl.host,
            "operation": _name(Operation, acl.operation),
            "permission": _name(Permission, acl.permission_type),
            "resource_type": _name(ResourceType, resource.resource_type),
            "resource_name": resource.resource_name,
            "pattern_type": _name(PatternType, resource.pattern_type),
        }
        for resource in response.resources
        for acl in resource.acls
    ]
    items.sort(key=lambda a: (a["resource_type"], a["resource_name"], a["principal"],
                              a["operation"], a["permission"], a["host"]))
    offset = int_param(query, "offset", 0, 0, 2**31)
    limit = int_param(query, "limit", 500, 1, 500)
    return {"secured": True, "total": len(items), "items": items[offset : offset + limit]}


async def list_users(kafka: KafkaSession, secured: bool, query: dict[str, str]) -> dict[str, Any]:
    if not secured:
        return {"secured": False, "total": 0, "items": []}
    response = await kafka.send(DESCRIBE_SCRAM, users=None)
    check(response.error_code, response.error_message, "cannot describe users")
    items = []
    for result in response.results:
        if int(result.error_code):
            continue
        items.append(
            {
                "user": result.user,
                "mechanisms": [
                    {"mechanism": MECHANISMS.get(int(c.mechanism), "UNKNOWN"),
                     "iterations": int(c.iterations)}
                    for c in result.credential_infos
                ],
            }
        )
    items.sort(key=lambda u: u["user"])
    offset = int_param(query, "offset", 0, 0, 2**31)
    limit = int_param(query, "limit", 500, 1, 500)
    return {"secured": True, "total": len(items), "items": items[offset : offset + limit]}
