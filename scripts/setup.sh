#!/usr/bin/env bash
# Installs what the tests and benchmarks need on a Debian machine: the Debian peers (softflowd,
# nfdump, tshark, gcc, kubectl from kubernetes-client, clickhouse-server and clickhouse-client:
# scripts/clickhouse.ts starts its own server), Deno 2.9.6 from the npm registry and the project's npm packages.
# Idempotent; run as root (CI) or skip the apt part with SKIP_APT=1.
set -euo pipefail
cd "$(dirname "$0")/.."

# package:program. A package counts as there when its program is (dpkg's state alone misleads
# both ways: a package removed with its configuration kept still answers `dpkg -s`, and kubectl
# may come from another package, which kubernetes-client's install would then collide with);
# one without a program (ca-certificates) when dpkg says it is installed.
PKGS="softflowd:softflowd nfdump:nfcapd tshark:tshark gcc:gcc iproute2:ip buildah:buildah"
PKGS="$PKGS ca-certificates: procps:ps chromium:chromium kubernetes-client:kubectl"
# The ClickHouse sink's tests and bench start their own server (scripts/clickhouse.ts).
PKGS="$PKGS clickhouse-server:clickhouse-server clickhouse-client:clickhouse-client"
missing=""
for entry in $PKGS; do
  p="${entry%%:*}" prog="${entry#*:}"
  if [ -n "$prog" ]; then
    PATH="$PATH:/usr/sbin:/sbin" command -v "$prog" >/dev/null 2>&1 || missing="$missing $p"
  else
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
  fi
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
