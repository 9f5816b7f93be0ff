/**
 * Compact storage for live flows. Each flow owns one slot: 30 u64 counters, 28 u32 words (times,
 * ports, enums, key, flags, the intern ids of its strings and the tuple ids of its field
 * groups) and 2 f64 expiry times, kept in chunked typed arrays; a flow has no JS object of its
 * own, the slot number is its handle.
 * Why: a million flows with 30 bigint properties each would cost several KB per flow on the JS
 * heap, and even a small object with one property per string costs 8 bytes a property plus
 * its header; here a slot costs 240 + 112 + 16 bytes and no GC tracing. Chunks are never moved
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
export const U32_PER_SLOT = 28;

/**
 * Fixed u32 positions shared by the core and the flow table. 0-8 are the core's numeric
 * fields and flags; the flow key lives in 5 (protocol and family), 6 (ports) and 9-16
 * (addresses); 17-20 are the flow's optional strings, 21-26 the ids of its field groups
 * (tuples.ts) and 27 its tcpState (an intern id, see intern.ts; the field table in layout.ts
 * says which IE each word or group position holds). Small values share a word (see the
 * `*_SHIFT` constants), which the u32 rows of the field table read through `shift`/`bits`.
 */
export const U32 = {
  START: 0,
  END: 1,
  END_S: 2,
  END_D: 3,
  REASON: 4,
  /** protocolIdentifier in bits 0-7, the key's family (4 or 6) from {@linkcode FAMILY_SHIFT}. */
  PROTO: 5,
  /** sourceTransportPort from {@linkcode SPORT_SHIFT}, destinationTransportPort in bits 0-15. */
  PORTS: 6,
  TYPE: 7,
  /** `FL_*` bits (layout.ts) in bits 0-7, the not-ready expiries so far from `RETRY_SHIFT`. */
  FLAGS: 8,
  /** Source address: 1 word for IPv4, 4 words (big-endian) for IPv6. */
  SRC: 9,
  /** Destination address, same encoding. */
  DST: 13,
  /** Intern id of destinationClusterIPv4, canonical; NO_TEXT when the Agent did not send it. */
  CLUSTER_V4: 17,
  /** Intern id of destinationClusterIPv6, same rule. */
  CLUSTER_V6: 18,
  /** Intern id of the sourcePodLabels JSON once filled (labels enabled); NO_TEXT before. */
  SRC_LABELS: 19,
  /** Intern id of the destinationPodLabels JSON, same rule. */
  DST_LABELS: 20,
  /** Tuple id of the source Pod's name, namespace and Node (layout.ts GROUPS). */
  SRC_POD: 21,
  /** Tuple id of the destination Pod's name, namespace and Node. */
  DST_POD: 22,
  /** Tuple id of the ingress network policy's 5 fields. */
  ING: 23,
  /** Tuple id of the egress network policy's 5 fields. */
  EG: 24,
  /** Tuple id of the destination Service's port and port name. */
  SVC: 25,
  /** Tuple id of the Egress (SNAT) name and IP. */
  EGRESS: 26,
  /** Intern id of tcpState (layout.ts FIELDS, kind `str`). */
  TCP_STATE: 27,
} as const;
/** Shift of the key's family (4 or 6) in the {@linkcode U32}.PROTO word; 0 for a free slot. */
export const FAMILY_SHIFT = 8;
/** Shift of the source port in the {@linkcode U32}.PORTS word. */
export const SPORT_SHIFT = 16;
/** f64 values per slot. */
export const F64_PER_SLOT = 2;
/** Bytes of one slot's typed-array words. */
export const SLOT_BYTES: number = U64_PER_SLOT * 8 + U32_PER_SLOT * 4 + F64_PER_SLOT * 8;

/** Chunked slot allocator with typed-array backing. */
export class SlotStore {
  #u64: BigUint64Array[] = [];
  #u64w: Uint32Array[] = [];
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
      const u64 = new BigUint64Array(CHUNK_SLOTS * U64_PER_SLOT);
      this.#u64.push(u64);
      this.#u64w.push(new Uint32Array(u64.buffer));
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
    this.#u64w = [];
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

  /**
   * The u64 chunk holding `slot` seen as u32 words (the same memory), for arithmetic on
   * doubles while values stay below 2^53: word 2·i + {@linkcode U64_LO} is the low half of u64
   * index i, 2·i + {@linkcode U64_HI} its high half.
   */
  u64Words(slot: number): Uint32Array {
    return this.#u64w[slot >>> CHUNK_BITS];
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

/** Typed arrays use the platform's byte order: which u32 word of a u64 holds its low half. */
export const U64_LO: number = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1 ? 0 : 1;
/** The u32 word of a u64 holding its high half (see {@linkcode U64_LO}). */
export const U64_HI: number = 1 - U64_LO;

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
