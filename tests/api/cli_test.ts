/**
 * The CLI (src/api/cli.ts) against fake API servers: its flag parsing (as cobra's, antctl's),
 * its bounds (time, answer size) and its errors for answers that are not the API's. The real
 * process's answers are checked in tests/integration/api_test.ts.
 */

import assert from "node:assert/strict";
import { type CliIo, commandFirst, MAX_ANSWER_BYTES, runCli } from "../../src/api/cli.ts";
import { RECORD_LIMIT_HEADER } from "../../src/api/handler.ts";
import { generateApiCertificate } from "../../src/pki/mod.ts";

interface Ran {
  code: number;
  out: string;
  err: string;
}

/** A fake API: `answer` gets each request; its token file and CA written in a temp dir. */
async function withFake(
  answer: (req: Request) => Response | Promise<Response>,
  body: (
    cli: (...args: string[]) => Promise<Ran>,
    seen: string[],
    ctx: { dir: string; port: number },
  ) => Promise<void>,
  maxAnswerBytes = MAX_ANSWER_BYTES,
): Promise<void> {
  const cert = await generateApiCertificate();
  const dir = await Deno.makeTempDir({ prefix: "fa-cli-" });
  await Deno.writeTextFile(`${dir}/token`, "tok\n");
  await Deno.writeTextFile(`${dir}/api-ca.crt`, cert.caPem);
  const seen: string[] = [];
  const ac = new AbortController();
  const server = Deno.serve({
    hostname: "127.0.0.1",
    port: 0,
    cert: cert.chainPem,
    key: cert.keyPem,
    signal: ac.signal,
    onListen: () => {},
  }, (req) => {
    const u = new URL(req.url);
    seen.push(`${u.pathname}${u.search} ${req.headers.get("authorization")}`);
    return answer(req);
  });
  const port = server.addr.port;
  const cli = async (...args: string[]): Promise<Ran> => {
    let out = "";
    let err = "";
    const io: CliIo = { out: (t) => out += t + "\n", err: (t) => err += t + "\n" };
    const code = await runCli(
      [...args, "--server", `https://127.0.0.1:${port}`, "--token-file", `${dir}/token`],
      io,
      maxAnswerBytes,
    );
    return { code, out, err };
  };
  try {
    await body(cli, seen, { dir, port });
  } finally {
    ac.abort();
    await server.finished;
    await Deno.remove(dir, { recursive: true });
  }
}

const METRICS = JSON.stringify({ numRecordsReceived: 5, numFlows: 2 });
const metrics = () => new Response(METRICS);

Deno.test("cli: unknown flags, flags of another command and extra arguments are usage errors", async () => {
  await withFake(metrics, async (cli, seen) => {
    for (
      const [args, want] of [
        [["get", "flowrecords", "--srcipp", "10.0.0.1"], /^unknown flag: --srcipp\n/],
        [["get", "flowrecords", "--SRCIP", "10.0.0.1"], /^unknown flag: --SRCIP\n/],
        [["get", "recordmetrics", "--proto", "6"], /^get recordmetrics: unknown flag: --proto$/m],
        [["log-level", "5", "7"], /^log-level: unexpected argument "7"/],
        [["version", "extra"], /^version: unexpected argument "extra"/],
        [["get", "flows"], /^unknown command "get flows"/],
        [["get", "flowrecords", "-x"], /^unknown shorthand flag: -x/],
      ] as const
    ) {
      // The common flags come after (the helper adds them).
      const r = await cli(...args);
      assert.equal(r.code, 1, args.join(" "));
      assert.match(r.err, want, args.join(" "));
      assert.equal(r.out, "");
    }
    assert.deepEqual(seen, [], "nothing asked");
  });
  let err = "";
  const code = await runCli(["get", "flowrecords", "--srcip"], {
    out: () => {},
    err: (t) => err = t,
  });
  assert.equal(code, 1);
  assert.match(err, /^flag needs an argument: --srcip\n/);
});

