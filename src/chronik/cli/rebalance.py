"""`chronik cluster rebalance` and `chronik cluster decommission BROKER`: plan with
chronik.cli.rebalance_plan from what the cluster reports, show the plan, start it as a
partition reassignment (with Kafka's replication throttle when asked), wait until every
partition has moved, then elect the preferred leaders so leadership follows the plan.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence

from chronik.cli.args import non_negative_int, positive_float
from chronik.cli.clients import OPERATION_TIMEOUT
from chronik.cli.errors import CliError
from chronik.cli.partitions import VERIFY_WARNING, apply_throttle, start
from chronik.cli.reassignment_json import format_reassignment, partition_name
from chronik.cli.reassignments import TP, ClusterAdmin, Topology
from chronik.cli.rebalance_plan import Plan, PlanError, plan
from chronik.cli.table import print_table

# How often the wait asks the controller which reassignments are still in progress.
POLL_SECONDS = 1.0


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true",
                        help="print the plan and the data it would move; change nothing")
    parser.add_argument("--throttle", type=non_negative_int, metavar="BYTES_PER_SEC",
                        help="limit the replication traffic of the moving replicas on each "
                        "broker involved while they move (removed when done)")
    parser.add_argument("--disable-rack-aware", action="store_true",
                        help="plan without regard to broker.rack")
    wait = parser.add_mutually_exclusive_group()
    wait.add_argument("--wait", dest="wait", action="store_true", default=True,
                      help="wait until every partition has moved, then elect the preferred "
                      "leaders (the default)")
    wait.add_argument("--no-wait", dest="wait", action="store_false",
                      help="start the moves and return")
    parser.add_argument("--timeout", type=positive_float, metavar="SECONDS",
                        help="give up waiting after this long (the moves go on; default: "
                        "wait as long as they take)")


def rebalance(args: argparse.Namespace) -> int:
    admin = ClusterAdmin(args)
    topology = admin.topology(args.topic or None)
    refuse_if_moving(admin)
    live = set(topology.brokers)
    assignment = movable(topology, "rebalance")
    away = sorted({b for r in assignment.values() for b in r if b not in live})
    if away:
        raise CliError(
            f"broker {away[0]} holds replicas but is not live: start it, or move its "
            f"replicas away with `chronik cluster decommission {away[0]}`"
        )
    sizes, in_bytes = admin.sizes(topology)
    try:
        proposal = plan(assignment, topology.racks(), sizes,
                        rack_aware=not args.disable_rack_aware)
    except PlanError as exc:
        raise CliError(str(exc)) from None
    show(proposal, topology, in_bytes, sizes)
    if proposal.empty:
        print("The replicas and leaders are balanced: nothing to move.")
        if not args.dry_run:
            elect(admin, topology, assignment)
        return 0
    if args.dry_run:
        return 0
    return carry_out(admin, args, proposal, topology)


def decommission(args: argparse.Namespace) -> int:
    broker = args.broker
    admin = ClusterAdmin(args)
    topology = admin.topology()
    held = sorted(tp for tp, r in topology.replicas.items() if broker in r)
    if not held:
        if broker not in topology.brokers:
            raise CliError(f"broker {broker} is not in the cluster and holds no replicas")
        print(f"Broker {broker} holds no replicas: it may be stopped.")
        return 0
    refuse_if_moving(admin)
    movable(topology, "decommission", only=set(held))
    others = {b: r for b, r in topology.racks().items() if b != broker}
    if not others:
        raise CliError(f"broker {broker} is the only live broker: no other can take its replicas")
    sizes, in_bytes = admin.sizes(topology)
    try:
        proposal = plan(topology.replicas, others, sizes, empty={broker}, balance=False,
                        rack_aware=not args.disable_rack_aware)
    except PlanError as exc:
        raise CliError(str(exc)) from None
    show(proposal, topology, in_bytes, sizes, leaving=broker)
    after = [n for b, n in proposal.replicas_after.items() if b != broker]
    if max(after) - min(after) > 1:
        # Only the broker's replicas move; where a partition's other replicas already sit
        # decides where its replica may go.
        print(f"The other brokers end {max(after) - min(after)} replicas apart: run "
              "`chronik cluster rebalance` afterwards to even them out.")
    if args.dry_run:
        return 0
    status = carry_out(admin, args, proposal, topology)
    if status or not args.wait:
        return status
    left = [tp for tp, r in admin.topology().replicas.items() if broker in r]
    if left:
        # The broker is still registered, so a partition created meanwhile may have been
        # given a replica on it.
        raise CliError(f"broker {broker} still holds {len(left)} replicas "
                       f"({', '.join(map(partition_name, left[:5]))}"
                       f"{', ...' if len(left) > 5 else ''}): created meanwhile? run "
                       "the command again")
    print(f"Broker {broker} holds no replicas now: it may be stopped.")
    return 0


def refuse_if_moving(admin: ClusterAdmin) -> None:
    ongoing = admin.ongoing()
    if ongoing:
        raise CliError(
            f"{len(ongoing)} partition reassignment{'s are' if len(ongoing) > 1 else ' is'} "
            "in progress: wait for it to finish (`chronik partitions reassign --list`) or "
            "cancel it first"
        )


def movable(topology: Topology, what: str, only: set[TP] | None = None) -> dict[TP, list[int]]:
    """The partitions to plan, once none of those that must move lacks a leader (its
    data could not be copied)."""
    partitions = {tp: r for tp, r in topology.replicas.items() if only is None or tp in only}
    leaderless = sorted(tp for tp in partitions if topology.leaders.get(tp, -1) < 0)
    if leaderless:
        names = ", ".join(map(partition_name, leaderless[:5]))
        more = ", ..." if len(leaderless) > 5 else ""
        verb = "s have" if len(leaderless) > 1 else " has"
        raise CliError(
            f"cannot {what}: {len(leaderless)} partition{verb} no leader to copy from "
            f"({names}{more}); bring their brokers back first"
        )
    return partitions


def amount(value: int, in_bytes: bool) -> str:
    if not in_bytes:
        return f"{value} record{'' if value == 1 else 's'}"
    if value < 1024:
        return f"{value} byte{'' if value == 1 else 's'}"
    size = float(value)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            break
    return f"{size:.1f} {unit} ({value} bytes)"


def show(
    proposal: Plan, topology: Topology, in_bytes: bool, sizes: Mapping[TP, int],
    leaving: int | None = None,
) -> None:
    if not in_bytes:
        print("Sizes are estimated from each partition's offsets, in records rather than "
              "bytes: the cluster does not serve DescribeLogDirs.")
    rows = [
        (
            b,
            (topology.brokers[b].rack or "-") if b in topology.brokers else "-",
            proposal.replicas_before.get(b, 0),
            proposal.replicas_after.get(b, 0),
            proposal.leaders_before.get(b, 0),
            proposal.leaders_after.get(b, 0),
        )
        for b in sorted(set(proposal.replicas_before) | set(proposal.replicas_after))
    ]
    print_table(["BROKER", "RACK", "REPLICAS", "AFTER", "LEADERS", "AFTER"], rows)
    if proposal.empty:
        return
    print()
    print_table(
        ["TOPIC", "PARTITION", "REPLICAS", "NEW-REPLICAS", "SIZE"],
        [
            (t, p, ",".join(map(str, proposal.current[(t, p)])), ",".join(map(str, r)),
             amount(sizes.get((t, p), 0), in_bytes))
            for (t, p), r in sorted(proposal.proposed.items())
        ],
    )
    moved_partitions = len({m.partition for m in proposal.moves})
    reordered = len(proposal.proposed) - moved_partitions
    print()
    if leaving is None:
        least = (f"at least {amount(proposal.minimum_moved, in_bytes)} must move to balance "
                 "the replica counts")
    else:
        least = f"every replica of broker {leaving}"
    line = (
        f"Moves {len(proposal.moves)} replica{'' if len(proposal.moves) == 1 else 's'} of "
        f"{moved_partitions} partition{'' if moved_partitions == 1 else 's'}: "
        f"{amount(proposal.moved, in_bytes)} ({least})"
    )
    if reordered == 1:
        line += "; 1 more partition only changes its preferred leader"
    elif reordered:
        line += f"; {reordered} more partitions only change their preferred leader"
    print(line + ".")
    print("Proposed partition reassignment configuration")
    print(format_reassignment(proposal.proposed))


def carry_out(
    admin: ClusterAdmin, args: argparse.Namespace, proposal: Plan, topology: Topology
) -> int:
    current = {tp: proposal.current[tp] for tp in proposal.proposed}
    print()
    print("Current partition replica assignment")
    print()
    print(format_reassignment(current))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")
    if args.throttle is not None:
        apply_throttle(admin, proposal.proposed, current, {}, args.throttle)
        print(f"The inter-broker throttle limit was set to {args.throttle} B/s")
    start(admin, proposal.proposed)
    if not args.wait:
        if args.throttle is not None:
            print(VERIFY_WARNING.replace("--verify", "`chronik partitions reassign --verify` "
                                         "(with the plan above)"))
        return 0
    if not wait_for(admin, proposal.proposed, args.timeout):
        return 1
    if args.throttle is not None:
        brokers = {b for tp in proposal.proposed for b in current[tp] + proposal.proposed[tp]}
        admin.clear_throttles(sorted(brokers & set(topology.brokers)),
                              sorted({t for t, _ in proposal.proposed}))
        print("The replication throttles were removed.")
    # The broker answering Metadata learns the completed assignment through its
    # ZooKeeper watch, a moment after the controller wrote it.
    topics = sorted({t for t, _ in proposal.proposed})
    deadline = time.monotonic() + OPERATION_TIMEOUT
    while True:
        after = admin.topology(topics)
        differ = [tp for tp, r in proposal.proposed.items() if after.replicas.get(tp) != r]
        if not differ or time.monotonic() >= deadline:
            break
        time.sleep(POLL_SECONDS)
    if differ:
        raise CliError(
            f"{len(differ)} partition{'s' if len(differ) > 1 else ''} did not end as planned "
            f"({', '.join(map(partition_name, differ[:5]))}); was a reassignment cancelled?"
        )
    return elect(admin, after, proposal.proposed)


def wait_for(admin: ClusterAdmin, targets: Mapping[TP, Sequence[int]],
             timeout: float | None) -> bool:
    """Until none of the partitions is being reassigned; False after `timeout`."""
    try:
        return _wait(admin, targets, timeout)
    except KeyboardInterrupt:
        print("chronik: stopped waiting; the reassignments go on (see `chronik partitions "
              "reassign --list`)", file=sys.stderr)
        raise


def _wait(admin: ClusterAdmin, targets: Mapping[TP, Sequence[int]],
          timeout: float | None) -> bool:
    deadline = None if timeout is None else time.monotonic() + timeout
    total, shown = len(targets), -1
    while True:
        ongoing = admin.ongoing(targets)
        left = len(ongoing)
        if left != shown:
            print(f"{total - left} of {total} partition reassignments done.", flush=True)
            shown = left
        if not left:
            return True
        if deadline is not None and time.monotonic() >= deadline:
            names = ", ".join(
                f"{partition_name(tp)} adding {','.join(map(str, o.adding)) or '-'}"
                for tp, o in sorted(ongoing.items())[:5]
            )
            print(f"chronik: error: {left} partition reassignment{'s' if left > 1 else ''} "
                  f"still in progress after {timeout:g}s ({names}{', ...' if left > 5 else ''});"
                  " they go on (see `chronik partitions reassign --list`)", file=sys.stderr)
            return False
        time.sleep(POLL_SECONDS)


def elect(admin: ClusterAdmin, topology: Topology, partitions: Mapping[TP, Sequence[int]]) -> int:
    """Preferred leader election where a partition's leader is not its first replica."""
    wanted = [tp for tp in partitions
              if topology.replicas.get(tp) and topology.leaders.get(tp) != topology.replicas[tp][0]]
    if not wanted:
        return 0
    elected, failed = admin.elect_preferred(wanted)
    if elected:
        print(f"Elected the preferred leader of {len(elected)} "
              f"partition{'' if len(elected) == 1 else 's'}.")
    for tp, reason in sorted(failed.items()):
        print(f"chronik: error: preferred leader election failed for {partition_name(tp)}: "
              f"{reason}", file=sys.stderr)
    return 1 if failed else 0
