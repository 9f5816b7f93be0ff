/**
 * Pod label JSON byte for byte as Go 1.21's `json.Marshal(map[string]string)` writes it (what
 * Antrea v1.13 exports): the expected strings follow Go's encoder rules (sorted UTF-8 keys,
 * HTML-safe escaping, `\u00XX` for control characters but `\n`, `\r`, `\t`).
 */

import assert from "node:assert/strict";
import { encodePodLabels } from "../../src/aggregation/correlation.ts";

const CASES: [string, Record<string, string>, string][] = [
  [
    "Kubernetes-legal labels",
    { "app.kubernetes.io/name": "web", app: "db" },
    '{"app":"db","app.kubernetes.io/name":"web"}',
  ],
  ["HTML characters", { app: "a<b>&c" }, '{"app":"a\\u003cb\\u003e\\u0026c"}'],
  ["quote and backslash", { k: 'q"b\\s' }, '{"k":"q\\"b\\\\s"}'],
  ["a backslash before b is not \\b", { k: "\\b\\f" }, '{"k":"\\\\b\\\\f"}'],
  [
    "control characters",
    { k: "\n\r\t\b\f\u0001\u001f" },
    '{"k":"\\n\\r\\t\\u0008\\u000c\\u0001\\u001f"}',
  ],
  ["line and paragraph separators", { k: "x\u2028y\u2029" }, '{"k":"x\\u2028y\\u2029"}'],
  ["other non-ASCII raw", { k: "é😀\u007f" }, '{"k":"é😀\u007f"}'],
  [
    "keys in UTF-8 byte order",
    { "😀": "4", "\uff21": "3", a: "2", Z: "1" },
    '{"Z":"1","a":"2","\uff21":"3","😀":"4"}',
  ],
  ["unpaired surrogate", { k: "\ud800" }, '{"k":"\ufffd"}'],
  ["no labels", {}, "{}"],
];

for (const [name, labels, go] of CASES) {
  Deno.test(`pod labels JSON as Go writes it: ${name}`, () => {
    assert.equal(encodePodLabels(labels), go);
  });
}
