/**
 * The vocabulary a configuration section is written in: the decode schema (key → scalar kind),
 * the decoded raw values, typed readers that apply defaults, and the validators whose messages
 * follow upstream's texts. The global keys and every exporter component's section use it, so a
 * section is declared once, next to the component that owns it, and the config layer assembles
 * them without knowing any component.
 *
 * @module
 */

import { parseWaitDuration } from "./duration.ts";

/** Scalar kinds of the strict decoder (YAML 1.1 rules, see parse.ts). */
export type Kind = "str" | "bool" | "int" | "i32" | "u32" | "strlist";

/** Decode schema of one mapping: key → scalar kind, nested mapping, or list of mappings. */
export interface MapSchema {
  [key: string]: Kind | MapSchema | { list: MapSchema };
}

/** Decoded values keyed by name; absent or `null` keys are missing. */
export type Raw = { [key: string]: string | number | boolean | string[] | Raw | Raw[] };

/** A configuration error; `path` is the offending key path (`clickHouse.commitInterval`) or "". */
export class ConfigError extends Error {
  /** Key path the error is about, "" for whole-file errors. */
  readonly path: string;

  /** Creates an error about `path`. */
  constructor(message: string, path = "") {
    super(message);
    this.name = "ConfigError";
    this.path = path;
  }
}

/** The nested mapping `key` of `raw`, or an empty one. */
export function sub(raw: Raw, key: string): Raw {
  const v = raw[key];
  return typeof v === "object" && v !== null && !Array.isArray(v) ? v : {};
}

/** The string `key`; empty or absent gives `def` (upstream: "" means unset). */
export function str(raw: Raw, key: string, def = ""): string {
  const v = raw[key];
  return typeof v === "string" && v !== "" ? v : def;
}

/** The bool `key`, or `def` when absent. */
export function bool(raw: Raw, key: string, def: boolean): boolean {
  const v = raw[key];
  return typeof v === "boolean" ? v : def;
}

/** The integer `key`; upstream semantics: 0 or absent means unset and gives `def`. */
export function intOr(raw: Raw, key: string, def: number): number {
  const v = raw[key];
  return typeof v === "number" && v !== 0 ? v : def;
}

/** Throws a {@linkcode ConfigError} about `path` (`config: <path>: <msg>`). */
export function fail(path: string, msg: string): never {
  throw new ConfigError(path === "" ? `config: ${msg}` : `config: ${path}: ${msg}`, path);
}

/** Upstream's "record format X is not supported" check. */
export function checkFormat(path: string, value: string, allowed: readonly string[]): void {
  if (!allowed.includes(value)) fail(path, `record format ${value} is not supported`);
}

/** Rejects a negative integer (upstream accepts them and misbehaves later). */
export function nonNegative(path: string, v: number): void {
  if (v < 0) fail(path, `must not be negative, got ${v}`);
}

/**
 * Parses a Go duration or throws a {@linkcode ConfigError} naming `path`; at most
 * `MAX_TIMER_DELAY_MS` (every duration of the configuration is waited on).
 */
export function durationOrThrow(path: string, text: string): number {
  try {
    return parseWaitDuration(text);
  } catch (e) {
    throw new ConfigError(
      `config: ${path} ${JSON.stringify(text)}: not a duration (${(e as Error).message})`,
      path,
    );
  }
}

/** Parses a Go duration, falling back to `def` (for sections validated only when enabled). */
export function durationOrDefault(text: string, def: string): number {
  try {
    return parseWaitDuration(text);
  } catch {
    return parseWaitDuration(def);
  }
}

/** A duration of at least one second, with upstream's "too small" message. */
export function minOneSecond(path: string, name: string, text: string): number {
  const ms = durationOrThrow(path, text);
  if (ms < 1000) {
    throw new ConfigError(
      `config: ${path} ${JSON.stringify(text)}: ${name} ${text} is too small: ` +
        "shortest supported interval is 1s",
      path,
    );
  }
  return ms;
}