Deno.test("cli: -ojson, -o=json and --output json, --help anywhere and -- as cobra parses them", async () => {
  await withFake(metrics, async (cli, seen) => {
    for (const o of [["-ojson"], ["-o=json"], ["--output", "json"], ["-o", "json"]]) {
      const r = await cli("get", "recordmetrics", ...o);
      assert.equal(r.code, 0, r.err);
      assert.deepEqual(JSON.parse(r.out), JSON.parse(METRICS), o.join(" "));
    }
    for (
      const args of [["get", "flowrecords", "--help"], ["log-level", "-h"], ["version", "--help"]]
    ) {
      const r = await cli(...args);
      assert.equal(r.code, 0, args.join(" "));
      assert.match(r.out, /^Usage \(as antctl/);
    }
    // After `--` a word is an argument, even one that looks like a flag.
    const r = await cli("log-level", "--", "--3");
    assert.equal(r.code, 1);
    assert.equal(seen.length, 4, "the four -o forms asked; --help and usage errors did not");
  });
});

Deno.test("cli: --limit is passed on, and an answer as long as the API's limit says more may be held", async () => {
  const rows = (n: number) =>
    JSON.stringify(Array.from({ length: n }, (_, i) => ({ sourceIPv4Address: `10.0.0.${i}` })));
  await withFake((req) => {
    const limit = Number(new URL(req.url).searchParams.get("limit") ?? "3");
    return new Response(rows(Math.min(limit, 3)), {
      headers: { [RECORD_LIMIT_HEADER]: String(limit) },
    });
  }, async (cli, seen) => {
    const all = await cli("get", "flowrecords", "-o", "json");
    assert.equal(JSON.parse(all.out).length, 3);
    assert.match(all.err, /^note: 3 records shown, the most the API returns for one query/);
    const two = await cli("get", "flowrecords", "--limit", "2", "--proto", "6", "-o", "json");
    assert.equal(JSON.parse(two.out).length, 2);
    assert.equal(two.err, "", "as many as --limit asked for: complete as asked");
    const under = await cli("get", "flowrecords", "--limit", "5");
    assert.equal(under.code, 0);
    assert.equal(under.out.split("\n").filter((l) => l !== "").length, 4, "header and 3 rows");
    assert.equal(under.err, "", "fewer than the limit: complete");
    assert.match(seen[1], /^\/flowrecords\?proto=6&limit=2 Bearer tok$/);
  });
});

Deno.test("cli: a server that never answers is given up on at --timeout", async () => {
  let release = () => {};
  const never = new Promise<Response>((resolve) => release = () => resolve(new Response("0")));
  await withFake(() => never, async (cli) => {
    const t0 = performance.now();
    const r = await cli("log-level", "--timeout", "300ms");
    const ms = performance.now() - t0;
    assert.equal(r.code, 1);
    assert.match(r.err, /did not answer within 300ms/);
    assert.ok(ms < 5_000, `${ms} ms`);
    const bad = await cli("version", "--timeout", "soon");
    assert.equal(bad.code, 1);
    assert.match(bad.err, /^--timeout "soon": /);
    release();
  });
});

Deno.test("cli: answers that are not the API's are errors naming what came, not crashes", async () => {
  const bodies: Record<string, string> = {
    "/recordmetrics": "null",
    "/flowrecords": "42",
    "/version": "42",
    "/loglevel": "<html>not json</html>",
  };
  await withFake((req) => new Response(bodies[new URL(req.url).pathname]), async (cli) => {
    for (
      const [args, want] of [
        [
          ["get", "recordmetrics"],
          /^the API answered JSON, not get recordmetrics's answer: "null"/,
        ],
        [["get", "flowrecords"], /^the API answered JSON, not get flowrecords's answer: "42"/],
        [["version"], /^the API answered JSON, not version's answer: "42"/],
        [["log-level"], /^the API answered something other than JSON, not log-level's answer/],
      ] as const
    ) {
      const r = await cli(...args);
      assert.equal(r.code, 1, args.join(" "));
      assert.match(r.err, want);
      assert.equal(r.out, "");
    }
  });
  // An answer past the bound is not read into memory.
  await withFake(() => new Response("[" + "0,".repeat(100_000) + "0]"), async (cli) => {
    const r = await cli("get", "flowrecords");
    assert.equal(r.code, 1);
    assert.match(r.err, /^the API's answer is larger than 65536 bytes: not read/);
  }, 65_536);
});

Deno.test("cli: --server with a path or a trailing slash, version's commit and tree state", async () => {
  await withFake(
    () =>
      new Response(
        JSON.stringify({ gitVersion: "1.13.0", gitCommit: "abc", gitTreeState: "clean" }),
      ),
    async (cli, seen, { port, dir }) => {
      const r = await cli("version");
      assert.equal(r.out, "flowAggregatorVersion: 1.13.0-abc.clean\n");
      // The helper's --server comes last and wins; these are given explicitly.
      const own = async (server: string) => {
        let out = "";
        let err = "";
        const code = await runCli(["version", "--server", server, "--token-file", `${dir}/token`], {
          out: (t) => out += t,
          err: (t) => err += t,
        });
        return { code, out, err };
      };
      assert.equal((await own(`https://127.0.0.1:${port}/`)).code, 0);
      assert.equal((await own(`https://127.0.0.1:${port}/base//`)).code, 0);
      assert.deepEqual(seen.map((s) => s.split(" ")[0]), ["/version", "/version", "/base/version"]);
      const q = await own(`https://127.0.0.1:${port}?x=1`);
      assert.equal(q.code, 1);
      assert.match(q.err, /give the scheme, host, port and path only/);
      const http = await own(`http://127.0.0.1:${port}`);
      assert.match(http.err, /the API is served over https:\/\//);
    },
  );
});

Deno.test("cli: a missing or empty token, a missing CA and a server down or with another CA say which", async () => {
  await withFake(metrics, async (cli, seen, { dir, port }) => {
    const other = await generateApiCertificate();
    await Deno.writeTextFile(`${dir}/api-ca.crt`, other.caPem);
    const wrongCa = await cli("version");
    assert.equal(wrongCa.code, 1);
    assert.match(
      wrongCa.err,
      /^cannot reach the flow aggregator API at https:\/\/127\.0\.0\.1:\d+ \(certificate checked against [^)]*api-ca\.crt\): fetch failed: .*certificate/i,
    );
    await Deno.remove(`${dir}/api-ca.crt`);
    const noCa = await cli("version");
    assert.match(noCa.err, /^cannot read the API's CA certificate [^ ]*api-ca\.crt: /);
    await Deno.writeTextFile(`${dir}/token`, " \n");
    const empty = await cli("version");
    assert.match(empty.err, /^the API token file [^ ]*token is empty/);
    await Deno.remove(`${dir}/token`);
    const none = await cli("version");
    assert.match(none.err, /^cannot read the API token file [^ ]*token: /);
    assert.deepEqual(seen, []);
    // A port nobody listens on.
    const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const closed = l.addr.port;
    l.close();
    await Deno.writeTextFile(`${dir}/token`, "tok");
    await Deno.writeTextFile(`${dir}/api-ca.crt`, other.caPem);
    const down = await runCli(
      ["version", "--server", `https://127.0.0.1:${closed}`, "--token-file", `${dir}/token`],
      { out: () => {}, err: (t) => assert.match(t, /Connection refused/) },
    );
    assert.equal(down, 1);
    assert.notEqual(closed, port);
  });
});

Deno.test("cli: what the API relays reaches the terminal without control characters; an error body is cut", async () => {
  const evil = "\x1b]0;pwned\x07\x1b[2J\x1b[31m";
  await withFake((req) => {
    const path = new URL(req.url).pathname;
    if (path === "/flowrecords") {
      return new Response(
        JSON.stringify([{ sourceIPv4Address: "10.0.0.1", sourcePodName: `p${evil}` }]),
      );
    }
    if (path === "/version") return new Response(JSON.stringify({ gitVersion: `1\n${evil}` }));
    return new Response(`denied ${evil}${"x".repeat(5000)}`, { status: 403 });
  }, async (cli) => {
    const table = await cli("get", "flowrecords");
    assert.equal(table.code, 0);
    assert.match(table.out, /p\\x1b\]0;pwned\\x07\\x1b\[2J\\x1b\[31m/);
    const version = await cli("version");
    assert.equal(version.out, "flowAggregatorVersion: 1\\x0a\\x1b]0;pwned\\x07\\x1b[2J\\x1b[31m\n");
    const denied = await cli("get", "recordmetrics");
    assert.equal(denied.code, 1);
    assert.match(denied.err, /^403: denied \\x1b\]0;pwned/);
    assert.match(denied.err, /x… \(2978 more characters\)\n$/);
    for (const r of [table, version, denied]) {
      // deno-lint-ignore no-control-regex
      assert.doesNotMatch(r.out + r.err.slice(0, -1), /[\x00-\x09\x0b-\x1f\x7f-\x9f]/);
    }
  });
});

Deno.test("cli: a redirect is not followed; recordmetrics of the wrong types is an error", async () => {
  await withFake((req) => {
    if (new URL(req.url).pathname === "/version") {
      return new Response("", { status: 302, headers: { location: "http://127.0.0.1:1/version" } });
    }
    return new Response(JSON.stringify({ numFlows: "abc", withLogExporter: true }));
  }, async (cli, seen) => {
    const r = await cli("version");
    assert.equal(r.code, 1);
    assert.match(
      r.err,
      /answered a redirect \(302 to http:\/\/127\.0\.0\.1:1\/version\): not followed/,
    );
    const m = await cli("get", "recordmetrics");
    assert.equal(m.code, 1);
    assert.match(m.err, /^the API answered numFlows "abc" in JSON, not get recordmetrics's answer/);
    assert.equal(seen.length, 2);
  });
});

Deno.test("cli: antctl's shorthands -s -t -v -k, boolean values, no arguments, an overlong filter", async () => {
  await withFake(metrics, async (cli, seen, { dir, port }) => {
    let out = "";
    let err = "";
    const io: CliIo = { out: (t) => out += t, err: (t) => err += t };
    const code = await runCli([
      "get",
      "recordmetrics",
      "-s",
      `https://127.0.0.1:${port}`,
      "-t",
      "5s",
      "-v",
      "-k",
      "/nonexistent/kubeconfig",
      "--token-file",
      `${dir}/token`,
      "-ojson",
    ], io);
    assert.equal(code, 0, err);
    assert.deepEqual(JSON.parse(out), JSON.parse(METRICS));
    // --help=false runs the command, as cobra.
    const r = await cli("get", "recordmetrics", "--help=false", "-o", "json");
    assert.equal(r.code, 0);
    assert.deepEqual(JSON.parse(r.out), JSON.parse(METRICS));
    const bad = await cli("version", "--verbose=maybe");
    assert.equal(bad.code, 1);
    assert.match(bad.err, /^invalid argument "maybe" for --verbose=maybe/);
    const long = await cli("get", "flowrecords", "--srcip", "1".repeat(70_000));
    assert.equal(long.code, 1);
    assert.match(long.err, /^--srcip: 70000 characters, at most 256/);
    assert.equal(seen.length, 2);
  });
  let out = "";
  assert.equal(await runCli([], { out: (t) => out = t, err: () => {} }), 0);
  assert.match(out, /^Usage \(as antctl/);
});

Deno.test("cli: a token file that is a device or a FIFO is refused, not read (no memory, no hang)", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-cli-token-" });
  try {
    await new Deno.Command("mkfifo", { args: [`${dir}/fifo`] }).output();
    for (const [file, kind] of [["/dev/zero", "character device"], [`${dir}/fifo`, "FIFO"]]) {
      let err = "";
      const code = await runCli(["version", "--token-file", file, "--timeout", "2s"], {
        out: () => {},
        err: (t) => err = t,
      });
      assert.equal(code, 1);
      assert.match(
        err,
        new RegExp(`^cannot read the API token file ${file}: not a regular file \\(${kind}`),
      );
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("cli: commandFirst moves the global flags written before the command after it", () => {
  assert.deepEqual(commandFirst(["-v", "get", "recordmetrics"]), ["get", "recordmetrics", "-v"]);
  assert.deepEqual(
    commandFirst(["--server", "https://x:1", "-t5s", "-s=https://y:2", "version", "-ojson"]),
    ["version", "-ojson", "--server", "https://x:1", "-t5s", "-s=https://y:2"],
  );
  assert.deepEqual(commandFirst(["-k", "kc", "set", "flow-aggregator", "a=b"]), [
    "set",
    "flow-aggregator",
    "a=b",
    "-k",
    "kc",
  ]);
  // An unknown flag or `--` stops it: left where it is (the caller says what is wrong).
  assert.deepEqual(commandFirst(["--config", "/x"]), ["--config", "/x"]);
  assert.deepEqual(commandFirst(["-v", "--", "get"]), ["--", "get", "-v"]);
  assert.deepEqual(commandFirst([]), []);
});

Deno.test("cli: flowrecords items that are not objects are an error; a bidi override is escaped; --limit asked is no truncation", async () => {
  for (const body of ["[null]", "[[1,2]]", '["x"]']) {
    await withFake(() => new Response(body), async (cli) => {
      const r = await cli("get", "flowrecords");
      assert.equal(r.code, 1, body);
      assert.match(r.err, /^the API answered JSON, not get flowrecords's answer/);
    });
  }
  await withFake(
    () =>
      new Response(JSON.stringify([{ sourcePodName: "a\u202eb\u200bc" }]), {
        headers: { [RECORD_LIMIT_HEADER]: "1" },
      }),
    async (cli) => {
      const r = await cli("get", "flowrecords", "--limit", "1");
      assert.equal(r.code, 0);
      assert.match(r.out, /a\\u\{202e\}b\\u\{200b\}c/);
      assert.equal(r.err, "", "as many as --limit asked for: no note");
      const over = await cli("get", "flowrecords", "--limit", "20000");
      assert.match(over.err, /^note: 1 records shown/, "more asked than the API's limit");
    },
  );
});
