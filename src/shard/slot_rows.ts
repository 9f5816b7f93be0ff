/**
 * Exported flows written into the sinks' binary batch (`exporters/batch.ts`) straight from
 * their slots, as a shard exports them (see `ExportHooks.rows`). The one-shard core hands its
 * sinks a snapshot record (BigInt counters, strings, address text) which the batch writer then
 * reads field by field; a shard has only the batch to fill, so it copies the slot's words into
 * the row instead: u64 counters as two u32 words, strings by their interned text, the key's
 * addresses as the words the slot keeps. The code is generated once from the field table
 * (`aggregation/layout.ts`) through the batch's own row code ({@linkcode rowFieldsSource}), so a
 * row is byte for byte the one the snapshot path writes (a test compares them).
 *
 * @module
 */

import { EXTRA_VALUE_SOURCE, fieldValueSource, groupPrelude } from "../aggregation/field_code.ts";
import { FIELDS, FL_IPV4, GROUPS } from "../aggregation/layout.ts";
import type { ExportHooks, SlotRows } from "../aggregation/snapshot.ts";
import { U32, u32Base, U64_HI, U64_LO, u64Base } from "../aggregation/slot_store.ts";
import type { CoreState } from "../aggregation/state.ts";
import type { Interner } from "../aggregation/intern.ts";
import type { TupleTable } from "../aggregation/tuples.ts";
import {
  BATCH_HELPERS,
  type BatchWriter,
  KEY_ADDRESS,
  putWords,
  rowFieldsSource,
} from "../exporters/batch.ts";

type SlotRowCode = (
  B: BatchWriter,
  uncorrelated: boolean,
  I: Interner,
  G: readonly TupleTable[],
  u32: Uint32Array,
  ub: number,
  W: Uint32Array,
  wb: number,
) => void;

const ROWS = new Map<string, (typeof FIELDS)[number]>(FIELDS.map((f) => [f.ie, f]));

function valueOf(
  name: string,
  kind: string,
  at: string,
): string | { present: string; put: string } {
  const off = KEY_ADDRESS[name];
  if (off !== undefined) {
    // Present with the key's family; the words are the slot's key.
    const p = `ub + ${U32.SRC + off}`;
    return kind === "ipv4"
      ? { present: "v4", put: `v.setUint32(${at}, u32[${p}]);` }
      : { present: "!v4", put: putWords(at, "u32", p) };
  }
  const extra = EXTRA_VALUE_SOURCE[name];
  if (extra !== undefined) return extra;
  const f = ROWS.get(name);
  if (f === undefined) throw new Error(`slot rows: batch field ${name} is not in the slot`);
  if (f.kind !== "u64") return fieldValueSource(f);
  if (kind !== "bigint") throw new Error(`slot rows: u64 field ${name} is a ${kind} in batches`);
  // Little-endian in the row, as setBigUint64(…, true) writes it.
  return {
    present: "true",
    put: `v.setUint32(${at}, W[wb + ${2 * f.at + U64_LO}], true); ` +
      `v.setUint32(${at} + 4, W[wb + ${2 * f.at + U64_HI}], true);`,
  };
}

function compile(): SlotRowCode {
  const key = (ie: string): string => fieldValueSource(ROWS.get(ie)!);
  const source = [
    `"use strict";`,
    `return function writeSlotRow(B, unc, I, G, u32, ub, W, wb) {`,
    groupPrelude(GROUPS),
    `const v4 = (u32[ub + ${U32.FLAGS}] & ${FL_IPV4}) !== 0;`,
    `const base = B.startRow(!v4, unc, ${key("protocolIdentifier")}, ${
      key("sourceTransportPort")
    }, ${key("destinationTransportPort")});`,
    `const t = B.target; const v = t.v; const rows = t.rows; const ref = t.ref;`,
    `const last = t.last; const lastRef = t.lastRef;`,
    rowFieldsSource(valueOf),
    `};`,
  ].join("\n");
  return new Function("H", source)(BATCH_HELPERS) as SlotRowCode;
}

const writeSlotRow = compile();

/** Flows per batch that exported flows are written into from their slots (a shard's, the stop's). */
export const SLOT_BATCH_FLOWS = 1024;

/**
 * The hooks of a sweep that writes its flows into batches from their slots through `rows`: the
 * rows carry the key's address words, so the sweep makes no address text (readers of the batch
 * make it from the words, `readBatch`).
 */
export function rowHooks(hooks: ExportHooks | undefined, rows: SlotRows): ExportHooks {
  return { ...hooks, addressText: false, rows };
}

/**
 * The `emit` of a sweep whose flows go into a batch from their slots (`ExportHooks.rows`): never
 * called. Were one handed here, the core counts it as an emit error, not lost quietly.
 */
export function viaRows(): never {
  throw new Error("exported flows are written as slot rows");
}

/**
 * {@linkcode SlotRows} over a batch writer: `onFull` runs when a row fills it (and must empty
 * it, e.g. by posting it).
 */
export class SlotRowWriter implements SlotRows {
  readonly #batch: BatchWriter;
  readonly #onFull: () => void;

  constructor(batch: BatchWriter, onFull: () => void) {
    this.#batch = batch;
    this.#onFull = onFull;
  }

  add(s: CoreState, slot: number, uncorrelated: boolean): void {
    const store = s.store;
    writeSlotRow(
      this.#batch,
      uncorrelated,
      s.intern,
      s.groups,
      store.u32(slot),
      u32Base(slot),
      store.u64Words(slot),
      2 * u64Base(slot),
    );
    this.#batch.commitRow();
    if (this.#batch.full) this.#onFull();
  }
}
