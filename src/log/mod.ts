/**
 * Log output like upstream's klog: the command-line flags, the per-severity log files with
 * rotation and pruning, and the klog text line. The logger itself is `src/log.ts`.
 *
 * @module
 */

export {
  boolFlag,
  type FlagOccurrence,
  KLOG_DEFAULTS,
  KLOG_FILE_ENV,
  klogFileDir,
  type KlogFlags,
  type LogNote,
  type LogOutput,
  parseKlogFlag,
  startLogOutput,
} from "./flags.ts";
export {
  type KlogFileHandle,
  KlogFiles,
  type KlogFilesOptions,
  type KlogFilesStats,
  klogFileStamp,
  type KlogSeverity,
} from "./klog_files.ts";
export { formatKlogLine, KLOG_LETTER, type KlogEvent, klogTime } from "./klog_format.ts";
