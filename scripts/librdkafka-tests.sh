#!/usr/bin/env bash
# Runs librdkafka's own integration tests against a fresh chronik broker.
#
#   scripts/librdkafka-tests.sh [TESTS_DIR] NNNN [NNNN ...]
#
# TESTS_DIR (or $LIBRDKAFKA_TESTS) is an already-built librdkafka tests directory: the one
# holding test-runner, inside a librdkafka source tree whose src/ and src-cpp/ hold the
# built libraries. The script starts `chronik serve` on a free loopback port with a data
# dir of its own, runs `TESTS=NNNN test-runner -p1 -E` for each number, stops the broker
# and prints one line per test. It exits non-zero if any test failed.
#
# Nothing is written into TESTS_DIR: the runner reads its test.conf through
# RDKAFKA_TEST_CONF and runs in a scratch directory (it drops stats files in its cwd).
# CLUSTER=1 runs three brokers and a ZooKeeper instead (scripts/cluster.py), for the
# tests that create topics with replication factor 3, as librdkafka's own test cluster
# has three brokers.
# SECURITY=SSL, SASL_PLAINTEXT or SASL_SSL runs the single broker with that listener too
# (a certificate made with openssl, a SCRAM user) and points every test client at it
# (SCRAM-SHA-512; MECHANISM= picks PLAIN or SCRAM-SHA-256 instead).
# Environment: PY (python with chronik, default .venv/bin/python), CHRONIK_SERVE_ARGS
# (extra `chronik serve` arguments, e.g. "--set log.segment.bytes=1048576"), KEEP=1 keeps the
# scratch directory; the runner's own variables (TEST_KAFKA_VERSION, TEST_DEBUG, ...)
# pass through.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}

usage() {
  echo "usage: $0 [LIBRDKAFKA_TESTS_DIR] NNNN [NNNN ...]" >&2
  echo "       (or set LIBRDKAFKA_TESTS to the built tests directory)" >&2
  exit 2
}

