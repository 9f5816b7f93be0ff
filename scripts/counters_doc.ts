/**
 * The README's counter reference, derived from the source: one row per key of the `record
 * metrics` line (`statsFields` in `src/flow_aggregator.ts`, the same counters `/metrics`
 * serves), its meaning the first sentence of the JSDoc of the field it comes from. The meaning of
 * a counter is written once, in its stats interface; this script only reads it (`deno doc
 * --json` over `src/`) and walks the interfaces the way `statsFields` flattens the snapshot:
 *
 * - `FlowAggregatorStats`' own counters (and the config watcher's), unprefixed;
 * - each nested group under its name (`shards.*`, `api.*`, `process.*`, `podStore.*`, …);
 * - `threads.*`: `ThreadMemory`, summed over the threads;
 * - the line's derived keys (`MetricsLineDerived`: `recordsAggregated`, `rejected`);
 * - the core's under `aggregation.*`; the collector's unprefixed, its UDP receive path's as
 *   `udp<Key>`;
 * - each sink's: the worker proxy's counters as `<section>.*` and the sink's own, from its
 *   worker, as `<section>.sink.*` (the section is the sink's configuration key).
 *
 * A counter kept as counts by reason is a sum on the line. Keys present only in some
 * configurations (UDP, TLS, a cluster, sinks, shards) are listed all the same.
 *
 *   deno task counters-doc          # print the table
 *   deno task counters-doc --write  # rewrite the README between the counters markers
 *
 * @module
 */

import { join, relative } from "node:path";
import { fileURLToPath as fromFileUrl, pathToFileURL } from "node:url";
import { COMPONENTS } from "../src/components.ts";
import { LEDGER_KEYS } from "../src/exporters/worker_host.ts";

/** The README's markers around the table. */
export const BEGIN_MARKER = "<!-- counters:begin -->";
/** See {@linkcode BEGIN_MARKER}. */
export const END_MARKER = "<!-- counters:end -->";

/** One row of the table: a key as it appears on the line, and what it counts. */
export interface CounterRow {
  /** The key on the line (`aggregation.flowsCreated`, `<section>.dropped`, …). */
  readonly key: string;
  /** The first sentence of the field's JSDoc. */
  readonly meaning: string;
  /** Where the field is declared, `src/…:line`. */
  readonly source: string;
}

const ROOT = fromFileUrl(new URL("..", import.meta.url));
const SRC = join(ROOT, "src");

// Only the deno doc JSON's shapes this script reads.
interface TsType {
  repr?: string;
  kind: string;
  // deno-lint-ignore no-explicit-any
  value?: any;
}
interface Location {
  filename: string;
  line: number;
}
interface Property {
  name: string;
  jsDoc?: { doc?: string };
  location: Location;
  optional?: boolean;
  tsType?: TsType;
}
interface Declaration {
  kind: string;
  location: Location;
  // deno-lint-ignore no-explicit-any
  def: any;
}
interface DocSymbol {
  name: string;
  declarations: Declaration[];
}

/** A field of an interface, with where it is declared. */
interface Field {
  readonly name: string;
  readonly doc: string;
  readonly type: TsType | undefined;
  readonly location: Location;
}

/** `deno doc --json` of every module under `src/`, by module URL. */
async function docIndex(): Promise<Map<string, DocSymbol[]>> {
  const files: string[] = [];
  const walk = (dir: string): void => {
    for (const e of Deno.readDirSync(dir)) {
      const p = join(dir, e.name);
      if (e.isDirectory) walk(p);
      else if (e.name.endsWith(".ts") && !e.name.endsWith(".d.ts")) files.push(p);
    }
  };
  walk(SRC);
  files.sort();
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["doc", "--json", ...files],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!out.success) {
    throw new Error(`deno doc --json failed: ${new TextDecoder().decode(out.stderr)}`);
  }
  const json = JSON.parse(new TextDecoder().decode(out.stdout)) as {
    nodes: Record<string, { symbols: DocSymbol[] }>;
  };
  return new Map(Object.entries(json.nodes).map(([url, n]) => [url, n.symbols]));
}

