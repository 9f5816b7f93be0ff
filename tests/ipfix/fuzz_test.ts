/**
 * Property test: random and mutated inputs through decodeMessage. Only IpfixDecodeError may
 * escape, nothing hangs, and the output stays bounded by the input (no record from nothing).
 * Deterministic (seeded PRNG) so a failure is reproducible from the printed seed and index.
 */
import assert from "node:assert/strict";
import {
  decoderTiers,
  generatedFillerOf,
  PRESENT,
  stringsTruncatedTotal,
  viewFactory,
} from "../../src/ipfix/compile.ts";
import { fieldName } from "../../src/ipfix/registry.ts";
import {
  type DataRecord,
  decodeMessage,
  encodeDataSet,
  encodeTemplateSet,
  fieldsFor,
  type FieldSpecifier,
  IpfixDecodeError,
  RawMessageScratch,
  TemplateStore,
  VARIABLE_LENGTH,
  walkRawMessage,
} from "../../src/ipfix/mod.ts";
import { AGENT_IPV6_FIELDS } from "../../src/record/schema.ts";
import { DATA_MSG, DATA_RECORD, TEMPLATE_MSG } from "./golden.ts";
import { concat, message, rawSet, registerTestElements, spec, tmpl, TYPES } from "./helpers.ts";
import { prng } from "../_helpers/prng.ts";

/** Valid seed messages covering templates, options, withdrawals, padding, var lengths. */
function corpus(): Uint8Array[] {
  const v6 = { id: 257, fields: fieldsFor(AGENT_IPV6_FIELDS), scopeFieldCount: 0 };
  const v6rec = {
    ...DATA_RECORD,
    sourceIPv6Address: "fd00::1",
    destinationIPv6Address: "fd00::2",
    destinationClusterIPv6: "::",
    sourcePodLabels: "x".repeat(300),
  };
  const mixed = tmpl(300, [
    ...fieldsFor(["sourcePodName", "octetDeltaCount", "flowType"]),
    { id: 999, enterprise: 0, length: VARIABLE_LENGTH },
    // packetDeltaCount reduced to 3 bytes (it was octetDeltaCount again, whose 2^64 - 5 the
    // encoder wrote as its low 3 bytes: it now refuses a value that does not fit; same bytes)
    { id: 2, enterprise: 0, length: 3 },
  ]);
  const opt = {
    id: 400,
    fields: fieldsFor(["sourceTransportPort", "tcpState"]),
    scopeFieldCount: 1,
  };
  return [
    TEMPLATE_MSG,
    DATA_MSG,
    concat(TEMPLATE_MSG.subarray(0, 16), TEMPLATE_MSG.subarray(16), DATA_MSG.subarray(16)).map((
      b,
      i,
    ) => i === 2 ? (288 + 159) >> 8 : i === 3 ? (288 + 159) & 0xff : b),
    message([
      encodeTemplateSet([v6, mixed]),
      encodeDataSet(257, v6.fields, [v6rec, v6rec]),
      encodeDataSet(300, mixed.fields, [
        {
          sourcePodName: "a".repeat(260),
          octetDeltaCount: 2n ** 64n - 5n,
          packetDeltaCount: 2n ** 24n - 5n,
          flowType: 3,
          "0/999": new Uint8Array(3),
        },
      ]),
    ], 0x33de13e2),
    message([
      encodeTemplateSet([opt], true),
      encodeDataSet(400, opt.fields, [{ sourceTransportPort: 1, tcpState: "CLOSE" }]),
      rawSet(400, [...encodeDataSet(400, opt.fields, [{ tcpState: "x" }]).subarray(4), 0, 0]),
      encodeTemplateSet([tmpl(2, []), tmpl(300, [])]),
      encodeTemplateSet([{ id: 3, fields: [], scopeFieldCount: 0 }], true),
    ], 0x33de13e2),
  ];
}

function fixLength(b: Uint8Array): void {
  if (b.length >= 4 && b.length <= 65535) {
    b[2] = b.length >> 8;
    b[3] = b.length & 0xff;
  }
}

