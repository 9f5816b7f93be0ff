/**
 * The IPFIX collecting process: UDP, TCP and mutual-TLS listeners, stream framing, per-session
 * templates, counters. See {@linkcode Collector}.
 *
 * @module
 */

export { Collector, type CollectorOptions, DEFAULT_TEMPLATE_TTL_MS } from "./collector.ts";
export { type RecordContext, type RecordSink } from "./session.ts";
export {
  type CollectorStats,
  type ExporterStats,
  MAX_TRACKED_EXPORTERS,
  OTHER_EXPORTERS,
  type Transport,
  withEarlierCollectors,
} from "./stats.ts";
export type { TlsMaterial } from "./tls.ts";
export {
  type DatagramHandler,
  DenoUdpReceiver,
  type DenoUdpReceiverOptions,
  type FastUdpOptions,
  fastUdpReceiverFactory,
  openDenoUdpReceiver,
  type UdpPeer,
  udpPeer,
  type UdpReceiver,
  type UdpReceiverCounters,
  type UdpReceiverFactory,
  type UdpTableDrops,
  udpTableDrops,
} from "./udp.ts";
export { ffiAvailable, libcPath } from "./udp_fast_ffi.ts";
export { UDP_FAST_WORKER_MODULE } from "./udp_fast.ts";
export { DEFAULT_LISTEN_ADDRESS, exporterAddress, parseListenAddress } from "./address.ts";
export { BUSY_BUFFER_BYTES, type FrameResult, IDLE_BUFFER_BYTES, StreamFramer } from "./framing.ts";
export { DEFAULT_DRAIN, type DrainOptions } from "./drain.ts";
export { type ConnectionLimits, type RefusalReason, type TimeoutReason } from "./connections.ts";