/** Resolves type names to their declarations through the doc index. */
class Types {
  readonly #index: Map<string, DocSymbol[]>;
  constructor(index: Map<string, DocSymbol[]>) {
    this.#index = index;
  }

  /** The symbols module `url` declares or re-exports. */
  symbols(url: string): DocSymbol[] {
    return this.#index.get(url) ?? [];
  }

  /** The declaration of `name` as seen from module `from` (a re-export is followed). */
  declaration(from: string, name: string): Declaration {
    const found = this.#index.get(from)?.find((s) => s.name === name)?.declarations[0];
    if (found === undefined) throw new Error(`counters_doc: no ${name} in ${from}`);
    // A re-export of a module also documented here is a reference to its declaration.
    if (found.kind === "reference") {
      const target: Location = found.def.target;
      const original = this.#index.get(target.filename)?.flatMap((s) => s.declarations)
        .find((d) => d.location.line === target.line && d.kind !== "reference");
      if (original === undefined) throw new Error(`counters_doc: ${name}: no ${target.filename}`);
      return original;
    }
    return found;
  }

  /** The declaration a type reference written in module `from` names. */
  resolve(from: string, ref: TsType): Declaration {
    const v = ref.value;
    const res = v?.resolution;
    if (res?.kind === "import") {
      return this.declaration(new URL(res.specifier, from).href, res.name ?? v.typeName);
    }
    return this.declaration(from, v.typeName);
  }

  /**
   * Every field of the object type `t` written in module `from`, inherited ones first (an
   * interface's own declaration of a field wins). Follows interfaces, `Partial`/`Readonly`
   * wrappers, and `ReturnType<C["method"]>`.
   */
  fields(from: string, t: TsType): Field[] {
    if (t.kind === "typeRef") {
      const name: string = t.value.typeName;
      const params: TsType[] = t.value.typeParams ?? [];
      if ((name === "Partial" || name === "Readonly") && params.length === 1) {
        return this.fields(from, params[0]);
      }
      if (name === "ReturnType" && params[0]?.kind === "indexedAccess") {
        const { objType, indexType } = params[0].value;
        const cls = this.resolve(from, objType);
        const method = cls.def.methods.find((m: { name: string }) =>
          m.name === indexType.value.string
        );
        return this.fields(cls.location.filename, method.functionDef.returnType);
      }
      const decl = this.resolve(from, t);
      if (decl.kind === "interface") return this.interfaceFields(decl);
      if (decl.kind === "typeAlias") return this.fields(decl.location.filename, decl.def.tsType);
    }
    throw new Error(`counters_doc: cannot list the fields of ${t.repr ?? t.kind} (${from})`);
  }

  /** The fields of an interface declaration, with those of what it extends. */
  interfaceFields(decl: Declaration): Field[] {
    const byName = new Map<string, Field>();
    for (const base of decl.def.extends ?? []) {
      for (const f of this.fields(decl.location.filename, base)) byName.set(f.name, f);
    }
    for (const p of decl.def.properties as Property[]) {
      byName.delete(p.name); // own declaration last, in its own place
      byName.set(p.name, {
        name: p.name,
        doc: p.jsDoc?.doc ?? "",
        type: p.tsType,
        location: p.location,
      });
    }
    return [...byName.values()];
  }

