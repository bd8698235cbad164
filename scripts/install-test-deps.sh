#!/usr/bin/env bash
# What the integration tests need beyond PyPI: Debian's kcat, npm's kafkajs and
# the Java kafka-clients jar. Idempotent; quiet when everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi

if ! command -v kcat >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    $SUDO apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq kcat >/dev/null
  else
    echo "install-test-deps: kcat missing and no apt-get; kcat tests will be skipped" >&2
  fi
fi

if [ -f tests/compat/package.json ] && command -v npm >/dev/null 2>&1; then
  if [ ! -d tests/compat/node_modules/kafkajs ]; then
    (cd tests/compat && npm install --silent --no-audit --no-fund >/dev/null)
  fi
fi
