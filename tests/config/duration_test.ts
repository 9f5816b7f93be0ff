import assert from "node:assert/strict";
import { parseDuration, parseDurationNs } from "../../src/config/duration.ts";

Deno.test("parseDuration accepts Go examples", () => {
  const cases: [string, number][] = [
    ["60s", 60_000],
    ["1m30s", 90_000],
    ["1h30m", 5_400_000],
    ["1.5h", 5_400_000],
    ["1.5s", 1500],
    ["3.5s", 3500],
    ["500ms", 500],
    ["300ms", 300],
    ["500us", 0.5],
    ["500\u00b5s", 0.5],
    ["500\u03bcs", 0.5],
    ["1000000ns", 1],
    [".5s", 500],
    ["5.s", 5000],
    ["+5s", 5000],
    ["-5s", -5000],
    ["0", 0],
    ["0s", 0],
    ["1m1m", 120_000],
    ["2h45m30.5s", 9_930_500],
  ];
  for (const [s, ms] of cases) assert.equal(parseDuration(s), ms, s);
});

Deno.test("parseDuration rejects bad input with Go's error text", () => {
  const cases: [string, string][] = [
    ["60", 'time: missing unit in duration "60"'],
    ["5d", 'time: unknown unit "d" in duration "5d"'],
    ["1x", 'time: unknown unit "x" in duration "1x"'],
    ["abc", 'time: invalid duration "abc"'],
    ["", 'time: invalid duration ""'],
    ["-", 'time: invalid duration "-"'],
    [".s", 'time: invalid duration ".s"'],
    ["1 s", 'time: unknown unit " s" in duration "1 s"'],
    ["9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'],
  ];
  for (const [s, msg] of cases) assert.throws(() => parseDuration(s), { message: msg }, s);
});

Deno.test("parseDurationNs is exact at the int64 limits", () => {
  assert.equal(parseDurationNs("9223372036854775807ns"), 9223372036854775807n);
  assert.equal(parseDurationNs("-9223372036854775808ns"), -9223372036854775808n);
  assert.equal(parseDurationNs("1.000000001s"), 1_000_000_001n);
  assert.throws(() => parseDurationNs("2562048h"), /invalid duration/);
});