  /**
   * How `counterFields` takes a field of this type: `"value"` (number, bigint, boolean),
   * `"sum"` (a map of numbers: counts by reason), or undefined (strings, nested objects).
   */
  counterKind(from: string, t: TsType | undefined): "value" | "sum" | undefined {
    if (t === undefined) return undefined;
    if (t.kind === "keyword") {
      return ["number", "bigint", "boolean"].includes(t.value) ? "value" : undefined;
    }
    if (t.kind === "union") {
      const kinds = (t.value as TsType[])
        .filter((m) => !(m.kind === "keyword" && m.value === "undefined"))
        .map((m) => this.counterKind(from, m));
      return kinds.length > 0 && kinds.every((k) => k === "value") ? "value" : undefined;
    }
    if (t.kind === "typeRef") {
      const params: TsType[] = t.value.typeParams ?? [];
      if (t.value.typeName === "Readonly" && params.length === 1) {
        return this.counterKind(from, params[0]);
      }
      if (t.value.typeName === "Record" && params.length === 2) {
        return this.counterKind(from, params[1]) === "value" ? "sum" : undefined;
      }
      if (["Partial", "ReturnType"].includes(t.value.typeName)) return undefined;
      const decl = this.resolve(from, t);
      if (decl.kind === "typeAlias") {
        return this.counterKind(decl.location.filename, decl.def.tsType);
      }
    }
    return undefined;
  }
}

/** Meanings longer than this are cut at their first colon or semicolon. */
const LONG_MEANING = 160;

/**
 * The first sentence of a JSDoc text, on one line, inline tags reduced to their text; a long one
 * up to its first colon or semicolon (the details that follow are in the source).
 */
export function firstSentence(doc: string): string {
  const sentence = cutAt(doc, ".");
  if (sentence.length <= LONG_MEANING) return sentence;
  const head = cutAt(sentence, ":;");
  return head === sentence ? sentence : `${head.slice(0, -1)}: …`;
}

