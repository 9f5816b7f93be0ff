/**
 * Compact storage for live flows. Each flow owns one slot: 30 u64 counters, 46 u32 words (times,
 * ports, enums, key, flags, and the intern ids of its strings) and 2 f64 expiry times, kept in
 * chunked typed arrays; a flow has no JS object of its own, the slot number is its handle.
 * Why: a million flows with 30 bigint properties each would cost several KB per flow on the JS
 * heap, and even a small object with one property per string costs 8 bytes a property plus
 * its header; here a slot costs 240 + 184 + 16 bytes and no GC tracing. Chunks are never moved
 * (no copy on growth); freed slots are zeroed and reused.
 */

/** log2 of the slots per chunk. */
const CHUNK_BITS = 12;
/** Slots per chunk. */
export const CHUNK_SLOTS: number = 1 << CHUNK_BITS;
const CHUNK_MASK = CHUNK_SLOTS - 1;

/** u64 values per slot. */
export const U64_PER_SLOT = 30;
/** u32 values per slot. */
export const U32_PER_SLOT = 46;

/**
 * Fixed u32 positions shared by the core and the flow table. 0-13 are the core's numeric
 * fields; the flow key lives in 5-7 (protocol, ports), 15 (family) and 16-23 (addresses);
 * 24-29 are the flow's bookkeeping and optional strings, 30-45 its string fields (intern ids,
 * see intern.ts; the field table in layout.ts says which IE each one holds).
 */
export const U32 = {
  START: 0,
  END: 1,
  END_S: 2,
  END_D: 3,
  REASON: 4,
  PROTO: 5,
  SPORT: 6,
  DPORT: 7,
  TYPE: 8,
  SVC_PORT: 9,
  ING_TYPE: 10,
  ING_ACT: 11,
  EG_TYPE: 12,
  EG_ACT: 13,
  /** Hash of the key, so the table can relocate entries without recomputing it. */
  HASH: 14,
  /** 4 or 6: which address IEs the key came from. */
  FAMILY: 15,
  /** Source address: 1 word for IPv4, 4 words (big-endian) for IPv6. */
  SRC: 16,
  /** Destination address, same encoding. */
  DST: 20,
  /** `FL_*` bits (layout.ts). */
  FLAGS: 24,
  /** Not-ready expiries so far. */
  RETRIES: 25,
  /** Intern id of destinationClusterIPv4, canonical; NO_TEXT when the Agent did not send it. */
  CLUSTER_V4: 26,
  /** Intern id of destinationClusterIPv6, same rule. */
  CLUSTER_V6: 27,
  /** Intern id of the sourcePodLabels JSON once filled (labels enabled); NO_TEXT before. */
  SRC_LABELS: 28,
  /** Intern id of the destinationPodLabels JSON, same rule. */
  DST_LABELS: 29,
  /** Intern ids of the string fields (layout.ts FIELDS rows of kind `str`). */
  SRC_POD: 30,
  SRC_NS: 31,
  SRC_NODE: 32,
  DST_POD: 33,
  DST_NS: 34,
  DST_NODE: 35,
  SVC_PORT_NAME: 36,
  ING_NAME: 37,
  ING_NS: 38,
  ING_RULE: 39,
  EG_NAME: 40,
  EG_NS: 41,
  EG_RULE: 42,
  TCP_STATE: 43,
  EGRESS_NAME: 44,
  EGRESS_IP: 45,
} as const;
/** f64 values per slot. */
export const F64_PER_SLOT = 2;
/** Bytes of one slot's typed-array words. */
export const SLOT_BYTES: number = U64_PER_SLOT * 8 + U32_PER_SLOT * 4 + F64_PER_SLOT * 8;

/** Chunked slot allocator with typed-array backing. */
export class SlotStore {
  #u64: BigUint64Array[] = [];
  #u32: Uint32Array[] = [];
  #f64: Float64Array[] = [];
  #free: number[] = [];
  #next = 0;
  #used = 0;

  /** Number of allocated slots. */
  get used(): number {
    return this.#used;
  }

  /** One past the highest slot ever handed out (since the last clear): live slots are below. */
  get end(): number {
    return this.#next;
  }

  /** Bytes of typed-array memory reserved (outside the JS heap). */
  get reservedBytes(): number {
    return this.#u64.length * CHUNK_SLOTS * SLOT_BYTES;
  }

  /** Allocates a zeroed slot. */
  alloc(): number {
    this.#used++;
    const f = this.#free.pop();
    if (f !== undefined) return f;
    const s = this.#next++;
    if ((s >>> CHUNK_BITS) >= this.#u64.length) {
      this.#u64.push(new BigUint64Array(CHUNK_SLOTS * U64_PER_SLOT));
      this.#u32.push(new Uint32Array(CHUNK_SLOTS * U32_PER_SLOT));
      this.#f64.push(new Float64Array(CHUNK_SLOTS * F64_PER_SLOT));
    }
    return s;
  }

  /** Zeroes and releases a slot. */
  free(slot: number): void {
    const o = slot & CHUNK_MASK;
    const c = slot >>> CHUNK_BITS;
    this.#u64[c].fill(0n, o * U64_PER_SLOT, (o + 1) * U64_PER_SLOT);
    this.#u32[c].fill(0, o * U32_PER_SLOT, (o + 1) * U32_PER_SLOT);
    this.#f64[c].fill(0, o * F64_PER_SLOT, (o + 1) * F64_PER_SLOT);
    this.#free.push(slot);
    this.#used--;
  }

  /** Releases every slot and the memory behind them. */
  clear(): void {
    this.#u64 = [];
    this.#u32 = [];
    this.#f64 = [];
    this.#free = [];
    this.#next = 0;
    this.#used = 0;
  }

  /** The u64 chunk holding `slot`; index it from {@linkcode u64Base}. */
  u64(slot: number): BigUint64Array {
    return this.#u64[slot >>> CHUNK_BITS];
  }

  /** The u32 chunk holding `slot`; index it from {@linkcode u32Base}. */
  u32(slot: number): Uint32Array {
    return this.#u32[slot >>> CHUNK_BITS];
  }

  /** The f64 chunk holding `slot`; index it from {@linkcode f64Base}. */
  f64(slot: number): Float64Array {
    return this.#f64[slot >>> CHUNK_BITS];
  }
}

/** First u64 index of `slot` inside its chunk. */
export function u64Base(slot: number): number {
  return (slot & CHUNK_MASK) * U64_PER_SLOT;
}

/** First u32 index of `slot` inside its chunk. */
export function u32Base(slot: number): number {
  return (slot & CHUNK_MASK) * U32_PER_SLOT;
}

/** First f64 index of `slot` inside its chunk. */
export function f64Base(slot: number): number {
  return (slot & CHUNK_MASK) * F64_PER_SLOT;
}
