"""The named fault scenarios (chaos.schedule.SCENARIOS), each a bounded run of the chaos
campaign (chaos.campaign): a fresh cluster of three brokers and two client nodes, every
workload running, the scenario's faults, healing, the final read and the checker, which
must find no anomaly: nothing acknowledged lost or doubled, no committed offset going
back, no aborted record read committed, no expected-version append won twice, replicas
the same byte for byte, no reassignment left unfinished and no copy left on a broker a
reassignment took the partition from. Each takes 40-60 s here.

The seed is CHAOS_SEED when set, else random, and printed with the figures; a failed
run is saved ($CHAOS_SAVE_DIR, default /tmp/chronik-chaos-runs) and the failure names
it with the commands that check it again and replay its faults. Needs root (network
namespaces) and ZooKeeper; skipped otherwise.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from .campaign import failure_lines, figures, run_one
from .conftest import skip_reason
from .schedule import scenario

pytestmark = pytest.mark.timeout(300)


def _run(name: str, tmp_path: Path) -> None:
    why = skip_reason()
    if why is not None:
        pytest.skip(f"chaos scenarios: {why}")
    seed = int(os.environ.get("CHAOS_SEED") or random.randrange(1 << 31))
    outcome = run_one(scenario(name), seed, tmp_path, say=print)
    print("\n".join(figures(outcome)))
    if not outcome.ok:
        rerun = f"PYTHONPATH=tests .venv/bin/python -m chaos.campaign --scenario {name} " \
                f"--seed {seed}"
        pytest.fail("\n".join([f"scenario {name}, seed {seed}",
                               *failure_lines(outcome, rerun)]), pytrace=False)
    assert outcome.faults and not outcome.misses, f"scenario {name}: {outcome.misses}"
    report = outcome.report
    assert report is not None
    assert report.figures["acknowledged"] > 0


def test_leader_cut_off_from_zookeeper_but_reachable_by_clients(tmp_path: Path) -> None:
    """A partition's leader loses ZooKeeper while clients and the other brokers still
    reach it: the controller elects another leader, and the old one must not go on
    acknowledging writes the new one does not have."""
    _run("leader-zk", tmp_path)


def test_controller_isolated(tmp_path: Path) -> None:
    """The controller is cut off from every node: another broker becomes controller and
    moves the isolated broker's leaderships while the old one still believes it
    controls; after healing one controller and one leader per partition remain, and
    nothing acknowledged is lost."""
    _run("controller", tmp_path)


def test_follower_that_reaches_zookeeper_but_not_its_leader(tmp_path: Path) -> None:
    """A follower in the ISR cannot fetch from its leader but keeps its ZooKeeper
    session: the leader shrinks the ISR and goes on with the other follower; healed,
    the follower catches up and rejoins."""
    _run("follower-leader", tmp_path)


def test_majority_minority_split_with_producers_on_both_sides(tmp_path: Path) -> None:
    """A leader and one client node are split from the other brokers, ZooKeeper and the
    other client node: writes on the minority side must not be acknowledged as the
    majority elects a new leader and takes writes."""
    _run("split", tmp_path)


def test_two_failovers_in_quick_succession(tmp_path: Path) -> None:
    """The leader is killed, and its successor killed as soon as it is elected: the third
    replica leads with what the ISR held, and both come back as followers."""
    _run("double-failover", tmp_path)


def test_partition_during_a_transaction_commit(tmp_path: Path) -> None:
    """The transaction coordinator is isolated just as a commit is asked for, then, at a
    later commit, cut from the other brokers only: every transaction ends committed or
    aborted on every partition it wrote, and read_committed readers see exactly the
    committed ones."""
    _run("txn-commit", tmp_path)


def test_partition_moved_off_its_leader_and_back_through_a_failover_and_a_cut(
        tmp_path: Path) -> None:
    """A reassignment removes the leader's replica of a partition (the leadership moves)
    and adds it back at a throttled rate; midway the new leader is killed, and the broker
    copying the log is cut off from the next one. Healed, the copy completes: nothing
    acknowledged lost or doubled, the three replicas byte for byte the same, and no
    broker left holding a copy it is no longer assigned."""
    _run("reassign", tmp_path)
