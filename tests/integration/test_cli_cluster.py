"""`chronik cluster describe` and the leaders in `chronik topics describe`, on one node.

The three-broker variants (with a ZooKeeper) live in test_cli_cluster_mode.py.
"""

from __future__ import annotations

from .cli_support import chronik, free_port, ok, unique


def parse_describe(
    lines: list[str],
) -> tuple[dict[str, str], list[dict[str, str]], list[list[str]]]:
    """(header fields, broker rows, offline rows) of `chronik cluster describe`."""
    header = dict(field.split(": ", 1) for field in lines[0].split("\t"))
    blocks: list[list[list[str]]] = [[]]
    for line in lines[1:]:
        if line.strip():
            blocks[-1].append(line.split())
        else:
            blocks.append([])
    columns, *rows = blocks[0]
    brokers = [dict(zip(columns, row, strict=True)) for row in rows]
    offline = blocks[1][1:] if len(blocks) > 1 else []
    return header, brokers, offline


def test_cluster_describe_single_node_is_its_own_controller(broker) -> None:
    b = broker.bootstrap
    topic = unique("spread")
    ok("topics", "create", topic, "--partitions", "5", bootstrap=b)

    header, brokers, offline = parse_describe(ok("cluster", "describe", bootstrap=b).lines)
    node_id = str(broker.broker.node_id)
    assert header["ClusterId"] == broker.broker.cluster_id
    assert header["Controller"] == node_id
    assert header["Brokers"] == "1" and header["OfflinePartitions"] == "0"
    assert brokers == [
        {
            "BROKER": node_id,
            "HOST": "127.0.0.1",
            "PORT": str(broker.port),
            "RACK": "-",
            "CONTROLLER": "yes",
            "LEADER-PARTITIONS": header["Partitions"],
        }
    ]
    assert int(header["Partitions"]) >= 5
    assert offline == []

    described = ok("topics", "describe", topic, bootstrap=b).lines[1:]
    assert [line.split("\t")[3:6] for line in described] == [
        [f"Leader: {node_id}", f"Replicas: {node_id}", f"Isr: {node_id}"]
    ] * 5
    # Every partition has its leader: nothing is unavailable.
    assert ok("topics", "describe", "--unavailable-partitions", bootstrap=b).lines == []


def test_cluster_describe_without_a_broker_is_one_line() -> None:
    port = free_port()
    result = chronik("cluster", "describe", "--connect-timeout", "1", bootstrap=f"127.0.0.1:{port}")
    assert result.returncode == 1
    assert result.error_lines == [
        f"chronik: error: cannot reach a broker at 127.0.0.1:{port} (no answer within 1s)"
    ]
    assert result.stdout == ""


def test_elect_leaders_on_one_node_needs_no_election(broker) -> None:
    b = broker.bootstrap
    topic = unique("elect")
    ok("topics", "create", topic, "--partitions", "2", bootstrap=b)
    assert ok("cluster", "elect-leaders", bootstrap=b).lines == [
        "No partition needed a leader election (PREFERRED)."
    ]
    assert ok(
        "cluster", "elect-leaders", "--topic", topic, "--type", "unclean", bootstrap=b
    ).lines == [f"Valid replica already elected for partitions {topic}-0, {topic}-1"]
    # Every partition is led by its only replica: none is under-replicated.
    assert ok("topics", "describe", "--under-replicated-partitions", bootstrap=b).lines == []


def test_elect_leaders_errors_are_one_line_each(broker) -> None:
    b = broker.bootstrap
    topic = unique("elect")
    ok("topics", "create", topic, "--partitions", "1", bootstrap=b)
    missing = chronik("cluster", "elect-leaders", "--topic", topic, "--partition", "5", bootstrap=b)
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.error_lines == [
        f"chronik: error: leader election (PREFERRED) failed for {topic}-5: "
        "The partition does not exist. (UNKNOWN_TOPIC_OR_PART)"
    ]
    absent = chronik("cluster", "elect-leaders", "--topic", unique("absent"), bootstrap=b)
    assert absent.returncode == 1 and len(absent.error_lines) == 1
    assert "does not exist" in absent.stderr
    usage = chronik("cluster", "elect-leaders", "--partition", "0", bootstrap=b)
    assert (usage.returncode, usage.error_lines) == (
        2,
        ["chronik: error: --partition needs --topic"],
    )
