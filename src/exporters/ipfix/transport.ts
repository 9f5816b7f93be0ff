/**
 * Transports of the IPFIX exporter: the client transports in `src/net/transport.ts`, which the
 * traffic generator shares (flowgen may not import an exporter, so the code lives there).
 */

export {
  openTransport,
  type Transport,
  type TransportKind,
  type TransportTarget,
  type TransportTlsOptions,
} from "../../net/transport.ts";
