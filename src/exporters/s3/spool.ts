/**
 * The S3 sink's use of the durable spool (`src/spool/`): finished objects that do not fit in
 * the memory bound, or are still waiting when the stop deadline passes, are appended as one
 * frame each, with their **object key** stored next to the body, so a replay (in this process
 * or after a restart) uploads under the same key: a retry is an idempotent overwrite.
 *
 * Payload of a frame: key length (u16, big-endian), the key (UTF-8), the object's body.
 *
 * The ledger stays exact at every moment: records handed to {@linkcode ObjectSpool.offer} are
 * counted `appending` until the spool's own counters hold them (the spool's `applied` hook),
 * and an upload from the spool is counted only when the spool lets go of it (same hook on ack).
 *
 * @module
 */

import { newBatchId, Spool, type SpoolLease, type SpoolStats } from "../../spool/mod.ts";
import type { SpoolConfig } from "../spool_config.ts";

/** An object to keep: its full key (prefix included), body and records. */
export interface SpooledObject {
  /** Key in the bucket (`[<prefix>/]records-<id>.csv[.gz]`), fixed for the object's life. */
  readonly key: string;
  /** The object's bytes. */
  readonly body: Uint8Array;
  /** CSV lines in the body. */
  readonly records: number;
}

/** An object read back from the spool, to be uploaded then acked or released. */
export interface SpoolObjectLease extends SpooledObject {
  /** Written by an earlier process. */
  readonly recovered: boolean;
  /** The spool's lease. */
  readonly lease: SpoolLease;
}

const enc = new TextEncoder();
const dec = new TextDecoder();

/** The frame payload of `o`. */
export function encodeSpooledObject(o: SpooledObject): Uint8Array {
  const key = enc.encode(o.key);
  if (key.length > 0xffff) throw new Error(`S3 object key too long to spool: ${key.length} bytes`);
  const out = new Uint8Array(2 + key.length + o.body.length);
  out[0] = key.length >> 8;
  out[1] = key.length & 0xff;
  out.set(key, 2);
  out.set(o.body, 2 + key.length);
  return out;
}

/** The key and body of a frame payload. */
export function decodeSpooledObject(payload: Uint8Array): { key: string; body: Uint8Array } {
  const n = (payload[0] << 8) | payload[1];
  return { key: dec.decode(payload.subarray(2, 2 + n)), body: payload.subarray(2 + n) };
}

/**
 * The spool of one S3 sink. Opened in the background (it may wait for the lock of a sink being
 * replaced); objects offered meanwhile are written once it is open, and refused only after it
 * could not be opened.
 */
export class ObjectSpool {
  readonly #config: SpoolConfig;
  #spool: Spool | undefined;
  #opening: Promise<Spool> | undefined;
  #openFailed = false;
  #chain: Promise<void> = Promise.resolve();
  /** Rejected by a close before the spool opened: the offers waiting for it fail (counted). */
  readonly #abandoned = Promise.withResolvers<never>();
  #appending = 0;
  #writeFailed = 0;

  /** A spool in `config.dir`, not opened yet. */
  constructor(config: SpoolConfig) {
    this.#config = structuredClone(config);
    this.#abandoned.promise.catch(() => {});
  }

  /** The directory and bound. */
  get config(): SpoolConfig {
    return this.#config;
  }

  /** Opens the directory (waits for its lock); rejects when it cannot be used. */
  async open(): Promise<SpoolStats> {
    this.#opening ??= Spool.open(this.#config.dir, { maxBytes: this.#config.maxBytes });
    try {
      this.#spool = await this.#opening;
    } catch (err) {
      this.#openFailed = true;
      throw err;
    }
    return this.#spool.stats();
  }

  /** True once opened. */
  get isOpen(): boolean {
    return this.#spool !== undefined;
  }

  /** Records handed over and not yet in the spool's counters. */
  get appending(): number {
    return this.#appending;
  }

  /** Records whose append failed (an I/O error): handed back to `onFailed` of {@linkcode offer}. */
  get writeFailed(): number {
    return this.#writeFailed;
  }

  /** The spool's counters, or undefined before it is open. */
  stats(): SpoolStats | undefined {
    return this.#spool?.stats();
  }

  /**
   * Takes `o` (appended in order after the earlier offers, once the spool is open) and returns
   * true, or returns false when the spool was never asked to open or could not be opened. When
   * the write fails (or the opening does), `onFailed` is called with the error (the caller
   * counts the records dropped in that same step).
   */
  offer(o: SpooledObject, onFailed: (err: unknown) => void): boolean {
    const opening = this.#opening;
    if (opening === undefined || this.#openFailed) return false;
    let payload: Uint8Array;
    try {
      payload = encodeSpooledObject(o);
    } catch (err) {
      onFailed(err);
      return true;
    }
    this.#appending += o.records;
    this.#chain = this.#chain.then(async () => {
      let applied = false;
      try {
        const spool = await Promise.race([opening, this.#abandoned.promise]);
        await spool.append(
          { id: newBatchId(), records: o.records, flags: 0, payload },
          () => {
            applied = true;
            this.#appending -= o.records;
          },
        );
      } catch (err) {
        if (!applied) {
          this.#appending -= o.records;
          this.#writeFailed += o.records;
          onFailed(err);
        }
      }
    });
    return true;
  }

  /** Resolves once every offer so far is in the spool (or failed). */
  settled(): Promise<void> {
    return this.#chain;
  }

  /**
   * The oldest object (after the offers so far), or undefined when none waits or the spool is
   * not open yet (an upload pass does not wait for the lock).
   */
  async oldest(): Promise<SpoolObjectLease | undefined> {
    const spool = this.#spool;
    if (spool === undefined) return undefined;
    await this.#chain;
    const lease = await spool.peek();
    if (lease === undefined) return undefined;
    const { key, body } = decodeSpooledObject(lease.payload);
    return { key, body, records: lease.records, recovered: lease.recovered, lease };
  }

  /** `o` was uploaded; `applied` runs when its records leave the spool's counters. */
  ack(o: SpoolObjectLease, applied: () => void): Promise<void> {
    return this.#spool!.ack(o.lease, applied);
  }

  /** The upload of `o` failed: it stays first. */
  release(o: SpoolObjectLease): void {
    this.#spool?.release(o.lease);
  }

  /**
   * Waits for pending offers, then closes the files and lets go of the lock. When the spool is
   * not open yet (its lock still held elsewhere), the offers waiting for it fail (their
   * `onFailed` runs) and a late opening is closed at once.
   */
  async close(): Promise<void> {
    if (this.#spool === undefined && this.#opening !== undefined && !this.#openFailed) {
      this.#openFailed = true;
      this.#abandoned.reject(new Error(`spool ${this.#config.dir} not open by the stop`));
      this.#opening.then((s) => s.close(), () => {});
    }
    await this.#chain;
    await this.#spool?.close();
  }
}
