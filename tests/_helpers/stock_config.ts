/**
 * The configuration files operators already have, as fixtures (`tests/config/fixtures/`):
 * Antrea v1.13's stock `flow-aggregator.conf` exactly as its Helm chart renders it, and a newer
 * chart's with keys v1.13 never had. Used by the parser tests, the process tests and the
 * manifest test (whose ConfigMap must carry the stock file).
 */

const FIXTURES = new URL("../config/fixtures/", import.meta.url).pathname;

/** Antrea v1.13's stock `flow-aggregator.conf`, as Helm renders it (every sink off). */
export const STOCK_V113_CONF: string = `${FIXTURES}flow-aggregator-v1.13.conf`;
/** A newer chart's `flow-aggregator.conf` (keys v1.13 does not know, every sink off). */
export const NEWER_CHART_CONF: string = `${FIXTURES}flow-aggregator-newer-chart.conf`;
/** The parser's warning for a file with no sink enabled. */
export const NO_SINK_WARNING: RegExp = /^config: No collector \/ sink has been configured/;

/** The arguments of upstream v1.13's Deployment (control-plane.md §6.1), unchanged in ours. */
export const UPSTREAM_DEPLOYMENT_ARGS: readonly string[] = [
  "--config",
  "/etc/flow-aggregator/flow-aggregator.conf",
  "--logtostderr=false",
  "--log_dir=/var/log/antrea/flow-aggregator",
  "--alsologtostderr",
  "--log_file_max_size=100",
  "--log_file_max_num=4",
];