function mutate(seed: Uint8Array, rnd: () => number): Uint8Array {
  const r = rnd();
  const pick = (n: number): number => Math.floor(rnd() * n);
  let b: Uint8Array;
  if (r < 0.3) {
    b = seed.slice();
    const flips = 1 + pick(8);
    for (let i = 0; i < flips; i++) b[16 + pick(Math.max(1, b.length - 16))] ^= 1 << pick(8);
  } else if (r < 0.5) {
    b = seed.slice(0, pick(seed.length + 1)); // truncation
  } else if (r < 0.75) {
    // length-field edits: message length, a set length, or a var-length prefix/byte anywhere
    b = seed.slice();
    const where = rnd() < 0.3 ? 2 : 16 + pick(Math.max(1, b.length - 17));
    const v = [0, 1, 3, 4, 5, 254, 255, 0xff, pick(256)][pick(9)];
    b[where] = v;
    if (where + 1 < b.length && rnd() < 0.5) b[where + 1] = pick(256);
  } else if (r < 0.9) {
    b = seed.slice();
    // splice random bytes into the middle
    const at = 16 + pick(Math.max(1, b.length - 16));
    const junk = new Uint8Array(pick(40)).map(() => pick(256));
    b = concat(b.subarray(0, at), junk, b.subarray(at));
  } else {
    // random bytes behind a valid-looking header
    b = new Uint8Array(16 + pick(300)).map(() => pick(256));
    b[0] = 0;
    b[1] = 10;
  }
  // Most mutants would stop at badLength; fix the header length for most of them so the set
  // and record walkers get exercised too.
  if (rnd() < 0.8) fixLength(b);
  return b;
}

Deno.test("fuzz: 100,000 random/mutated inputs only ever raise IpfixDecodeError", () => {
  const SEED = 0xf10a66;
  const N = 100_000;
  const rnd = prng(SEED);
  const seeds = corpus();
  let store = new TemplateStore();
  for (const s of seeds) decodeMessage(s, store); // seeds themselves are valid
  const reasons = new Map<string, number>();
  let decoded = 0;
  let records = 0;
  for (let i = 0; i < N; i++) {
    if (i % 2000 === 0) {
      store = new TemplateStore();
      decodeMessage(TEMPLATE_MSG, store);
      decodeMessage(seeds[3], store);
    }
    const input = mutate(seeds[Math.floor(rnd() * seeds.length)], rnd);
    try {
      const m = decodeMessage(input, store);
      decoded++;
      let n = 0;
      for (const ds of m.dataSets) n += ds.records.length;
      records += n;
      assert.ok(
        n <= input.length,
        `seed ${SEED} input ${i}: ${n} records from ${input.length} bytes`,
      );
      for (const e of m.setErrors) reasons.set(e.reason, (reasons.get(e.reason) ?? 0) + 1);
    } catch (e) {
      if (!(e instanceof IpfixDecodeError)) {
        throw new Error(`seed ${SEED} input ${i} (${input.length} bytes) threw ${e}`);
      }
      reasons.set(e.reason, (reasons.get(e.reason) ?? 0) + 1);
    }
  }
  // The mutants must really reach the deep paths, not just fail at the header.
  assert.ok(decoded > N / 3, `only ${decoded} inputs decoded`);
  assert.ok(records > 1000, `only ${records} records decoded`);
  for (const r of ["badLength", "badSetLength", "badTemplate", "badVarLength", "truncated"]) {
    assert.ok((reasons.get(r) ?? 0) > 0, `reason ${r} never produced: ${[...reasons]}`);
  }
});

Deno.test("fuzz: purely random buffers of every small length never crash", () => {
  const rnd = prng(12345);
  const store = new TemplateStore();
  for (let i = 0; i < 20_000; i++) {
    const b = new Uint8Array(Math.floor(rnd() * 64)).map(() => Math.floor(rnd() * 256));
    try {
      decodeMessage(b, store);
    } catch (e) {
      assert.ok(e instanceof IpfixDecodeError, `input ${i} threw ${e}`);
    }
  }
});

