"""`chronik partitions reassign`: kafka-reassign-partitions, with its workflow, options,
JSON files and output.

    chronik partitions reassign --generate --topics-to-move-json-file topics.json \\
        --broker-list 1,2,3 [--disable-rack-aware]
    chronik partitions reassign --execute --reassignment-json-file plan.json \\
        [--throttle BYTES_PER_SEC] [--additional]
    chronik partitions reassign --verify --reassignment-json-file plan.json [--preserve-throttles]
    chronik partitions reassign --cancel --reassignment-json-file plan.json [--preserve-throttles]
    chronik partitions reassign --list

A file that is not in Kafka's format, or asks for a partition or a broker twice, ends
the command with exit status 2; what the cluster refuses (a topic, partition or broker
it does not have, a reassignment it rejects) with 1.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path

from chronik.cli.args import add_bootstrap, non_negative_int
from chronik.cli.errors import CliError
from chronik.cli.reassignment_json import (
    BadReassignmentJson,
    format_reassignment,
    parse_broker_list,
    parse_reassignment,
    parse_topics_to_move,
    partition_name,
    throttled_replicas,
)
from chronik.cli.reassignments import TP, ClusterAdmin, Ongoing, describe_failures
from chronik.cluster.kafka_assignment import AssignmentError, assign_replicas

ACTIONS = ("generate", "execute", "verify", "cancel", "list")
# What each action takes besides the connection options (Kafka's permittedArgs).
PERMITTED = {
    "generate": {"topics_to_move_json_file", "broker_list", "disable_rack_aware"},
    "execute": {"reassignment_json_file", "throttle", "additional"},
    "verify": {"reassignment_json_file", "preserve_throttles"},
    "cancel": {"reassignment_json_file", "preserve_throttles"},
    "list": set(),
}
REQUIRED = {
    "generate": ("topics_to_move_json_file", "broker_list"),
    "execute": ("reassignment_json_file",),
    "verify": ("reassignment_json_file",),
    "cancel": ("reassignment_json_file",),
    "list": (),
}
DEFAULTS = {"throttle": -1, "additional": False, "preserve_throttles": False,
            "disable_rack_aware": False}
EXISTING = (
    "Cannot execute because there is an existing partition assignment.  Use --additional "
    "to override this and create a new partition assignment in addition to the existing "
    "one. The --additional flag can also be used to change the throttle by resubmitting "
    "the current reassignment."
)
VERIFY_WARNING = (
    "Warning: You must run --verify periodically, until the reassignment completes, to "
    "ensure the throttle is removed."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action_group", metavar="ACTION", parser_class=type(parser))
    sub.required = True
    reassign = sub.add_parser(
        "reassign", help="move partition replicas between brokers (kafka-reassign-partitions)"
    )
    actions = reassign.add_mutually_exclusive_group(required=True)
    actions.add_argument("--generate", action="store_true",
                         help="propose an assignment of the topics of --topics-to-move-json-file "
                         "over --broker-list (prints the current and the proposed assignment)")
    actions.add_argument("--execute", action="store_true",
                         help="start the reassignment of --reassignment-json-file")
    actions.add_argument("--verify", action="store_true",
                         help="whether the reassignment of --reassignment-json-file is done; "
                         "removes the throttles once every reassignment is")
    actions.add_argument("--cancel", action="store_true",
                         help="cancel the reassignments of --reassignment-json-file in progress")
    actions.add_argument("--list", action="store_true",
                         help="the reassignments in progress")
    reassign.add_argument("--topics-to-move-json-file", metavar="FILE",
                          help='{"version":1,"topics":[{"topic":"foo"}]}')
    reassign.add_argument("--broker-list", metavar="ID,ID,...",
                          help="the brokers --generate assigns the topics to")
    reassign.add_argument("--disable-rack-aware", action="store_true", default=None,
                          help="--generate without regard to broker.rack")
    reassign.add_argument("--reassignment-json-file", metavar="FILE",
                          help='{"version":1,"partitions":[{"topic":"foo","partition":0,'
                          '"replicas":[1,2,3]}]}, as --generate prints it')
    reassign.add_argument("--throttle", type=non_negative_int, metavar="BYTES_PER_SEC",
                          help="--execute: limit the replication traffic of the moving "
                          "replicas on each broker involved (remove it with --verify)")
    reassign.add_argument("--additional", action="store_true", default=None,
                          help="--execute although other reassignments are in progress")
    reassign.add_argument("--preserve-throttles", action="store_true", default=None,
                          help="--verify/--cancel: leave the throttles in place")
    add_bootstrap(reassign)


def run(args: argparse.Namespace) -> int:
    action = next(a for a in ACTIONS if getattr(args, a))
    for name in {n for names in PERMITTED.values() for n in names} - PERMITTED[action]:
        if getattr(args, name) is not None:
            option = "--" + name.replace("_", "-")
            raise CliError(f'Option "{option}" can\'t be used with action "--{action}"',
                           exit_code=2)
    for name in REQUIRED[action]:
        if getattr(args, name) is None:
            option = "--" + name.replace("_", "-")
            raise CliError(f"--{action} needs {option}", exit_code=2)
    for name, default in DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    try:
        if action == "generate":
            return generate(args)
        if action == "list":
            return list_reassignments(ClusterAdmin(args))
        plan = parse_reassignment(read(args.reassignment_json_file, "--reassignment-json-file"))
    except BadReassignmentJson as exc:
        raise CliError(str(exc), exit_code=2) from None
    admin = ClusterAdmin(args)
    if action == "execute":
        return execute(admin, plan, args.throttle, args.additional)
    if action == "verify":
        return verify(admin, plan, args.preserve_throttles)
    return cancel(admin, plan, args.preserve_throttles)


def read(path: str, option: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot read {option} {path}: {exc.strerror}", exit_code=2) from None
    except UnicodeDecodeError:
        raise CliError(f"{option} {path} is not UTF-8 text", exit_code=2) from None


def generate(args: argparse.Namespace) -> int:
    topics = parse_topics_to_move(read(args.topics_to_move_json_file,
                                       "--topics-to-move-json-file"))
    wanted = parse_broker_list(args.broker_list)
    topology = ClusterAdmin(args).topology(topics)
    unknown = [b for b in wanted if b not in topology.brokers]
    if unknown:
        raise CliError(f"Unknown broker id {unknown[0]}")
    racks = {b: topology.brokers[b].rack for b in wanted}
    if args.disable_rack_aware:
        racks = dict.fromkeys(wanted)
    elif any(r is not None for r in racks.values()) and None in racks.values():
        raise CliError(
            "Not all brokers have rack information. Add --disable-rack-aware in command line "
            "to make replica assignment without rack information."
        )
    proposed: dict[TP, list[int]] = {}
    for topic in topics:
        partitions = sorted(p for t, p in topology.replicas if t == topic)
        if not partitions:
            continue
        factor = len(topology.replicas[(topic, partitions[0])])
        try:
            assigned = assign_replicas(racks, len(partitions), factor)
        except AssignmentError as exc:
            raise CliError(f"{topic}: {exc}") from None
        proposed.update({(topic, p): replicas for p, replicas in assigned.items()})
    current = {tp: r for tp, r in topology.replicas.items()}
    print("Current partition replica assignment")
    print(format_reassignment(current))
    print()
    print("Proposed partition reassignment configuration")
    print(format_reassignment(proposed))
    return 0


def check_plan(admin: ClusterAdmin, plan: Mapping[TP, Sequence[int]]) -> dict[TP, list[int]]:
    """The current replicas of the plan's partitions, once every broker and partition it
    names is known to the cluster."""
    topology = admin.topology(sorted({t for t, _ in plan}))
    for replicas in plan.values():
        for broker in replicas:
            if broker not in topology.brokers:
                raise CliError(f"Unknown broker id {broker}")
    missing = [tp for tp in plan if tp not in topology.replicas]
    if missing:
        raise CliError("Unable to find partition: " + ", ".join(map(partition_name, missing)))
    return {tp: topology.replicas[tp] for tp in plan}


def execute(
    admin: ClusterAdmin, plan: Mapping[TP, Sequence[int]], throttle: int, additional: bool
) -> int:
    ongoing = admin.ongoing()
    if ongoing and not additional:
        raise CliError(EXISTING)
    current = check_plan(admin, plan)
    print("Current partition replica assignment")
    print()
    print(format_reassignment(current))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")
    if throttle >= 0:
        print(VERIFY_WARNING)
        apply_throttle(admin, plan, current, ongoing, throttle)
        print(f"The inter-broker throttle limit was set to {throttle} B/s")
    start(admin, plan)
    return 0


def apply_throttle(
    admin: ClusterAdmin,
    plan: Mapping[TP, Sequence[int]],
    current: Mapping[TP, Sequence[int]],
    ongoing: Mapping[TP, Ongoing],
    rate: int,
) -> None:
    """Kafka's calculateProposedMoveMap: the reassignments in progress keep their
    sources, each planned partition moves from its current replicas to its new ones."""
    moving: dict[TP, tuple[set[int], set[int]]] = {
        tp: (o.sources, set(o.adding)) for tp, o in ongoing.items()
    }
    for tp, replicas in plan.items():
        sources = moving[tp][0] if tp in moving else set(current[tp])
        moving[tp] = (sources, set(replicas) - sources)
    leaders, followers, brokers = throttled_replicas(moving)
    admin.set_throttles(rate, leaders, followers, brokers)


def start(admin: ClusterAdmin, plan: Mapping[TP, Sequence[int]]) -> None:
    failed = admin.reassign(plan)
    if failed:
        raise CliError(describe_failures(failed, "Error reassigning partition(s)"))
    names = ",".join(partition_name(tp) for tp in sorted(plan))
    print(f"Successfully started partition reassignment{'' if len(plan) == 1 else 's'} "
          f"for {names}")


def status(
    admin: ClusterAdmin, plan: Mapping[TP, Sequence[int]]
) -> tuple[dict[TP, str], dict[TP, Ongoing]]:
    """Kafka's findPartitionReassignmentStates: each planned partition's status line, and
    every reassignment in progress in the cluster."""
    ongoing = admin.ongoing()
    # A topic that does not exist has no replicas, as in Kafka's tool.
    replicas = admin.topology(sorted({t for t, _ in plan}), strict=False).replicas
    lines: dict[TP, str] = {}
    for tp, target in plan.items():
        name = partition_name(tp)
        if tp in ongoing:
            lines[tp] = f"Reassignment of partition {name} is still in progress."
            continue
        now = replicas.get(tp, [])
        if now == list(target):
            lines[tp] = f"Reassignment of partition {name} is completed."
        else:
            lines[tp] = (
                f"There is no active reassignment of partition {name}, but replica set is "
                f"{','.join(map(str, now))} rather than {','.join(map(str, target))}."
            )
    return lines, ongoing


def verify(admin: ClusterAdmin, plan: Mapping[TP, Sequence[int]], preserve: bool) -> int:
    lines, ongoing = status(admin, plan)
    print("Status of partition reassignment:")
    for tp in sorted(lines):
        print(lines[tp])
    # Kafka prints its (here always empty) list of log directory moves next.
    print()
    if not ongoing and not preserve:
        clear_throttles(admin, plan)
    return 0


def clear_throttles(admin: ClusterAdmin, plan: Mapping[TP, Sequence[int]]) -> None:
    """Kafka's clearAllThrottles: every broker's rates (they cannot tell which brokers an
    earlier reassignment involved) and the plan's topics' throttled replicas."""
    # Kafka adds the plan's brokers to the cluster's; one not live could not be altered.
    brokers = sorted(admin.topology(()).brokers)
    topics = sorted({t for t, _ in plan})
    print(f"Clearing broker-level throttles on broker{'' if len(brokers) == 1 else 's'} "
          f"{','.join(map(str, brokers))}")
    print(f"Clearing topic-level throttles on topic{'' if len(topics) == 1 else 's'} "
          f"{','.join(topics)}")
    admin.clear_throttles(brokers, topics)


def cancel(admin: ClusterAdmin, plan: Mapping[TP, Sequence[int]], preserve: bool) -> int:
    active = sorted(admin.ongoing(plan))
    if active:
        failed = admin.reassign(dict.fromkeys(active))
        if failed:
            raise CliError(describe_failures(
                failed, f"Error cancelling partition reassignment{'' if len(failed) == 1 else 's'}"
            ))
        print(f"Successfully cancelled partition reassignment{'' if len(active) == 1 else 's'} "
              f"for: {','.join(map(partition_name, active))}")
    else:
        print("None of the specified partition reassignments are active.")
    print("None of the specified partition moves are active.")
    if not preserve:
        clear_throttles(admin, plan)
    return 0


def list_reassignments(admin: ClusterAdmin) -> int:
    ongoing = admin.ongoing()
    if not ongoing:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for tp in sorted(ongoing):
        o = ongoing[tp]
        line = f"{partition_name(tp)}: replicas: {','.join(map(str, o.replicas))}."
        if o.adding:
            line += f" adding: {','.join(map(str, o.adding))}."
        if o.removing:
            line += f" removing: {','.join(map(str, o.removing))}."
        print(line)
    return 0