tests_dir=${LIBRDKAFKA_TESTS:-}
if [ $# -gt 0 ] && [ -d "$1" ]; then
  tests_dir=$1
  shift
fi
[ -n "$tests_dir" ] && [ $# -gt 0 ] || usage
tests_dir=$(cd "$tests_dir" && pwd)
runner=$tests_dir/test-runner
if [ ! -x "$runner" ]; then
  echo "$0: no test-runner in $tests_dir (build librdkafka's tests first)" >&2
  exit 2
fi
for n in "$@"; do
  [[ $n =~ ^[0-9]{4}$ ]] || { echo "$0: not a test number: $n" >&2; usage; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/chronik-rdk.XXXXXX")
broker_pid=""
stop_broker() {
  if [ -n "$broker_pid" ] && kill -0 "$broker_pid" 2>/dev/null; then
    kill -TERM "$broker_pid"
    for _ in $(seq 1 100); do
      kill -0 "$broker_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$broker_pid" 2>/dev/null && kill -KILL "$broker_pid"
    wait "$broker_pid" 2>/dev/null
  fi
  broker_pid=""
}
cleanup() {
  stop_broker
  if [ "${KEEP:-0}" = 1 ] || [ "${failed:-0}" -gt 0 ]; then
    echo "logs kept in $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
listening() {
  "$PY" -c "import socket; socket.create_connection(('127.0.0.1', $1), 0.2)" 2>/dev/null
}
port=$(free_port)
if [ "${CLUSTER:-0}" = 1 ]; then
  # Three brokers and a ZooKeeper (scripts/cluster.py), as librdkafka's own trivup
  # cluster: tests such as 0103 create topics with replication factor 3.
  zk_port=$(free_port)
  base=$(free_port)
  while listening $((base + 1)) || listening $((base + 2)); do base=$(free_port); done
  # shellcheck disable=SC2086
  "$PY" scripts/cluster.py --dir "$work/cluster" --base-port "$base" \
    --zookeeper-port "$zk_port" --set num.partitions=4 \
    $(for a in ${CHRONIK_SERVE_ARGS:-}; do [ "$a" = --set ] || printf -- '--set %s ' "$a"; done) \
    >"$work/broker.log" 2>&1 &
  broker_pid=$!
  bootstrap="127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2))"
  ready=0
  for _ in $(seq 1 600); do
    if ! kill -0 "$broker_pid" 2>/dev/null; then break; fi
    if "$PY" -c "
from confluent_kafka.admin import AdminClient
import sys
md = AdminClient({'bootstrap.servers': '$bootstrap'}).list_topics(timeout=1)
sys.exit(0 if len(md.brokers) == 3 and md.controller_id > 0 else 1)" 2>/dev/null; then
      ready=1
      break
    fi
    sleep 0.2
  done
else
  listen=(--listen "127.0.0.1:$port")
  bootstrap="127.0.0.1:$port"
  security=${SECURITY:-}
  if [ -n "$security" ]; then
    case $security in SSL|SASL_PLAINTEXT|SASL_SSL) ;; *) echo "$0: SECURITY=$security?" >&2; exit 2;; esac
    mkdir -p "$work/pki"
    (cd "$work/pki" &&
      openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=test CA" \
        -keyout ca.key -out ca.pem &&
      openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout broker.key \
        -out broker.csr &&
      printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >san.ext &&
      openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
        -extfile san.ext -out broker.crt &&
      cat broker.key broker.crt >broker.pem) >"$work/pki.log" 2>&1 ||
      { echo "$0: openssl failed; see $work/pki.log" >&2; exit 1; }
    printf 'tester-secret\n' | "$PY" -m chronik users add tester --password-stdin \
      --data-dir "$work/data" >/dev/null || exit 1
    secure_port=$(free_port)
    listen=(--set "listeners=PLAINTEXT://127.0.0.1:$port,$security://127.0.0.1:$secure_port"
            --set sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
            --set "ssl.keystore.location=$work/pki/broker.pem"
            --set "ssl.truststore.location=$work/pki/ca.pem")
    bootstrap="127.0.0.1:$secure_port"
  fi
  # shellcheck disable=SC2086  # CHRONIK_SERVE_ARGS is a list of arguments
  # num.partitions=4 is what librdkafka's own test cluster (trivup) auto-creates topics with.
  "$PY" -m chronik serve --data-dir "$work/data" "${listen[@]}" \
    --set num.partitions=4 ${CHRONIK_SERVE_ARGS:-} >"$work/broker.log" 2>&1 &
  broker_pid=$!
  ready=0
  for _ in $(seq 1 100); do
    if ! kill -0 "$broker_pid" 2>/dev/null; then break; fi
    if listening "$port"; then
      ready=1
      break
    fi
    sleep 0.1
  done
fi
if [ "$ready" != 1 ]; then
  failed=1
  echo "$0: chronik did not start; its log:" >&2
  tail -n 20 "$work/broker.log" >&2
  exit 1
fi
echo "chronik on $bootstrap (data and logs in $work)"

printf 'bootstrap.servers=%s\n' "$bootstrap" >"$work/test.conf"
if [ -n "${SECURITY:-}" ]; then
  printf 'security.protocol=%s\n' "$SECURITY" >>"$work/test.conf"
  case $SECURITY in *SSL) printf 'ssl.ca.location=%s\n' "$work/pki/ca.pem" >>"$work/test.conf";; esac
  case $SECURITY in SASL*)
    printf 'sasl.mechanisms=%s\nsasl.username=tester\nsasl.password=tester-secret\n' \
      "${MECHANISM:-SCRAM-SHA-512}" >>"$work/test.conf";;
  esac
fi
mkdir -p "$work/run"
export RDKAFKA_TEST_CONF=$work/test.conf
# The runner must load the librdkafka it was built with, not a system copy.
export LD_LIBRARY_PATH=$tests_dir/../src:$tests_dir/../src-cpp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

failed=0
summary=()
for n in "$@"; do
  log=$work/$n.log
  start=$(date +%s)
  (cd "$work/run" && TESTS=$n "$runner" -p1 -E) >"$log" 2>&1
  rc=$?
  secs=$(($(date +%s) - start))
  if [ $rc = 0 ]; then
    summary+=("$n PASS (${secs}s)")
  else
    failed=$((failed + 1))
    summary+=("$n FAIL (exit $rc, ${secs}s, log $log)")
    echo "--- $n failed; the end of its log:"
    grep -E "FAIL|Assert|assert" "$log" | tail -n 15
  fi
  echo "${summary[-1]}"
done

stop_broker
echo "=== librdkafka tests against chronik"
printf '%s\n' "${summary[@]}"
[ "$failed" = 0 ]
