/**
 * The Information Element registry: every element of `spec/ie-registry.csv` (IANA, RFC 5103
 * reverse and Antrea PENs), indexed by (enterprise, id) for decoding and by name for building
 * records. IDs repeat across PENs (136 is both IANA flowEndReason and Antrea tcpState), so
 * nothing here is ever keyed by id alone. The Agent and Flow Aggregator template element lists
 * live in the record schema (`src/record/schema.ts`), which imports this registry.
 */

import type { FieldSpecifier, InfoElement } from "./types.ts";
import { REGISTRY_ROWS } from "./registry_data.ts";

/** Every element of ie-registry.csv, in file order. */
export const ALL_ELEMENTS: readonly InfoElement[] = REGISTRY_ROWS.map(
  ([name, id, enterprise, type, length]): InfoElement =>
    Object.freeze({ name, id, enterprise, type, length }),
);

// (enterprise, id) packed into one number: pen * 2^16 + id stays below 2^48.
const byKey = new Map<number, InfoElement>();
const byName = new Map<string, InfoElement>();
let generation = 0;

/** Increases whenever {@linkcode registerElement} adds an element (invalidates compiled code). */
export function registryGeneration(): number {
  return generation;
}

function keyOf(enterprise: number, id: number): number {
  return enterprise * 65536 + id;
}

for (const ie of ALL_ELEMENTS) {
  byKey.set(keyOf(ie.enterprise, ie.id), ie);
  byName.set(ie.name, ie);
}

/** Returns the element with this (enterprise, id), or undefined when it is not registered. */
export function lookupElement(enterprise: number, id: number): InfoElement | undefined {
  return byKey.get(keyOf(enterprise, id));
}

/** Returns the element with this registry name, or undefined when it is not registered. */
export function elementByName(name: string): InfoElement | undefined {
  return byName.get(name);
}

/**
 * Adds an element beyond the CSV (custom enterprise elements, or test elements covering data
 * types the Antrea registry lacks). Re-registering an identical element is a no-op; a conflicting
 * name or (enterprise, id) throws, because decoders compiled earlier would disagree with later
 * ones. Templates compiled before the call keep treating the element as unknown.
 */
export function registerElement(ie: InfoElement): void {
  const prevKey = byKey.get(keyOf(ie.enterprise, ie.id));
  const prevName = byName.get(ie.name);
  if (prevKey !== undefined || prevName !== undefined) {
    const same = prevKey !== undefined && prevKey === prevName && prevKey.type === ie.type &&
      prevKey.length === ie.length;
    if (same) return;
    throw new Error(
      `registry: element ${ie.name} (${ie.enterprise}/${ie.id}) conflicts with ${
        (prevKey ?? prevName)?.name
      }`,
    );
  }
  if (ie.id < 0 || ie.id > 0x7fff || !Number.isInteger(ie.id)) {
    throw new Error(`registry: element ${ie.name}: id ${ie.id} outside 0..32767`);
  }
  const frozen = Object.freeze({ ...ie });
  byKey.set(keyOf(ie.enterprise, ie.id), frozen);
  byName.set(ie.name, frozen);
  generation++;
}

/** The record key of a field: its registry name, or `"<enterprise>/<id>"` when unknown. */
export function fieldName(enterprise: number, id: number): string {
  return byKey.get(keyOf(enterprise, id))?.name ?? `${enterprise}/${id}`;
}

/**
 * Field specifiers for registry names, with the registry's default lengths (65535 for
 * variable-length types). Throws on a name the registry does not know.
 */
export function fieldsFor(names: readonly string[]): FieldSpecifier[] {
  return names.map((name) => {
    const ie = byName.get(name);
    if (ie === undefined) throw new Error(`registry: unknown information element "${name}"`);
    return { id: ie.id, enterprise: ie.enterprise, length: ie.length };
  });
}
