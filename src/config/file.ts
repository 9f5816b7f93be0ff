/**
 * Reading the configuration file, bounded: a configuration is a few KiB, and the file is read
 * again at every reload and poll; a file of hundreds of MiB put in its place (a mistake, a
 * runaway generator) would otherwise be read and parsed on the main thread, holding it for
 * seconds and its memory for good.
 *
 * @module
 */

import { readUpTo } from "../bytes.ts";

/** Largest configuration file read, bytes (the stock ConfigMap's is ~12 KiB). */
export const MAX_CONFIG_FILE_BYTES = 1 << 20;

/**
 * The text of the configuration file at `path`; throws, naming the bound, when it is larger than
 * `max` bytes (read no further than that).
 */
export async function readConfigFile(
  path: string,
  max = MAX_CONFIG_FILE_BYTES,
): Promise<string> {
  let file: Deno.FsFile;
  try {
    file = await Deno.open(path);
  } catch (err) {
    // "Is a directory (os error 21)" alone did not say which file.
    throw new Error(`cannot read configuration file ${path}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  try {
    return await readBounded(file, path, max);
  } catch (err) {
    if ((err as Error).message.includes(path)) throw err;
    throw new Error(`cannot read configuration file ${path}: ${(err as Error).message}`, {
      cause: err,
    });
  } finally {
    file.close();
  }
}

async function readBounded(file: Deno.FsFile, path: string, max: number): Promise<string> {
  const bytes = await readUpTo(file, max, (await file.stat()).size);
  if (bytes === undefined) {
    throw new Error(
      `configuration file ${path} is larger than ${max} bytes: not read (a configuration is a few KiB)`,
    );
  }
  return new TextDecoder().decode(bytes);
}
