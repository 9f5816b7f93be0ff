/**
 * Byte-array helpers shared by the modules that assemble or write bytes (IPFIX transport
 * writes, DER encoding, files and sockets written in full, files read within bounds).
 *
 * @module
 */

/** Writes all of `data` to `w` (a file or a connection), however many writes that takes. */
export async function writeAll(
  w: { write(p: Uint8Array): Promise<number> },
  data: Uint8Array,
): Promise<void> {
  let off = 0;
  while (off < data.length) off += await w.write(data.subarray(off));
}

/** The parts back to back in one new array. */
export function concatBytes(parts: readonly Uint8Array[]): Uint8Array<ArrayBuffer> {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint8Array(n);
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

/**
 * `stream` read to its end, if it holds at most `maxBytes`; undefined as soon as more came (the
 * loop's early end cancels a web stream and destroys a Node.js one, so the rest is not read).
 * Each chunk is copied as it comes: a chunk can be a view of a much larger buffer (16 KiB of a
 * 64 KiB one from a socket, 4 KiB of 64 KiB from gzip), and holding the views held the buffers,
 * 4 to 16 times the bound (the CLI review: 3 GB of RSS under a 256 MiB bound).
 */
export async function readAtMost(
  stream: AsyncIterable<Uint8Array>,
  maxBytes: number,
): Promise<Uint8Array<ArrayBuffer> | undefined> {
  let buf = new Uint8Array(Math.min(maxBytes, 64 * 1024));
  let size = 0;
  for await (const chunk of stream) {
    if (size + chunk.byteLength > maxBytes) return undefined;
    if (size + chunk.byteLength > buf.length) {
      const bigger = new Uint8Array(
        Math.min(maxBytes, Math.max(buf.length * 2, size + chunk.byteLength)),
      );
      bigger.set(buf.subarray(0, size));
      buf = bigger;
    }
    buf.set(chunk, size);
    size += chunk.byteLength;
  }
  return buf.slice(0, size);
}

/**
 * The text of the regular file at `path` (see {@linkcode openRegularFile}), at most `maxBytes`;
 * throws {@linkcode NotRegularFile} for anything else and an error past the bound.
 */
export async function readRegularText(path: string, maxBytes: number): Promise<string> {
  const { file, size } = await openRegularFile(path);
  try {
    const bytes = await readUpTo(file, maxBytes, size);
    if (bytes === undefined) throw new Error(`over ${maxBytes} bytes: not read`);
    return new TextDecoder().decode(bytes);
  } finally {
    file.close();
  }
}

/**
 * How many of the leading pieces (`sizes`, in bytes, in write order) lie whole within the first
 * `bytes` bytes, and their total: what of a buffer of lines a write cut short after `bytes`
 * delivered whole. Reads `sizes` only up to the first piece cut.
 */
export function wholePieces(
  sizes: Iterable<number>,
  bytes: number,
): { count: number; bytes: number } {
  let count = 0;
  let total = 0;
  for (const n of sizes) {
    if (total + n > bytes) break;
    total += n;
    count++;
  }
  return { count, bytes: total };
}

/** Base64 of `bytes`, whatever their size (built in pieces: one spread of more than ~125k
 * arguments into `String.fromCharCode` throws a RangeError). */
export function toBase64(bytes: Uint8Array): string {
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

/**
 * The bytes of `file` from where it stands, at most `max`; undefined, having read `max + 1`, when
 * it holds more. `sizeHint` (the size a stat announced) sizes the first buffer; the read is
 * bounded whatever the file does meanwhile.
 */
export async function readUpTo(
  file: Deno.FsFile,
  max: number,
  sizeHint: number = max,
): Promise<Uint8Array | undefined> {
  let buf = new Uint8Array(Math.min(sizeHint, max) + 1);
  let n = 0;
  for (;;) {
    if (n === buf.length) {
      if (n > max) return undefined;
      const bigger = new Uint8Array(Math.min(buf.length * 2, max + 1));
      bigger.set(buf);
      buf = bigger;
    }
    const got = await file.read(buf.subarray(n));
    if (got === null) return buf.subarray(0, n);
    n += got;
  }
}

/** What `info` describes: "regular file", "directory", "FIFO", ... */
export function fileKind(info: Deno.FileInfo): string {
  if (info.isFile) return "regular file";
  if (info.isDirectory) return "directory";
  if (info.isFifo) return "FIFO";
  if (info.isCharDevice) return "character device";
  if (info.isBlockDevice) return "block device";
  if (info.isSocket) return "socket";
  return "other";
}

/** Thrown by {@linkcode openRegularFile} for a path that is no regular file. */
export class NotRegularFile extends Error {
  /** Creates the error; `kind` as {@linkcode fileKind} names it, `refused` what was not done. */
  constructor(kind: string, replaced = false, refused = "not read") {
    super(`not a regular file (${kind}${replaced ? ", replaced" : ""}): ${refused}`);
    this.name = "NotRegularFile";
  }
}

/**
 * Opens `path` for reading when it is a regular file (through its symlinks), with its size;
 * throws {@linkcode NotRegularFile} otherwise, without opening it: `open(2)` of a FIFO blocks until
 * a writer comes, and a device (`/dev/zero`) never ends. What was opened is looked at again (the
 * path may have been replaced in between). A FIFO renamed over the path between the two looks
 * still blocks the open: Deno has no `O_NONBLOCK` open that would close that race.
 */
export async function openRegularFile(path: string): Promise<{ file: Deno.FsFile; size: number }> {
  const kind = fileKind(await Deno.stat(path));
  if (kind !== "regular file") throw new NotRegularFile(kind);
  const file = await Deno.open(path, { read: true });
  try {
    const info = await file.stat();
    if (!info.isFile) throw new NotRegularFile(fileKind(info), true);
    return { file, size: info.size };
  } catch (err) {
    file.close();
    throw err;
  }
}
