import assert from "node:assert/strict";
import { typeName } from "../src/type_name.ts";

Deno.test("typeName: every type named with its article, never the value", () => {
  const cases: [unknown, string][] = [
    [undefined, "absent"],
    [null, "null"],
    [[1, 2], "an array"],
    [{ token: "secret" }, "an object"],
    ["secret", "a string"],
    [5, "a number"],
    [true, "a boolean"],
    [5n, "a bigint"],
    [() => {}, "a function"],
    [Symbol("s"), "a symbol"],
  ];
  for (const [v, name] of cases) assert.equal(typeName(v), name);
  assert.doesNotMatch(cases.map(([v]) => typeName(v)).join(" "), /secret/);
});
