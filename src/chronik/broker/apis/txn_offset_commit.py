"""TxnOffsetCommit (API key 28), versions 0-3.

Needs WRITE on the transactional id (else every partition is
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), READ on the group (else GROUP_AUTHORIZATION_FAILED)
and READ on each topic (a refused topic's partitions are TOPIC_AUTHORIZATION_FAILED, the
others are committed), as Kafka's KafkaApis.handleTxnOffsetCommitRequest.
A transactional producer's consumed offsets (sendOffsetsToTransaction) are appended to
the group's __consumer_offsets partition as part of its transaction; the group sees
them only once the transaction commits (GroupCoordinator.complete_transaction).
"""

from __future__ import annotations

from typing import Any

from chronik.broker.apis.offset_commit import commit_readable, every_partition, topic_responses
from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.security.acl_model import Operation, ResourceType

API_KEY = 28
VERSIONS = (0, 3)


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        codes = every_partition(request.topics, errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    elif not ctx.allowed(Operation.READ, ResourceType.GROUP, request.group_id):
        codes = every_partition(request.topics, errors.GROUP_AUTHORIZATION_FAILED)
    else:
        coordinator = ctx.services.coordinator
        codes = await commit_readable(
            ctx,
            request.topics,
            lambda commits: coordinator.txn_commit_offsets(
                request.group_id,
                request.producer_id,
                request.producer_epoch,
                getattr(request, "generation_id", -1),
                getattr(request, "member_id", ""),
                getattr(request, "group_instance_id", None),
                commits,
            ),
        )
    topics = topic_responses(
        ctx,
        request.topics,
        codes,
        "TxnOffsetCommitResponseTopic",
        "TxnOffsetCommitResponsePartition",
    )
    return ctx.build("TxnOffsetCommitResponse", throttle_time=0, topics=topics)
