/**
 * The `spool` subsection shared by the network sinks that keep batches on disk while their
 * peer is slow or down (`clickHouse.spool`, `s3Uploader.spool`; ours, not upstream): one
 * declaration of its keys, defaults, validation and the permissions it needs, so the sinks
 * cannot drift apart. The spool itself is `src/spool/`.
 *
 * @module
 */

import { directoryGrants } from "./component.ts";
import { fail, intOr, nonNegative, type Raw, str, sub } from "../config/schema.ts";
import { permissionEntryProblem } from "../permission_entry.ts";
import type { BuildContext } from "../config/section.ts";
import type { Logger } from "../log.ts";
import type { SpoolStats } from "../spool/mod.ts";

/** `<section>.spool` subsection. */
export interface SpoolConfig {
  /**
   * Directory of the segment files (created; mount a volume there to keep them across Pod
   * restarts).
   * @default {"$TMPDIR/flow-aggregator-spool/<sink>"} (`clickhouse`, `s3`)
   */
  dir: string;
  /**
   * Bound of the segment files in bytes; beyond it the oldest segment is dropped (counted).
   * @default {1073741824}
   */
  maxBytes: number;
}

/** Defaults of the subsection; the directory is under `$TMPDIR`, one per sink. */
export const SPOOL_DEFAULTS = {
  /** Joined to `$TMPDIR` and the sink's name. */
  dirUnderTmp: "flow-aggregator-spool",
  maxBytes: 1 << 30,
} as const;

/** Decode schema of the subsection (the `spool` key of a section's schema). */
export const SPOOL_SCHEMA = { dir: "str", maxBytes: "int" } as const;

/** The subsection of `raw` (a section) with defaults applied, for the sink named `sink`. */
export function buildSpoolConfig(raw: Raw, ctx: BuildContext, sink: string): SpoolConfig {
  const spool = sub(raw, "spool");
  return {
    dir: str(spool, "dir", `${ctx.tmpDir}/${SPOOL_DEFAULTS.dirUnderTmp}/${sink}`),
    maxBytes: intOr(spool, "maxBytes", SPOOL_DEFAULTS.maxBytes),
  };
}

/** Checks the subsection of section `section` (run when the sink is enabled). */
export function validateSpoolConfig(section: string, c: SpoolConfig): void {
  nonNegative(`${section}.spool.maxBytes`, c.maxBytes);
  // The directory is granted by name (read and write): a comma would split the grant.
  const problem = permissionEntryProblem("write", c.dir);
  if (problem !== undefined) fail(`${section}.spool.dir`, `${JSON.stringify(c.dir)}: ${problem}`);
}

/**
 * The directory the sink's worker must read and write: absolute, and also its real path when
 * reached through a symlink ({@linkcode directoryGrants}).
 */
export function spoolPermissionPaths(c: SpoolConfig): string[] {
  return directoryGrants(c.dir);
}

/** The spool's counters as every spooling sink reports them (ClickHouse, S3). */
export interface SpoolSinkCounters {
  /** Torn or corrupt spool frames detected. */
  spoolCorrupt: number;
  /** Bytes cut off spool segments at torn or corrupt frames. */
  spoolTruncatedBytes: number;
  /**
   * Spool cursor moves not saved on a full disk (delivery went on; after a crash the batches
   * since the last saved cursor are delivered again).
   */
  spoolCursorWriteFailures: number;
  /** Spool segment files gone when their turn came (removed by hand): records in `spoolDropped`. */
  spoolSegmentsMissing: number;
}

/** {@linkcode SpoolSinkCounters} of a spool (zeros while none is open). */
export function spoolSinkCounters(s: SpoolStats | undefined): SpoolSinkCounters {
  return {
    spoolCorrupt: s?.corruptFrames ?? 0,
    spoolTruncatedBytes: s?.truncatedBytes ?? 0,
    spoolCursorWriteFailures: s?.cursorWriteFailures ?? 0,
    spoolSegmentsMissing: s?.segmentsMissing ?? 0,
  };
}

/**
 * A sink's own share of its spool: the records it spooled and that are still there (`inSpool`,
 * see `ExporterStats.inSpool`) and those the spool dropped (`dropped`), leaving out what the
 * spool held when it was opened (`recovered`, an earlier sink's: `recoveredDelivered` of them
 * delivered so far, the spool's `droppedRecovered` dropped).
 */
export function ownSpoolShare(
  s: SpoolStats | undefined,
  recoveredDelivered: number,
): { inSpool: number; dropped: number } {
  if (s === undefined) return { inSpool: 0, dropped: 0 };
  const recoveredWaiting = s.recovered - recoveredDelivered - s.droppedRecovered;
  return { inSpool: s.records - recoveredWaiting, dropped: s.dropped - s.droppedRecovered };
}

/**
 * Logs a sink's spool as opened (`what`: "ClickHouse", "S3"), and a warning when the scan cut
 * torn or corrupt frames, with the same fields for every sink.
 */
export function logSpoolOpened(
  log: Logger,
  what: string,
  options: { config: SpoolConfig; stats: SpoolStats },
): void {
  const { dir, maxBytes } = options.config;
  const s = options.stats;
  log.info(`${what} spool opened`, {
    dir,
    maxBytes,
    recovered: s.recovered,
    corruptFrames: s.corruptFrames,
    truncatedBytes: s.truncatedBytes,
  });
  if (s.corruptFrames > 0) {
    log.warn(`${what} spool had torn or corrupt frames; cut at the last good frame`, {
      dir,
      corruptFrames: s.corruptFrames,
      truncatedBytes: s.truncatedBytes,
    });
  }
}
