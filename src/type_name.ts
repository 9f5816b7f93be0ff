/**
 * How a value's type is named in an error message: the one wording of every check of outside
 * data (the API server's answers, a credential plugin's output, a ConfigMap's text), which
 * never quotes the value itself (it may be a token, or megabytes).
 *
 * @module
 */

/**
 * `absent` (undefined), `null`, `an array`, `an object`, or `a string` / `a number` /
 * `a boolean` / `a bigint` / `a function` / `a symbol`.
 */
export function typeName(v: unknown): string {
  if (v === undefined) return "absent";
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  return typeof v === "object" ? "an object" : `a ${typeof v}`;
}
