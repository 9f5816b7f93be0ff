#!/usr/bin/env bash
# Builds the runtime image offline (FROM scratch, buildah): see scripts/image.ts. Flags are
# passed through: --tag=flow-aggregator:dev, --out=dist, --no-archive, --write-containerfile.
set -euo pipefail
cd "$(dirname "$0")/.."
exec node_modules/.bin/deno run -A scripts/image.ts "$@"
