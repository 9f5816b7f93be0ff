#!/usr/bin/env bash
# Installs what the tests and benchmarks need on a Debian machine: the Debian peers (softflowd,
# nfdump, tshark, gcc, kubectl from kubernetes-client, clickhouse-server and clickhouse-client:
# scripts/clickhouse.ts starts its own server), Deno 2.9.6 from the npm registry and the project's npm packages.
# Idempotent; run as root (CI) or skip the apt part with SKIP_APT=1.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS="softflowd nfdump tshark gcc iproute2 buildah ca-certificates procps chromium kubernetes-client"
missing=""
# The ClickHouse sink's tests and bench start their own server (scripts/clickhouse.ts).
PKGS="$PKGS clickhouse-server clickhouse-client"
for p in $PKGS; do
  # Installed means "install ok installed": a package removed with its configuration kept
  # ("deinstall ok config-files") answers dpkg -s too, without its programs.
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing="$missing $p"
done
if [ -n "$missing" ] && [ "${SKIP_APT:-0}" != 1 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq $missing >/dev/null
fi

if [ ! -x node_modules/.bin/deno ]; then
  npm ci --no-audit --no-fund
fi
node_modules/.bin/deno install
