/**
 * The other end of a ring for the tests of tests/shard/, in a real Worker: `consume` reads
 * frames (blocking waits) until the producer closes the ring and reports their count, bytes and
 * checksum; `produce` writes the frames `frameContent` describes, then closes; `records` decodes
 * input rows frames until the ring is closed and sends the records back.
 */

import type { FlowInput } from "../../src/aggregation/record.ts";
import { InputRowReader } from "../../src/shard/input_rows.ts";
import { RingReader, RingWriter } from "../../src/shard/ring.ts";
import { frameChecksum, frameContent } from "./ring_frames.ts";

/** What the test sends to start the worker. */
export interface PeerStart {
  readonly role: "consume" | "produce" | "records";
  readonly sab: SharedArrayBuffer;
  /** Frames to produce. */
  readonly frames?: number;
  readonly seed?: number;
}

/** What the worker reports when the ring is done. */
export interface PeerResult {
  readonly frames: number;
  readonly bytes: number;
  readonly checksum: number;
  /** Times the worker had to wait (for data or space). */
  readonly waits: number;
}

interface WorkerScope {
  onmessage: ((ev: MessageEvent<PeerStart>) => void) | null;
  postMessage(message: unknown): void;
}

const scope = self as unknown as WorkerScope;

function consume(sab: SharedArrayBuffer): PeerResult {
  const reader = new RingReader(sab);
  let frames = 0;
  let bytes = 0;
  let checksum = 0;
  let waits = 0;
  for (;;) {
    const f = reader.next();
    if (f === undefined) {
      waits++;
      if (reader.waitForData(10_000) === "closed") break;
      continue;
    }
    checksum = (Math.imul(checksum, 31) + frameChecksum(f)) >>> 0;
    frames++;
    bytes += f.length;
    reader.release();
  }
  return { frames, bytes, checksum, waits };
}

function produce(sab: SharedArrayBuffer, n: number, seed: number): PeerResult {
  const writer = new RingWriter(sab);
  let bytes = 0;
  let checksum = 0;
  let waits = 0;
  for (let i = 0; i < n; i++) {
    const content = frameContent(seed, i);
    while (!writer.write(content)) {
      waits++;
      if (writer.waitForSpace(content.length, 10_000) !== "ready") throw new Error("no space");
    }
    checksum = (Math.imul(checksum, 31) + frameChecksum(content)) >>> 0;
    bytes += content.length;
  }
  writer.close();
  return { frames: n, bytes, checksum, waits };
}

function records(sab: SharedArrayBuffer): FlowInput[] {
  const reader = new RingReader(sab);
  const rows = new InputRowReader();
  const out: FlowInput[] = [];
  for (;;) {
    const f = reader.next();
    if (f === undefined) {
      if (reader.waitForData(10_000) === "closed") return out;
      continue;
    }
    rows.read(f, (r) => out.push(r));
    reader.release();
  }
}

scope.onmessage = (ev: MessageEvent<PeerStart>): void => {
  const m = ev.data;
  try {
    if (m.role === "records") {
      scope.postMessage({ records: records(m.sab) });
      return;
    }
    const r = m.role === "consume" ? consume(m.sab) : produce(m.sab, m.frames ?? 0, m.seed ?? 1);
    scope.postMessage(r);
  } catch (e) {
    scope.postMessage({ error: e instanceof Error ? e.message : String(e) });
  }
};
