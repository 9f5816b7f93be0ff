/**
 * One S3 object being filled (exporters.md §4.3, §4.5): CSV lines appended in chunks, through a
 * streaming gzip compressor when `compress` is on, so a large object is held compressed, not as
 * text. {@linkcode ObjectWriter.finish} closes the gzip stream, giving one complete gzip member,
 * and hands out the body. The object's name (`records-<12 [a-z0-9]>.csv[.gz]`) is drawn when it
 * is created and kept for its life: a retried upload reuses it, so a retry overwrites the same
 * object instead of adding a duplicate.
 *
 * @module
 */

import { createGzip, type Gzip } from "node:zlib";
import type { ExportedFlow } from "../../aggregation/record.ts";
import type { CsvWriter } from "./csv.ts";

/**
 * Bytes of CSV gathered before they are handed to the compressor together. Lines are written
 * into the chunk as they come (as bytes by {@linkcode CsvWriter}); 1 MiB chunks made the
 * streaming gzip about 1.5× faster than 64 KiB ones (fewer calls into zlib per byte).
 */
const CHUNK_BYTES = 1024 * 1024;
const NAME_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789";
/** Object names: §4.5. */
export const OBJECT_NAME_PATTERN = /^records-[a-z0-9]{12}\.csv(\.gz)?$/;

/** A random `records-<12 [a-z0-9]>.csv[.gz]` name. */
export function objectName(compress: boolean): string {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  let id = "";
  // 252 = 7 × 36: bytes above it would bias the draw, so they are re-drawn.
  for (let i = 0; i < 12; i++) {
    let b = bytes[i];
    while (b >= 252) b = crypto.getRandomValues(new Uint8Array(1))[0];
    id += NAME_ALPHABET[b % 36];
  }
  return `records-${id}.csv${compress ? ".gz" : ""}`;
}

/** How an object is written. */
export interface ObjectWriterOptions {
  /** gzip the object. */
  compress: boolean;
  /** zlib level when compressing (1 fastest … 9 smallest). */
  gzipLevel: number;
}

/** A finished object: its name, body and the records it holds. */
export interface FinishedObject {
  /** `records-<id>.csv[.gz]` (the key without the bucket prefix). */
  readonly name: string;
  /** The object's bytes (one gzip member when compressed). */
  readonly body: Uint8Array;
  /** CSV lines in the body. */
  readonly records: number;
}

/** An object being filled. */
export class ObjectWriter {
  /** The object's name, fixed at creation. */
  readonly name: string;
  #records = 0;
  /** The chunk being filled with encoded lines, and its length. */
  #chunk = new Uint8Array(CHUNK_BYTES);
  #chunkBytes = 0;
  #out: Uint8Array[] = [];
  #outBytes = 0;
  readonly #gzip: Gzip | undefined;
  #error: Error | undefined;
  readonly #ended: Promise<void>;
  readonly #encoder = new TextEncoder();

  /** A new empty object. */
  constructor(options: ObjectWriterOptions) {
    this.name = objectName(options.compress);
    if (!options.compress) {
      this.#ended = Promise.resolve();
      return;
    }
    const gzip = createGzip({ level: options.gzipLevel });
    gzip.on("data", (b: Uint8Array) => {
      this.#out.push(b);
      this.#outBytes += b.byteLength;
    });
    this.#ended = new Promise<void>((resolve) => {
      gzip.on("end", resolve);
      gzip.on("error", (e: Error) => {
        this.#error = e;
        resolve();
      });
    });
    this.#gzip = gzip;
  }

  /** Lines appended so far. */
  get records(): number {
    return this.#records;
  }

  /** Bytes held now: CSV not yet compressed, input queued in the compressor and output. */
  get bytes(): number {
    return this.#chunkBytes + (this.#gzip?.writableLength ?? 0) + this.#outBytes;
  }

  /** Appends one newline-terminated CSV line. */
  add(line: string): void {
    // UTF-8 takes at most 3 bytes per UTF-16 code unit.
    const worst = line.length * 3;
    if (this.#chunk.byteLength - this.#chunkBytes < worst) {
      this.#writeChunk();
      if (this.#chunk.byteLength < worst) this.#chunk = new Uint8Array(worst);
    }
    this.#chunkBytes += this.#encoder.encodeInto(line, this.#chunk.subarray(this.#chunkBytes))
      .written;
    this.#records++;
  }

  /**
   * Appends the CSV line of `flow` taken at `timeInsertedSeconds`, written by `csv` straight
   * into the chunk (no string per line).
   */
  addFlow(csv: CsvWriter, flow: ExportedFlow, timeInsertedSeconds: number): void {
    let end = csv.write(flow, timeInsertedSeconds, this.#chunk, this.#chunkBytes);
    if (end > this.#chunk.byteLength) {
      // It did not fit: the chunk goes without the partial line, which is written again.
      this.#writeChunk();
      end = csv.write(flow, timeInsertedSeconds, this.#chunk, 0);
      while (end > this.#chunk.byteLength) {
        this.#chunk = new Uint8Array(end * 2);
        end = csv.write(flow, timeInsertedSeconds, this.#chunk, 0);
      }
    }
    this.#chunkBytes = end;
    this.#records++;
  }

  #writeChunk(): void {
    if (this.#chunkBytes === 0) return;
    const bytes = this.#chunk.subarray(0, this.#chunkBytes);
    this.#chunk = new Uint8Array(Math.max(CHUNK_BYTES, this.#chunk.byteLength));
    this.#chunkBytes = 0;
    if (this.#gzip !== undefined) this.#gzip.write(bytes);
    else {
      this.#out.push(bytes);
      this.#outBytes += bytes.byteLength;
    }
  }

  /** Closes the object (the gzip member) and returns it; the writer is unusable afterwards. */
  async finish(): Promise<FinishedObject> {
    this.#writeChunk();
    this.#gzip?.end();
    await this.#ended;
    if (this.#error !== undefined) throw new Error(`gzip ${this.name}: ${this.#error.message}`);
    const body = new Uint8Array(this.#outBytes);
    let at = 0;
    for (const part of this.#out) {
      body.set(part, at);
      at += part.byteLength;
    }
    this.#out = [];
    return { name: this.name, body, records: this.#records };
  }
}
