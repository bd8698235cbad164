"""kafka-reassign-partitions' JSON files and Kafka's replica assignment, as chronik reads
and writes them (chronik.cli.reassignment_json, chronik.cluster.kafka_assignment), and the
`chronik partitions reassign` mistakes caught before any broker is asked."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chronik.cli.main import main
from chronik.cli.reassignment_json import (
    BadReassignmentJson,
    format_reassignment,
    parse_broker_list,
    parse_reassignment,
    parse_topics_to_move,
    throttled_replicas,
)
from chronik.cluster.kafka_assignment import AssignmentError, assign_replicas, rack_alternated

# What Kafka 3.x's kafka-reassign-partitions --generate prints as its proposal.
KAFKA_PROPOSAL = (
    '{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[2,3],'
    '"log_dirs":["any","any"]},{"topic":"foo","partition":1,"replicas":[3,1],'
    '"log_dirs":["any","any"]}]}'
)


def test_kafkas_own_proposal_is_read_and_written_back_byte_for_byte() -> None:
    plan = parse_reassignment(KAFKA_PROPOSAL)
    assert plan == {("foo", 0): [2, 3], ("foo", 1): [3, 1]}
    assert format_reassignment(plan) == KAFKA_PROPOSAL


def test_pretty_printed_without_log_dirs_or_version() -> None:
    text = """{
      "partitions": [
        {"topic": "bar", "partition": 2, "replicas": [1]},
        {"topic": "bar", "partition": 0, "replicas": [3, 2, 1], "log_dirs": ["any","any","any"]}
      ]
    }"""
    assert parse_reassignment(text) == {("bar", 2): [1], ("bar", 0): [3, 2, 1]}


def test_format_sorts_by_topic_then_partition_number() -> None:
    text = format_reassignment({("b", 10): [1], ("b", 9): [2], ("a", 0): [3]})
    order = [(p["topic"], p["partition"]) for p in json.loads(text)["partitions"]]
    assert order == [("a", 0), ("b", 9), ("b", 10)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "is not valid JSON"),
        ("[]", "must be a JSON object"),
        ('{"version":2,"partitions":[]}', "Not supported version field value 2"),
        ('{"version":1}', "Partition reassignment list cannot be empty"),
        ('{"partitions":[{"topic":"t","partition":0,"replicas":[]}]}',
         "Partition replica list cannot be empty"),
        ('{"partitions":[{"topic":"t","partition":0,"replicas":[1,2,1]}]}',
         "Partition replica lists may not contain duplicate entries: "
         "t-0 contains multiple entries for 1"),
        ('{"partitions":[{"topic":"t","partition":0,"replicas":[1]},'
         '{"topic":"t","partition":0,"replicas":[2]}]}',
         "Partition reassignment contains duplicate topic partitions: t-0"),
        ('{"partitions":[{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":["any"]}]}',
         "Size of replicas list [1, 2] is different from size of log dirs list [any] "
         "for partition t-0"),
        ('{"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["/d1"]}]}',
         "may only say \"any\""),
        ('{"partitions":[{"topic":"t","partition":"0","replicas":[1]}]}',
         "\"partition\" must be a non-negative integer"),
        ('{"partitions":[{"topic":"t","partition":0,"replicas":[true]}]}',
         "\"replicas\" must be a list of broker ids"),
        ('{"partitions":[{"partition":0,"replicas":[1]}]}', "no \"topic\" string"),
    ],
)
def test_bad_reassignment_files_are_one_clear_sentence(text: str, message: str) -> None:
    with pytest.raises(BadReassignmentJson) as caught:
        parse_reassignment(text)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_topics_to_move() -> None:
    assert parse_topics_to_move('{"version":1,"topics":[{"topic":"foo"},{"topic":"bar"}]}') == [
        "foo", "bar"
    ]
    with pytest.raises(BadReassignmentJson, match="duplicate entries: foo"):
        parse_topics_to_move('{"topics":[{"topic":"foo"},{"topic":"foo"}]}')
    with pytest.raises(BadReassignmentJson, match="names no topic"):
        parse_topics_to_move('{"version":1,"topics":[]}')
    with pytest.raises(BadReassignmentJson, match="needs a \"topic\" string"):
        parse_topics_to_move('{"topics":["foo"]}')


def test_broker_list() -> None:
    assert parse_broker_list("1,2, 3") == [1, 2, 3]
    with pytest.raises(BadReassignmentJson, match="Broker list contains duplicate entries: 2"):
        parse_broker_list("1,2,2")
    with pytest.raises(BadReassignmentJson, match="'x' is not a broker id"):
        parse_broker_list("1,x")


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.tuples(st.text("abcxyz._-", min_size=1, max_size=5), st.integers(0, 1000)),
        st.lists(st.integers(0, 100), min_size=1, max_size=5, unique=True),
        min_size=1,
        max_size=20,
    )
)
def test_any_plan_survives_a_round_trip(plan: dict[tuple[str, int], list[int]]) -> None:
    assert parse_reassignment(format_reassignment(plan)) == plan


def test_throttled_replicas_as_kafka_computes_them() -> None:
    # foo-0 moves from 1,2 to 2,3; foo-1 from 3,1 to 4,1; bar-0 only changes order.
    leaders, followers, brokers = throttled_replicas({
        ("foo", 0): ({1, 2}, [2, 3]),
        ("foo", 1): ({3, 1}, [4, 1]),
        ("bar", 0): ({1, 2}, [2, 1]),
    })
    assert leaders == {"foo": "0:1,0:2,1:1,1:3", "bar": "0:1,0:2"}
    assert followers == {"foo": "0:3,1:4", "bar": ""}
    assert brokers == {1, 2, 3, 4}


# --- Kafka's AdminUtils ----------------------------------------------------------------


def test_rack_alternated_list_of_kafkas_javadoc() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated(racks) == [0, 3, 1, 5, 4, 2]


def test_rack_aware_assignment_of_kafkas_javadoc() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assigned = assign_replicas(racks, 7, 3, start_index=0)
    assert assigned == {
        0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2], 4: [4, 2, 0], 5: [2, 0, 3],
        6: [0, 4, 2],
    }


def test_rack_unaware_assignment_of_kafkas_javadoc() -> None:
    assigned = assign_replicas(dict.fromkeys(range(5)), 10, 3, start_index=0)
    assert assigned[0] == [0, 1, 2]
    assert assigned[4] == [4, 0, 1]
    assert assigned[5] == [0, 2, 3]
    assert assigned[9] == [4, 1, 2]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), st.integers(1, 40), st.integers(1, 3), st.integers(1, 3))
def test_assignments_spread_racks_and_leaders(
    brokers: int, partitions: int, factor: int, racks: int
) -> None:
    if factor > brokers:
        with pytest.raises(AssignmentError, match="larger than available brokers"):
            assign_replicas(dict.fromkeys(range(brokers)), partitions, factor)
        return
    rack_of = {b: f"r{b % racks}" for b in range(brokers)}
    assigned = assign_replicas(rack_of, partitions, factor)
    rack_count = len(set(rack_of.values()))
    assert sorted(assigned) == list(range(partitions))
    for replicas in assigned.values():
        assert len(replicas) == len(set(replicas)) == factor
        assert len({rack_of[b] for b in replicas}) == min(factor, rack_count)
    leaders = Counter(r[0] for r in assigned.values())
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in range(brokers)) <= 1


def test_some_racks_missing_is_refused() -> None:
    with pytest.raises(AssignmentError, match="Not all brokers have rack information"):
        assign_replicas({1: "a", 2: None}, 1, 1)


# --- the command line, before any broker is asked ---------------------------------------


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], list[str]]:
    code = main(["partitions", "reassign", *args, "--bootstrap-server", "127.0.0.1:1"])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def test_bad_files_exit_2_with_one_line(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"partitions":[{"topic":"t","partition":0,"replicas":[1,1]}]}')
    for action in ("--execute", "--verify", "--cancel"):
        code, out, err = run(capsys, action, "--reassignment-json-file", str(bad))
        assert (code, out) == (2, [])
        assert err == ["chronik: error: Partition replica lists may not contain duplicate "
                       "entries: t-0 contains multiple entries for 1"]
    code, out, err = run(capsys, "--execute", "--reassignment-json-file", str(tmp_path / "no"))
    assert code == 2
    assert err == [f"chronik: error: cannot read --reassignment-json-file {tmp_path / 'no'}: "
                   "No such file or directory"]
    (tmp_path / "topics.json").write_text("{nope")
    code, out, err = run(capsys, "--generate", "--topics-to-move-json-file",
                         str(tmp_path / "topics.json"), "--broker-list", "1,2")
    assert code == 2 and len(err) == 1
    assert "the topics-to-move JSON is not valid JSON" in err[0]


def test_options_that_do_not_go_with_the_action_exit_2(tmp_path: Path, capsys) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(KAFKA_PROPOSAL)
    code, _, err = run(capsys, "--verify", "--reassignment-json-file", str(plan),
                       "--throttle", "100")
    assert (code, err) == (2, ['chronik: error: Option "--throttle" can\'t be used with '
                               'action "--verify"'])
    code, _, err = run(capsys, "--execute")
    assert (code, err) == (2, ["chronik: error: --execute needs --reassignment-json-file"])
    code, _, err = run(capsys, "--generate", "--broker-list", "1")
    assert (code, err) == (2, ["chronik: error: --generate needs --topics-to-move-json-file"])
    with pytest.raises(SystemExit) as exited:
        main(["partitions", "reassign", "--verify", "--cancel"])
    assert exited.value.code == 2
