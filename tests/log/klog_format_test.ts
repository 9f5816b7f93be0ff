/** klog text lines (control-plane.md §6.4): header, quoting, structured values. */

import assert from "node:assert/strict";
import { formatKlogLine, klogTime } from "../../src/log/mod.ts";
import { logger, setLogFormat, setLogLevel, setLogWriter } from "../../src/log.ts";
import { KLOG_LINE, parseLogLine } from "../_helpers/process.ts";

// Local time, as klog writes it.
const AT = new Date(2026, 11, 3, 9, 31, 24, 123);

Deno.test("klog line: header, pid column, file:line stand-in, quoted message and values", () => {
  const line = formatKlogLine({
    level: "info",
    component: "collector",
    msg: "Started TLS collecting process",
    fields: { address: "[::]:4739", port: 4739, big: 2n ** 64n, ok: true },
  }, { at: AT, pid: 12345 });
  assert.equal(
    line,
    'I1203 09:31:24.123000   12345 collector:0] "Started TLS collecting process" ' +
      'address="[::]:4739" port=4739 big=18446744073709551616 ok=true',
  );
  assert.match(line, KLOG_LINE);
  // The same shape as a real klog line (kubectl's, from Debian's kubernetes-client), column for
  // column up to the file name: the pattern that checks ours also matches theirs.
  const real = 'E1203 10:12:00.098202    8126 memcache.go:265] "Unhandled Error" err="refused"';
  assert.match(real, KLOG_LINE);
  const ours = formatKlogLine(
    { level: "error", component: "memcache.go", msg: "Unhandled Error" },
    {
      at: new Date(2026, 11, 3, 10, 12, 0, 98),
      pid: 8126,
    },
  );
  assert.equal(ours.indexOf(" memcache.go:"), real.indexOf(" memcache.go:"));
});

Deno.test("klog line: severity letters, errors, objects, quotes and a wide pid", () => {
  const at = { at: AT, pid: 1 };
  assert.match(formatKlogLine({ level: "warn", component: "c", msg: "m" }, at), /^W1203 /);
  assert.match(formatKlogLine({ level: "debug", component: "c", msg: "m" }, at), /^I1203 /);
  const e = formatKlogLine({
    level: "error",
    component: "main",
    msg: 'say "hi"\nnow',
    fields: { err: new Error('bad "x"'), obj: { a: 1 }, none: undefined },
  }, { at: AT, pid: 123456789 });
  assert.equal(
    e,
    'E1203 09:31:24.123000 123456789 main:0] "say \\"hi\\"\\nnow" err="bad \\"x\\"" ' +
      'obj="{\\"a\\":1}" none=<nil>',
  );
  assert.match(e, KLOG_LINE);
  assert.equal(klogTime(new Date(2026, 0, 5, 1, 2, 3, 4)), "0105 01:02:03.004000");
});

Deno.test("--log-format klog: the logger writes klog lines with their level", () => {
  const lines: [string, string][] = [];
  const restore = setLogWriter((line, level) => lines.push([line, level]));
  setLogFormat("klog");
  setLogLevel("info");
  try {
    logger("flow-log").warn("disk slow", { ms: 12 });
    logger("flow-log").debug("not written");
  } finally {
    setLogWriter(restore);
    setLogFormat("logfmt");
  }
  assert.equal(lines.length, 1);
  assert.equal(lines[0][1], "warn");
  const m = KLOG_LINE.exec(lines[0][0]);
  assert.ok(m, lines[0][0]);
  assert.deepEqual([m[1], m[4], m[5], m[7], m[8]], [
    "W",
    String(Deno.pid),
    "flow-log",
    "disk slow",
    " ms=12",
  ]);
  // The process tests read klog lines like any other format.
  assert.deepEqual(parseLogLine(lines[0][0]).fields, {
    level: "warn",
    component: "flow-log",
    msg: "disk slow",
    ms: "12",
  });
});

Deno.test("logfmt: a value with control, line-separator or bidirectional characters is quoted with each escaped", () => {
  const lines: string[] = [];
  const restore = setLogWriter((line) => lines.push(line));
  setLogFormat("logfmt");
  setLogLevel("info");
  try {
    logger("c").info("m", {
      esc: "x\x1b[2Jy",
      nul: "a\x00b",
      c1: "p\x9bq",
      sep: "l\u2028m",
      bidi: "r\u202es",
      plain: "web-0",
    });
  } finally {
    setLogWriter(restore);
  }
  assert.equal(lines.length, 1);
  const line = lines[0];
  assert.match(line, / esc="x\\u001b\[2Jy" nul="a\\u0000b" c1="p\\u009bq" sep="l\\u2028m" /);
  assert.match(line, / bidi="r\\u202es" plain=web-0$/);
  // Nothing outside printable ASCII and no second line.
  assert.doesNotMatch(line, /[^\x20-\x7e]/);
});
