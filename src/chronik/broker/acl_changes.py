"""What CreateAcls, DescribeAcls and DeleteAcls share: whether the request may be served
at all, and the answer when the bindings cannot be stored."""

from __future__ import annotations

import logging

from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.security.acl_model import Operation

log = logging.getLogger("chronik.security")


def unavailable(ctx: RequestContext, operation: Operation) -> tuple[int, str] | None:
    """The error for the whole request, or None when it may go ahead: without an
    authorizer there are no ACLs (SECURITY_DISABLED), and the principal needs the
    operation on the cluster."""
    if not ctx.services.authorizer.enabled:
        return errors.SECURITY_DISABLED, "No Authorizer is configured on the broker"
    if not ctx.allowed_on_cluster(operation):
        return errors.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
    return None


def store_failure(exc: Exception) -> tuple[int, str]:
    """A full disk or ZooKeeper away: an error code for each binding, nothing changed.
    Anything else is a bug and is raised again."""
    code = getattr(exc, "code", None)
    if code is None and not isinstance(exc, OSError):
        raise exc
    log.warning("cannot store ACLs: %s", exc)
    return code or errors.KAFKA_STORAGE_ERROR, f"ACLs not stored: {exc}"
