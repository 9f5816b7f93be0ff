/**
 * Duplicate mapping keys of a parsed YAML document, found in one pass. npm:yaml's own check
 * (`uniqueKeys: true`) compares each new key with every key before it in its mapping: a file of
 * 60,000 keys under `limits:` held the aggregator's main thread 34 s at a reload (and `set` 78 s
 * at 32,000). So documents are parsed with `uniqueKeys: false` and checked here, with its
 * semantics (scalar keys equal by value, YAML 1.1 `<<` merge keys exempt, collection keys never
 * equal) and its message. Aliases are not followed: each node is visited once, whatever an alias
 * bomb would expand to.
 *
 * @module
 */

import { isAlias, isMap, isPair, isScalar, isSeq, type Node, type ParsedNode } from "yaml";

/** npm:yaml's message for a duplicate key (kept: errors and tests name it). */
export const DUPLICATE_KEY_MESSAGE = "Map keys must be unique";

/** A key that repeats one before it in the same mapping. */
export interface DuplicateKey {
  /** The repeated key's node (its `range` says where). */
  readonly key: ParsedNode;
  /** The key's text. */
  readonly text: string;
}

/** A YAML 1.1 merge key (`<<`), which npm:yaml reads as a symbol, or the plain `<<`. */
function isMerge(node: Node): boolean {
  return isScalar(node) && (typeof node.value === "symbol" || node.value === "<<");
}

/**
 * The first key in the text that repeats an earlier key of its mapping (the one npm:yaml's check
 * reported first), or undefined. Linear in the number of nodes.
 */
export function firstDuplicateKey(root: unknown): DuplicateKey | undefined {
  const stack: unknown[] = [root];
  let first: DuplicateKey | undefined;
  const at = (d: DuplicateKey | undefined) => d?.key.range?.[0] ?? Infinity;
  while (stack.length > 0) {
    const node = stack.pop();
    if (node === null || node === undefined || isAlias(node)) continue;
    if (isMap(node)) {
      const seen = new Set<unknown>();
      for (const pair of node.items) {
        const key = pair.key as ParsedNode | null;
        if (key !== null && isScalar(key) && !isMerge(key)) {
          if (!seen.has(key.value)) seen.add(key.value);
          else if (first === undefined || at({ key, text: "" }) < at(first)) {
            first = { key, text: String(key.value) };
          }
        }
        stack.push(pair.value, pair.key);
      }
    } else if (isSeq(node)) {
      for (const item of node.items) stack.push(item);
    } else if (isPair(node)) {
      stack.push(node.value, node.key);
    }
  }
  return first;
}