/** `doc` up to the first of `marks` that ends a clause, outside parentheses and code. */
function cutAt(doc: string, marks: string): string {
  const text = doc
    .replace(
      /\{@link(?:code|plain)?\s+([^}\s|]+)(?:[\s|]+([^}]*))?\}/g,
      (_m, a, b) => `\`${b?.trim() || a}\``,
    )
    .replace(/\s+/g, " ")
    .trim();
  // A clause ends at a mark and a space before a capital, a digit or a backtick (a sentence), or
  // any text (a colon or semicolon).
  let depth = 0;
  let code = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === "`") code = !code;
    else if (!code && c === "(") depth++;
    else if (!code && c === ")") depth = Math.max(0, depth - 1);
    else if (
      !code && depth === 0 && marks.includes(c) && text[i + 1] === " " &&
      (c !== "." || /[A-Z0-9`]/.test(text[i + 2] ?? ""))
    ) {
      return text.slice(0, i + 1);
    }
  }
  return text;
}

/** Rows for each counter field of `t` (module `from`), keys built by `key`. */
function groupRows(
  types: Types,
  from: string,
  fields: Field[],
  key: (name: string) => string,
  opts: { sumMaps?: boolean; skip?: readonly string[] } = {},
): CounterRow[] {
  const rows: CounterRow[] = [];
  for (const f of fields) {
    if (opts.skip?.includes(f.name)) continue;
    const kind = types.counterKind(f.location.filename ?? from, f.type);
    if (kind === undefined || (kind === "sum" && opts.sumMaps === false)) continue;
    const doc = f.doc.trim();
    if (doc === "") {
      const where = relative(ROOT, fromFileUrl(f.location.filename));
      throw new Error(`counters_doc: ${key(f.name)} (${where}:${f.location.line}) has no JSDoc`);
    }
    const meaning = firstSentence(doc) + (kind === "sum" ? " The line has their sum." : "");
    rows.push({
      key: key(f.name),
      meaning,
      source: `${relative(ROOT, fromFileUrl(f.location.filename))}:${f.location.line}`,
    });
  }
  return rows;
}

/** The fields of the interface `name` declared in `src/<file>`. */
function fieldsOf(types: Types, file: string, name: string): Field[] {
  return types.interfaceFields(types.declaration(pathToFileURL(join(SRC, file)).href, name));
}

/**
 * The sink's own stats interface in a component's folder: the one of `exporter.ts` that extends
 * `ExporterStats` (what its worker reports besides the ledger keys).
 */
function sinkStatsFields(types: Types, folder: string): Field[] {
  const url = pathToFileURL(join(folder, "exporter.ts")).href;
  const decl = types.declaration(url, sinkStatsName(types, url));
  return types.interfaceFields(decl);
}

function sinkStatsName(types: Types, url: string): string {
  const found = types.symbols(url).find((s) =>
    s.declarations.some((d) =>
      d.kind === "interface" &&
      (d.def.extends ?? []).some((e: TsType) => e.value?.typeName === "ExporterStats")
    )
  );
  if (found === undefined) throw new Error(`counters_doc: no sink stats interface in ${url}`);
  return found.name;
}

/**
 * Every key of the `record metrics` line with its meaning, in the line's order (the order of
 * `statsFields`).
 */
export async function counterRows(): Promise<CounterRow[]> {
  const index = await docIndex();
  const types = new Types(index);
  const faUrl = pathToFileURL(join(SRC, "flow_aggregator.ts")).href;
  const top = fieldsOf(types, "flow_aggregator.ts", "FlowAggregatorStats");
  const field = (name: string): Field => {
    const f = top.find((x) => x.name === name);
    if (f === undefined) throw new Error(`counters_doc: FlowAggregatorStats has no ${name}`);
    return f;
  };
  const rows: CounterRow[] = [];
  // The process's own: every counter field of the snapshot itself (nested groups follow).
  rows.push(...groupRows(types, faUrl, top, (k) => k));
  // Nested groups under their name, in statsFields' order; the special ones below.
  const special = ["aggregation", "collector", "exporters", "threads"];
  for (const f of top) {
    if (special.includes(f.name) || types.counterKind(faUrl, f.type) !== undefined) continue;
    const from = f.location.filename;
    rows.push(...groupRows(types, from, types.fields(from, f.type!), (k) => `${f.name}.${k}`));
  }
  // Every thread's V8 memory, summed.
  const threads = field("threads");
  const threadMemory: TsType = threads.type!.value.typeParams[1];
  rows.push(
    ...groupRows(
      types,
      threads.location.filename,
      types.fields(threads.location.filename, threadMemory),
      (k) => `threads.${k}`,
    ),
  );
  // Keys the line derives from the snapshot.
  rows.push(
    ...groupRows(
      types,
      faUrl,
      fieldsOf(types, "flow_aggregator.ts", "MetricsLineDerived"),
      (k) => k,
    ),
  );
  const agg = field("aggregation");
  rows.push(
    ...groupRows(
      types,
      agg.location.filename,
      types.fields(agg.location.filename, agg.type!),
      (k) => `aggregation.${k}`,
    ),
  );
  // The collector's, unprefixed; its UDP receive path's as udp<Key>.
  const coll = field("collector");
  const collectorFields = types.fields(coll.location.filename, coll.type!);
  rows.push(
    ...groupRows(types, coll.location.filename, collectorFields, (k) => k, {
      skip: ["exporters", "udpReceiver"],
    }),
  );
  const udp = collectorFields.find((f) => f.name === "udpReceiver")!;
  rows.push(
    ...groupRows(
      types,
      udp.location.filename,
      types.fields(udp.location.filename, udp.type!),
      (k) => `udp${k[0].toUpperCase()}${k.slice(1)}`,
      { skip: ["kernelDropsKnown"] },
    ),
  );
  // Each sink: the worker proxy's counters, then every sink's own from its worker.
  rows.push(
    ...groupRows(
      types,
      faUrl,
      fieldsOf(types, "exporters/worker_exporter.ts", "WorkerExporterStats"),
      (k) => `<section>.${k}`,
      { skip: ["sink"] },
    ),
  );
  for (const c of COMPONENTS) {
    const folder = fromFileUrl(new URL(".", c.workerModule));
    rows.push(
      ...groupRows(
        types,
        faUrl,
        sinkStatsFields(types, folder),
        (k) => `${c.section.key}.sink.${k}`,
        { sumMaps: false, skip: LEDGER_KEYS },
      ),
    );
  }
  const seen = new Set<string>();
  for (const r of rows) {
    if (seen.has(r.key)) throw new Error(`counters_doc: ${r.key} derived twice`);
    seen.add(r.key);
  }
  return rows;
}

/** The Markdown table of `rows`. */
export function renderTable(rows: readonly CounterRow[]): string {
  const cell = (s: string): string => s.replaceAll("|", "\\|");
  return [
    "| counter | meaning |",
    "| --- | --- |",
    ...rows.map((r) => `| \`${cell(r.key)}\` | ${cell(r.meaning)} |`),
  ].join("\n");
}