Deno.test("differential: generated and interpreting decoders agree on random templates and bytes", () => {
  registerTestElements();
  const rnd = prng(777);
  const pick = (n: number): number => Math.floor(rnd() * n);
  // Legal (type, length) choices incl. reduced sizes, fixed strings and unknown elements.
  const choices: FieldSpecifier[] = [];
  for (const [type, len] of TYPES) {
    choices.push(spec(type));
    if (type === "unsigned64" || type === "signed64") {
      for (let n = 1; n < 8; n++) choices.push(spec(type, n));
    }
    if (type === "unsigned32" || type === "signed32") {
      for (let n = 1; n < 4; n++) choices.push(spec(type, n));
    }
    if (type === "float64") choices.push(spec(type, 4));
    if (len === VARIABLE_LENGTH) choices.push(spec(type, 1 + pick(5)));
  }
  choices.push({ id: 31000, enterprise: 99, length: VARIABLE_LENGTH }, {
    id: 31001,
    enterprise: 0,
    length: 2,
  });
  choices.push(...fieldsFor(AGENT_IPV6_FIELDS));
  let agreedRecords = 0;
  let viewRecords = 0;
  let fills = 0;
  const truncatedBefore = stringsTruncatedTotal();
  for (let t = 0; t < 300; t++) {
    const fields = Array.from({ length: 1 + pick(12) }, () => choices[pick(choices.length)]);
    // Every other template with a small string bound, so truncation is compared too.
    const maxStringBytes = t % 2 === 0 ? 1 + pick(6) : undefined;
    // Every third in wire-number mode (u64 and IPv4 as numbers): both tiers must agree there too.
    const wireNumbers = t % 3 === 0;
    // Every fourth decodes only some fields (a record view): both tiers must give the whole
    // decoding's values of those fields, and the same end or error.
    const names = fields.map((f) => fieldName(f.enterprise, f.id));
    // A view may name IEs the template lacks: they are there, undefined (one shape for all).
    const only = t % 4 === 1
      ? [...(t % 8 === 1 ? ["notInTheTemplate"] : []), ...names.filter(() => rnd() < 0.5)]
      : undefined;
    // Some of a view's names as presence only (applies to variable-length strings alone).
    const presence = only?.filter(() => rnd() < 0.5);
    const { generic, generated } = decoderTiers(
      { id: 300, fields, scopeFieldCount: 0 },
      { maxStringBytes, wireNumbers, only, presence },
    );
    const fill = only === undefined ? undefined : generatedFillerOf(
      { id: 300, fields, scopeFieldCount: 0 },
      { maxStringBytes, wireNumbers, only, presence },
    );
    const whole = only === undefined
      ? undefined
      : decoderTiers({ id: 300, fields, scopeFieldCount: 0 }, { maxStringBytes, wireNumbers })
        .generated;
    for (let k = 0; k < 40; k++) {
      const bytes = new Uint8Array(pick(120)).map(() =>
        rnd() < 0.3 ? 0 : rnd() < 0.1 ? 255 : pick(256)
      );
      const run = (d: typeof generic) => {
        const out: DataRecord[] = [];
        try {
          return { end: d(bytes, 0, bytes.length, out), out };
        } catch (e) {
          assert.ok(e instanceof IpfixDecodeError, String(e));
          return { error: e.reason, out };
        }
      };
      const a = run(generic);
      const b = run(generated);
      assert.deepEqual(b, a, `template ${t} input ${k}`);
      agreedRecords += a.out.length;
      if (whole !== undefined) {
        const w = run(whole);
        const keep = [...new Set(only)];
        // A presence-only IE: "" when empty (a variable-length one of length 0, a fixed-length
        // string of NUL bytes only), else the marker.
        const empty = (x: unknown) => x === "" || (x instanceof Uint8Array && x.length === 0);
        const value = (r: DataRecord, n: string) =>
          presence?.includes(n) && r[n] !== undefined ? (empty(r[n]) ? "" : PRESENT) : r[n];
        const projected = w.out.map((r) => Object.fromEntries(keep.map((n) => [n, value(r, n)])));
        assert.deepEqual(a, { ...w, out: projected }, `view of template ${t} input ${k}`);
        // Every view has the `only` names in that order, whichever tier made it.
        for (const r of [...a.out, ...b.out]) assert.deepEqual(Object.keys(r), keep);
        // The filler, one record at a time into one object, reads the same views and fails at
        // the same record for the same reason.
        const target = viewFactory(keep)();
        const filled: DataRecord[] = [];
        let f: { end: number } | { error: string } = { end: 0 };
        const min = fields.reduce((m, x) => m + (x.length === VARIABLE_LENGTH ? 1 : x.length), 0);
        try {
          let off = 0;
          while (bytes.length - off >= min) {
            off = fill!(bytes, off, bytes.length, target);
            filled.push({ ...target });
          }
          f = { end: off };
        } catch (e) {
          assert.ok(e instanceof IpfixDecodeError, String(e));
          f = { error: e.reason };
        }
        assert.deepEqual({ ...f, out: filled }, a, `filler of template ${t} input ${k}`);
        fills += filled.length;
        viewRecords += a.out.length;
      }
    }
  }
  assert.ok(agreedRecords > 500, `only ${agreedRecords} records compared`);
  assert.ok(viewRecords > 100, `only ${viewRecords} views compared`);
  assert.ok(fills > 100, `only ${fills} filled views compared`);
  const truncated = stringsTruncatedTotal() - truncatedBefore;
  assert.ok(truncated > 100, `only ${truncated} truncated strings compared`);
});

