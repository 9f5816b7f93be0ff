/**
 * Reading the configuration file, bounded: a configuration is a few KiB, and the file is read
 * again at every reload and poll; a file of hundreds of MiB put in its place (a mistake, a
 * runaway generator) would otherwise be read and parsed on the main thread, holding it for
 * seconds and its memory for good.
 *
 * Only a **regular file** is opened: `open(2)` of a FIFO blocks until a writer comes (a FIFO given
 * as `--config`, or moved over the file, held the launcher and every reload forever), and a
 * character device (`/dev/zero`) never ends. The path is looked at (`stat`, through its symlinks)
 * before it is opened, and what was opened is looked at again (`openRegularFile`, src/bytes.ts,
 * shared with the cluster UUID state file). That leaves a race: a FIFO renamed
 * over the file between the two still blocks the open; Deno has no `O_NONBLOCK` open that would
 * close it, and a configuration is replaced by a rename of a regular file in practice.
 *
 * @module
 */

import { openRegularFile, readUpTo } from "../bytes.ts";

/**
 * Thrown for a configuration file that is not UTF-8 text. Its bytes were decoded with U+FFFD in
 * place of the bad ones and used: a flowLogger.path holding U+FFFD was applied.
 */
export class ConfigFileNotUtf8 extends Error {
  /** The text with U+FFFD for the bad bytes (to tell one bad content from the next). */
  readonly lossy: string;
  /** Creates the error. */
  constructor(path: string, lossy: string) {
    const at = lossy.indexOf("\uFFFD");
    const line = at < 0 ? undefined : lossy.slice(0, at).split("\n").length;
    super(
      `configuration file ${path} is not UTF-8 text${
        line === undefined ? "" : ` (line ${line})`
      }: refused`,
    );
    this.name = "ConfigFileNotUtf8";
    this.lossy = lossy;
  }
}

/** `bytes` as UTF-8 text; {@linkcode ConfigFileNotUtf8} when they are not. */
function utf8(path: string, bytes: Uint8Array): string {
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw new ConfigFileNotUtf8(path, new TextDecoder().decode(bytes));
  }
}

/** Largest configuration file read, bytes (the stock ConfigMap's is ~12 KiB). */
export const MAX_CONFIG_FILE_BYTES = 1 << 20;

/**
 * The text of the configuration file at `path`; throws, naming the bound, when it is larger than
 * `max` bytes (read no further than that), {@linkcode ConfigFileNotUtf8} when it is not UTF-8
 * text, and, without opening it, when it is no regular file (a FIFO, a directory, a device: see
 * the module doc).
 */
export async function readConfigFile(
  path: string,
  max = MAX_CONFIG_FILE_BYTES,
): Promise<string> {
  // Upstream's words for `--config=` (fatal at start).
  if (path === "") throw new Error("configFile is empty string");
  let opened: { file: Deno.FsFile; size: number };
  try {
    opened = await openRegularFile(path);
  } catch (err) {
    // "Is a directory (os error 21)" alone did not say which file.
    throw new Error(`cannot read configuration file ${path}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const { file, size } = opened;
  try {
    const bytes = await readUpTo(file, max, size);
    if (bytes === undefined) {
      throw new Error(
        `configuration file ${path} is larger than ${max} bytes: not read (a configuration is a few KiB)`,
      );
    }
    return utf8(path, bytes);
  } catch (err) {
    if ((err as Error).message.includes(path)) throw err;
    throw new Error(`cannot read configuration file ${path}: ${(err as Error).message}`, {
      cause: err,
    });
  } finally {
    file.close();
  }
}