/** The text between the README's markers, or undefined without them. */
export function readmeTable(readme: string): string | undefined {
  const begin = readme.indexOf(BEGIN_MARKER);
  const end = readme.indexOf(END_MARKER);
  if (begin < 0 || end < begin) return undefined;
  return readme.slice(begin + BEGIN_MARKER.length, end).trim();
}

/** `readme` with `table` between its markers (which must be there). */
export function withTable(readme: string, table: string): string {
  const begin = readme.indexOf(BEGIN_MARKER);
  const end = readme.indexOf(END_MARKER);
  if (begin < 0 || end < begin) throw new Error(`README.md: no ${BEGIN_MARKER} … ${END_MARKER}`);
  return `${readme.slice(0, begin + BEGIN_MARKER.length)}\n\n${table}\n\n${readme.slice(end)}`;
}

/**
 * Whether the table has a row for the line's `key`: its own, or its sink row with the section
 * written `<section>`.
 */
export function rowFor<R extends { key: string }>(rows: readonly R[], key: string): R | undefined {
  const exact = rows.find((r) => r.key === key);
  if (exact !== undefined) return exact;
  for (const c of COMPONENTS) {
    const prefix = `${c.section.key}.`;
    if (key.startsWith(prefix)) {
      return rows.find((r) => r.key === `<section>.${key.slice(prefix.length)}`);
    }
  }
  return undefined;
}

/** The README path. */
export const README: string = join(ROOT, "README.md");

/**
 * `readme` with `table` between its markers, formatted by `deno fmt` (the check task compares
 * formatted text, and fmt aligns the table's columns).
 */
export async function formattedReadme(readme: string, table: string): Promise<string> {
  const tmp = await Deno.makeTempFile({ suffix: ".md" });
  try {
    await Deno.writeTextFile(tmp, withTable(readme, table));
    const fmt = await new Deno.Command(Deno.execPath(), {
      args: ["fmt", "--config", join(ROOT, "deno.json"), tmp],
      stdout: "null",
      stderr: "piped",
    }).output();
    if (!fmt.success) {
      throw new Error(`deno fmt failed on the README: ${new TextDecoder().decode(fmt.stderr)}`);
    }
    return await Deno.readTextFile(tmp);
  } finally {
    await Deno.remove(tmp);
  }
}

/** The rows of a Markdown counters table (as written, or as `deno fmt` aligned it). */
export function parseTable(table: string): { key: string; meaning: string }[] {
  return table.split("\n").slice(2).filter((l) => l.startsWith("|")).map((l) => {
    const cells = l.slice(1, -1).split(/(?<!\\)\|/).map((c) => c.trim().replaceAll("\\|", "|"));
    return { key: cells[0].replace(/^`|`$/g, ""), meaning: cells[1] };
  });
}

if (import.meta.main) {
  const table = renderTable(await counterRows());
  if (Deno.args.includes("--write")) {
    const readme = await Deno.readTextFile(README);
    const next = await formattedReadme(readme, table);
    if (next !== readme) await Deno.writeTextFile(README, next);
    console.error(`README.md: counters table ${next === readme ? "unchanged" : "written"}`);
  } else {
    console.log(table);
  }
}