Deno.test("fuzz: raw mode walks, keeps and drops exactly the records the decoders do", () => {
  const SEED = 0x5a11;
  const N = 40_000;
  const rnd = prng(SEED);
  const seeds = corpus();
  let decoding = new TemplateStore();
  let raw = new TemplateStore();
  let compared = 0;
  let withRecords = 0;
  const scratch = new RawMessageScratch();
  let leanTaken = 0;
  for (let i = 0; i < N; i++) {
    if (i % 2000 === 0) {
      decoding = new TemplateStore();
      raw = new TemplateStore();
      for (const s of [TEMPLATE_MSG, seeds[3]]) {
        decodeMessage(s, decoding);
        decodeMessage(s, raw, true);
      }
    }
    const input = mutate(seeds[Math.floor(rnd() * seeds.length)], rnd);
    const outcome = (store: TemplateStore, mode: boolean) => {
      try {
        return decodeMessage(input, store, mode);
      } catch (e) {
        if (!(e instanceof IpfixDecodeError)) throw e;
        return e.reason;
      }
    };
    const a = outcome(decoding, false);
    // The lean walk first (it only reads the store): when it takes a message, the full raw
    // decoding must find exactly its sets and spans, and nothing else to count.
    const lean = walkRawMessage(input, raw, scratch);
    const b = outcome(raw, true);
    const where = `seed ${SEED} input ${i}`;
    if (lean) {
      leanTaken++;
      assert.ok(typeof b !== "string", where);
      assert.equal(b.templateRecords + b.withdrawals + b.templateMisses.length, 0, where);
      assert.equal(b.setErrors.length + b.recordsDropped.length, 0, where);
      assert.equal(b.templatesRefused.length, 0, where);
      assert.deepEqual(
        scratch.sets.slice(0, scratch.count).map((x) => [x.setId, [...x.spans], x.compiled]),
        b.dataSets.map((d) => [d.templateId, d.raw!.spans, d.raw!.compiled]),
        where,
      );
      assert.equal(scratch.exportTime, b.header.exportTime, where);
      assert.equal(scratch.domain, b.header.observationDomainId, where);
    }
    // The same message inside a bigger buffer (a stream's read buffer), walked in place: the
    // same answer, the spans shifted by its offset.
    const at = 1 + (i % 7);
    const padded = new Uint8Array(at + input.length + 5).fill(0xee);
    padded.set(input, at);
    const inPlace = new RawMessageScratch();
    assert.equal(walkRawMessage(padded, raw, inPlace, at, at + input.length), lean, where);
    if (lean) {
      assert.deepEqual(
        inPlace.sets.slice(0, inPlace.count).map((x) => [x.setId, x.spans.map((o) => o - at)]),
        scratch.sets.slice(0, scratch.count).map((x) => [x.setId, [...x.spans]]),
        where,
      );
    }
    if (typeof a === "string" || typeof b === "string") {
      assert.equal(b, a, where);
      continue;
    }
    compared++;
    assert.deepEqual(b.recordsDropped, a.recordsDropped, where);
    assert.deepEqual(b.setErrors, a.setErrors, where);
    assert.equal(b.dataSets.length, a.dataSets.length, where);
    for (let d = 0; d < a.dataSets.length; d++) {
      const rawSet = b.dataSets[d].raw!;
      assert.equal(b.dataSets[d].records.length, 0);
      // Decoding each span gives exactly the records the decoding mode gave.
      const records: DataRecord[] = [];
      for (let s = 0; s < rawSet.spans.length; s += 2) {
        rawSet.compiled.decodeRecords(input, rawSet.spans[s], rawSet.spans[s + 1], records, 1);
      }
      assert.deepEqual(records, a.dataSets[d].records, where);
      if (records.length > 0) withRecords++;
    }
  }
  assert.ok(compared > N / 3 && withRecords > 1000, `${compared} compared, ${withRecords} sets`);
  assert.ok(leanTaken > 1000 && leanTaken < compared, `${leanTaken} taken by the lean walk`);
});
