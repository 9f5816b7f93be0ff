/**
 * The UDP template refresh default, in a module of its own: the configuration (light, loaded
 * by every process) and the exporter (in its worker) both read it.
 *
 * @module
 */

/**
 * Default UDP template refresh interval (`flowCollector.templateRefreshTimeout`): 60 s. Over
 * UDP a collector that starts after us, or restarts, decodes nothing until the templates come
 * again, while every datagram counts `exported`; v1.13's hard-coded 1800 s (newer Antrea: 600
 * s) made that up to 30 minutes of records (a review: nfcapd decoded 0 of 3,343 datagrams).
 * 60 s is the default active flow timeout, so a restarted collector misses about one export
 * cycle of each flow; the cost is two messages of 480 bytes (496 with Pod labels) a minute.
 * RFC 7011 §8.4 leaves the interval to configuration.
 */
export const DEFAULT_TEMPLATE_REFRESH_MS = 60_000;
