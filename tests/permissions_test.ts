import assert from "node:assert/strict";
import { parseConfig } from "../src/components.ts";
import { LIBC_PATHS, libcPath } from "../src/collector/udp_fast_ffi.ts";
import {
  missingFlags,
  permissionFlags,
  PROCESS_ENV,
  processPermissions,
  shellWord,
  sinkPermissionTable,
} from "../src/permissions.ts";
import { PERMISSIONS, runDeno } from "./_helpers/process.ts";
import { KLOG_DEFAULTS, KLOG_FILE_ENV, klogFileDir } from "../src/log/mod.ts";
import { addressProblem, permissionEntryProblem } from "../src/permission_entry.ts";

const SRC = new URL("../src", import.meta.url).pathname;
/** The API's default address and the directory of its loopback token (every process has both). */
const API = "[::]:10348";
const TOKEN_DIR = "/var/run/antrea/apiserver";

function cfg(text: string) {
  return parseConfig(text, { tmpDir: "/tmp" });
}

/** The permissions of a one-shard process (the shards' module read is tested on its own). */
function perms(
  config: Parameters<typeof processPermissions>[0],
  inputs: Parameters<typeof processPermissions>[1] = {},
): ReturnType<typeof processPermissions> {
  return processPermissions(config, { workers: 1, ...inputs });
}

Deno.test("permissions: the collector port, each sink's own permissions, the config directory", () => {
  const p = perms(
    cfg(`aggregatorTransportProtocol: TCP
flowCollector:
  enable: true
  address: "[fd00::5]:4740:udp"
flowLogger:
  enable: true
  path: /var/log/fa/flows.log
`),
    { configPath: "/etc/flow-aggregator/flow-aggregator.conf", listen: "0.0.0.0:4739" },
  );
  assert.deepEqual(p, {
    // Over UDP also the local socket, on an ephemeral port.
    net: ["0.0.0.0:4739", "[::]:0", API, "[fd00::5]:4740"],
    read: ["/etc/flow-aggregator", SRC, "/var/log/fa"].sort(),
    write: ["/var/log/fa", TOKEN_DIR],
    env: [...PROCESS_ENV].sort(),
    ffi: false,
  });
});

Deno.test("permissions: --allow-ffi only for the UDP fast path", () => {
  const udp = cfg("aggregatorTransportProtocol: UDP\nflowLogger:\n  enable: true\n  path: '-'\n");
  // Scoped to the C library found here (a path string), never the bare flag on Linux.
  const ffi = perms(udp).ffi;
  if (Deno.build.os === "linux") {
    assert.equal(typeof ffi, "string");
    assert.ok(LIBC_PATHS.includes(ffi as string), String(ffi));
    assert.ok(permissionFlags(perms(udp)).includes(`--allow-ffi=${ffi}`));
  } else assert.equal(ffi, false);
  assert.equal(perms(udp, { udpReceiver: "socket" }).ffi, false);
  const tcp = cfg("aggregatorTransportProtocol: TCP\nflowLogger:\n  enable: true\n  path: '-'\n");
  assert.equal(perms(tcp).ffi, false);
  assert.ok(!permissionFlags(perms(tcp)).includes("--allow-ffi"));
});

Deno.test("permissions: UDP adds --allow-ffi and the worker modules, never /proc", () => {
  const udp = cfg("aggregatorTransportProtocol: UDP\nflowLogger:\n  enable: true\n  path: '-'\n");
  const linux = Deno.build.os === "linux";
  assert.deepEqual(perms(udp, { exportersInProcess: true }), {
    net: [API, "[::]:4739"],
    // The fast path's receive worker module; kernel drops and buffer sizes under /proc are not
    // asked for: Deno reads /proc only with --allow-all, whatever --allow-read lists.
    read: linux ? [SRC] : [],
    write: [TOKEN_DIR],
    env: [...PROCESS_ENV].sort(),
    ffi: linux ? libcPath() : false,
  });
  const socket = perms(udp, { exportersInProcess: true, udpReceiver: "socket" });
  assert.deepEqual(socket.read, []);
  assert.equal(socket.ffi, false);
});

Deno.test("permissions: a flow log on stdout writes nowhere; sinks in process read no worker modules", () => {
  const p = perms(
    cfg("aggregatorTransportProtocol: TCP\nflowLogger:\n  enable: true\n  path: '-'\n"),
    { exportersInProcess: true },
  );
  assert.deepEqual(p.write, [TOKEN_DIR]);
  assert.deepEqual(p.read, []);
  assert.deepEqual(permissionFlags(p), [
    `--allow-net=${API},[::]:4739`,
    `--allow-write=${TOKEN_DIR}`,
    `--allow-env=${[...PROCESS_ENV].sort().join(",")}`,
    "--unstable-net",
    "--unstable-worker-options",
    "--v8-flags=--max-semi-space-size=2",
  ]);
});

Deno.test("permissions: the ClickHouse sink reaches the mapped HTTP port and owns its spool", () => {
  const conf = `aggregatorTransportProtocol: TCP
clickHouse:
  enable: true
  databaseURL: tcp://ch.example:9000
  spool:
    dir: /var/spool/fa-ch
`;
  const p = perms(cfg(conf));
  // The native port 9000 maps to the HTTP port 8123.
  assert.ok(p.net.includes("ch.example:8123"), p.net.join(","));
  assert.ok(!p.net.includes("ch.example:9000"));
  assert.ok(p.write.includes("/var/spool/fa-ch"));
  assert.match(
    sinkPermissionTable(cfg(conf)),
    /\| clickhouse \(`clickHouse`\) \| `ch\.example:8123` \| `\/var\/spool\/fa-ch` \| `\/var\/spool\/fa-ch` \| `CH_USERNAME`, `CH_PASSWORD` \|/,
  );
});

Deno.test("permissions: the API's address and token directory follow its flags and apiPort", () => {
  const c = cfg("apiServer:\n  apiPort: 10400\nflowLogger:\n  enable: true\n  path: '-'\n");
  assert.ok(perms(c).net.includes("[::]:10400"));
  const p = perms(c, { apiListen: "127.0.0.1:0", apiTokenFile: "/run/fa/token" });
  assert.ok(p.net.includes("127.0.0.1:0") && !p.net.includes("[::]:10400"));
  assert.deepEqual(p.write, ["/run/fa"]);
});

Deno.test("permissions: klog's --log_dir is read (pruning) and written; host and user names read", () => {
  const config = cfg(
    "aggregatorTransportProtocol: TCP\nflowLogger:\n  enable: true\n  path: '-'\n",
  );
  const p = perms(config, {
    exportersInProcess: true,
    logDir: "/var/log/antrea/flow-aggregator",
  });
  assert.deepEqual(p.read, ["/var/log/antrea/flow-aggregator"]);
  assert.deepEqual(p.write, ["/var/log/antrea/flow-aggregator", TOKEN_DIR]);
  assert.deepEqual(p.env, [...PROCESS_ENV, ...KLOG_FILE_ENV].sort());
  // What `permissions` prints for the upstream Deployment's flags (logtostderr=false only).
  assert.equal(klogFileDir({ ...KLOG_DEFAULTS, logDir: "/var/log/x" }), undefined);
  assert.equal(
    klogFileDir({ ...KLOG_DEFAULTS, logtostderr: false, logDir: "/var/log/x" }),
    "/var/log/x",
  );
  // --log_file wins over --log_dir (klog's): its directory is the one used.
  assert.equal(
    klogFileDir({
      ...KLOG_DEFAULTS,
      logtostderr: false,
      logDir: "/var/log/x",
      logFile: "/var/log/one/fa.log",
    }),
    "/var/log/one",
  );
});

Deno.test("permissions: with Kubernetes, the API server and the service account; standalone, the state file", () => {
  const config = cfg(
    "aggregatorTransportProtocol: TCP\nflowLogger:\n  enable: true\n  path: '-'\n",
  );
  const inCluster = perms(config, {
    exportersInProcess: true,
    kube: {
      mode: "in-cluster",
      server: "https://10.96.0.1:443",
      source: "/var/run/secrets/kubernetes.io/serviceaccount",
    },
  });
  assert.deepEqual(inCluster.net, ["10.96.0.1:443", API, "[::]:4739"]);
  assert.deepEqual(inCluster.read, ["/var/run/secrets/kubernetes.io/serviceaccount"]);
  assert.deepEqual(inCluster.write, [TOKEN_DIR]);
  const v6 = perms(config, {
    exportersInProcess: true,
    kube: { mode: "kubeconfig", server: "https://[fd00::1]", source: "/home/u/kc" },
  });
  assert.deepEqual(v6.net, [API, "[::]:4739", "[fd00::1]:443"]);
  assert.deepEqual(v6.read, ["/home/u/kc"]);
  const standalone = perms(config, {
    exportersInProcess: true,
    stateFile: "/var/lib/fa/cluster-uuid",
  });
  // The state file and the one it is written through (renamed over it).
  const state = ["/var/lib/fa/cluster-uuid", "/var/lib/fa/cluster-uuid.tmp"];
  assert.deepEqual(standalone.read, state);
  assert.deepEqual(standalone.write, [...state, TOKEN_DIR]);
});

Deno.test("permissions: aggregation shards read their worker module; one shard does not", () => {
  const tcp = cfg("aggregatorTransportProtocol: TCP\nflowLogger:\n  enable: false\n");
  const src = new URL("../src", import.meta.url).pathname;
  assert.deepEqual(processPermissions(tcp, { workers: 1 }).read, []);
  assert.deepEqual(processPermissions(tcp, { workers: 2 }).read, [src]);
  // Unknown (the image, whose host decides the default): readable.
  assert.deepEqual(processPermissions(tcp).read, [src]);
});

const LIBC = libcPath() ?? LIBC_PATHS[0];

Deno.test({
  name: "permissions: missingFlags names what the process lacks, FFI of the C library included",
  // What a process started with part of the permissions holds.
  permissions: {
    net: ["127.0.0.1:4739"],
    read: ["/etc/flow-aggregator"],
    write: false,
    env: ["HOME"],
    ffi: false,
    sys: false,
  },
  fn() {
    const need = {
      net: ["127.0.0.1:4739", "collector.example:4739", "*.amazonaws.com:443"],
      read: ["/etc/flow-aggregator", "/var/log/antrea/flow-aggregator"],
      write: ["/var/log/antrea/flow-aggregator"],
      env: ["HOME", "CH_PASSWORD"],
      sys: true,
      ffi: LIBC,
    };
    assert.deepEqual(missingFlags(need), [
      "--allow-net=collector.example:4739",
      "--allow-net=*.amazonaws.com:443",
      "--allow-read=/var/log/antrea/flow-aggregator",
      "--allow-write=/var/log/antrea/flow-aggregator",
      "--allow-env=CH_PASSWORD",
      "--allow-sys",
      `--allow-ffi=${LIBC}`,
    ]);
    assert.deepEqual(
      missingFlags({ net: ["127.0.0.1:4739"], read: [], write: [], env: ["HOME"], ffi: false }),
      [],
    );
  },
});

/** A UDP process with the S3 sink: every kind of permission, FFI and a wildcard host included. */
const EVERY_KIND = perms(
  cfg("aggregatorTransportProtocol: UDP\ns3Uploader:\n  enable: true\n  bucketName: b\n"),
  { listen: "127.0.0.1:4739" },
);

Deno.test({
  name: "permissions: missingFlags is empty for a process granted what was computed for it",
  // The grants of its flags (Deno.test takes the lists; sys and ffi as the flags give them).
  permissions: {
    net: EVERY_KIND.net,
    read: EVERY_KIND.read,
    write: EVERY_KIND.write,
    env: EVERY_KIND.env,
    ffi: [LIBC],
    sys: true,
  },
  fn() {
    assert.equal(EVERY_KIND.ffi, LIBC);
    assert.ok(EVERY_KIND.net.includes("*.amazonaws.com:443"));
    assert.deepEqual(missingFlags(EVERY_KIND), []);
  },
});

Deno.test({
  name: "permissions: a process that may not stat the C library computes the --allow-ffi it was " +
    "granted (the launched process checks a reload with what the launcher computed)",
  permissions: { read: [SRC, Deno.cwd()], ffi: [LIBC], env: true },
  fn() {
    assert.equal(libcPath(), LIBC);
    const p = perms(cfg("aggregatorTransportProtocol: UDP\n"), { listen: "127.0.0.1:4739" });
    assert.equal(p.ffi, LIBC);
    assert.deepEqual(missingFlags({ ...p, net: [], read: [], write: [], env: [] }), []);
  },
});

Deno.test({
  name: "permissions: without read or FFI grants, no C library is known (bare --allow-ffi asked)",
  permissions: { read: [SRC, Deno.cwd()], ffi: false, env: true },
  fn() {
    assert.equal(libcPath(), undefined);
  },
});

Deno.test("permissions: the service account directory the process looks at is read, also standalone", () => {
  const sa = "/var/run/secrets/kubernetes.io/serviceaccount";
  // A Pod without a token (automountServiceAccountToken: false): standalone, yet the process
  // stats the token; granted, it sees it absent instead of refused.
  const p = perms(cfg(""), { serviceAccountLookup: sa, stateFile: "/state/cluster-uuid" });
  assert.ok(p.read.includes(sa), p.read.join(","));
  assert.ok(!perms(cfg("")).read.includes(sa));
});

Deno.test("permissions: a value Deno's permission lists cannot carry is refused, naming where it comes from", () => {
  const config = cfg("flowLogger:\n  enable: true\n  path: '-'\n");
  // A comma would split the entry into other grants (every port of 127.0.0.1 here).
  assert.throws(
    () => perms(config, { listen: "127.0.0.1,localhost:4739" }),
    /^Error: --listen: cannot grant --allow-net="127\.0\.0\.1,localhost:4739": it contains a comma/,
  );
  assert.throws(
    () => perms(config, { apiTokenFile: "/tmp/a,/token" }),
    /--api-token-file: cannot grant --allow-write="\/tmp\/a,": it contains a comma/,
  );
  // A bare `*` host: Deno refuses it (after the exec, with a raw error, before).
  assert.throws(
    () => perms(config, { kube: { mode: "kubeconfig", server: "https://*:6443", source: "/k" } }),
    /the Kubernetes API server: cannot grant --allow-net="\*:6443": Deno refuses it/,
  );
});

Deno.test("permissions: what a permission list entry may be", () => {
  assert.equal(permissionEntryProblem("net", "*.amazonaws.com:443"), undefined);
  assert.equal(permissionEntryProblem("net", "[::]:4739"), undefined);
  assert.equal(permissionEntryProblem("write", "/tmp/a b"), undefined);
  assert.match(permissionEntryProblem("net", "*:8123")!, /Deno refuses it \(invalid host/);
  assert.match(permissionEntryProblem("net", "a,b:1")!, /comma/);
  assert.match(permissionEntryProblem("read", "")!, /empty/);
  assert.match(permissionEntryProblem("env", "A,B")!, /comma/);
  assert.match(addressProblem("*.example.com:4739")!, /wildcard/);
  assert.equal(addressProblem("collector.example:4739"), undefined);
});

// `flowLogger.path: /dev/null` granted read and write on `/dev`, and rotation (as root, the
// image) would have renamed the device node to a backup and made a regular file in its place.
Deno.test("permissions: a flowLogger.path that is a device or a FIFO is refused", async () => {
  assert.throws(
    () => perms(cfg(`flowLogger:\n  enable: true\n  path: /dev/null\n`)),
    /flowLogger.path \/dev\/null is a character device, not a regular file: rotation would rename it \(to log nothing, set flowLogger.enable: false\)/,
  );
  const dir = await Deno.makeTempDir();
  try {
    const fifo = `${dir}/flows.log`;
    assert.ok((await new Deno.Command("mkfifo", { args: [fifo] }).output()).success);
    assert.throws(
      () => perms(cfg(`flowLogger:\n  enable: true\n  path: ${fifo}\n`)),
      /is a FIFO, not a regular file/,
    );
    // The standard output's names stay the stream they name.
    const out = perms(cfg(`flowLogger:\n  enable: true\n  path: /dev/stdout\n`));
    assert.ok(!out.write.includes("/dev"), out.write.join(","));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

// `flowLogger.path: /tmp` (an existing directory, no trailing slash) granted read and write on
// `/`, its "directory", and the sink could not open it as a file anyway.
Deno.test("permissions: a flowLogger.path that is an existing directory is refused, not its parent granted", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const config = cfg(`flowLogger:\n  enable: true\n  path: ${dir}\n`);
    assert.throws(
      () => perms(config),
      new RegExp(
        `flowLogger.path ${dir} is a directory: it names the log file \\(e\\.g\\. ${dir}/flows\\.log\\)`,
      ),
    );
    // A file in it (there or not yet) is granted its directory, as before.
    const p = perms(cfg(`flowLogger:\n  enable: true\n  path: ${dir}/flows.log\n`));
    assert.ok(p.write.includes(dir), p.write.join(","));
    assert.ok(!p.write.includes("/"));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("permissions: the printed flags are shell words: a path with a space, ;, $ or a quote reaches deno run whole", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-perm-odd dir $HOME 'q'; echo pwned " });
  try {
    const conf = `${dir}/fa.conf`;
    await Deno.writeTextFile(
      conf,
      `aggregatorTransportProtocol: TCP\nflowLogger:\n  enable: true\n  path: "${dir}/logs/flows.log"\n`,
    );
    const r = await runDeno([...PERMISSIONS, "permissions", "--config", conf]);
    assert.equal(r.code, 0, r.stderr);
    const line = r.stdout.trim();
    // As a shell reads the line (pasted, or eval'd): each flag one word, nothing run.
    const sh = await new Deno.Command("bash", {
      // failglob: an unquoted `[::]` that matches no file is an error, not a word.
      args: ["-O", "failglob", "-c", `printf '[%s]\\n' ${line}`],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const words = new TextDecoder().decode(sh.stdout).trim().split("\n").map((w) => w.slice(1, -1));
    assert.equal(sh.code, 0, new TextDecoder().decode(sh.stderr));
    assert.ok(!words.includes("pwned"), words.join(" "));
    assert.ok(words.some((w) => /^--allow-net=.*\[::\]:10348/.test(w)), words.join(" "));
    const read = words.find((w) => w.startsWith("--allow-read="));
    assert.ok(read?.slice("--allow-read=".length).split(",").includes(dir), `${read} names ${dir}`);
    // Ordinary flags are printed as they are.
    assert.ok(line.includes(" --unstable-net "), line);
    assert.ok(words.includes("--unstable-net"));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
  for (const w of ["plain-/path:1,[::]:4739", "a b", "it's", "$(x)", "", "tab\there"]) {
    const out = new TextDecoder().decode(
      (await new Deno.Command("bash", {
        args: ["-c", `printf '%s' ${shellWord(w)}`],
        stdout: "piped",
      })
        .output()).stdout,
    );
    assert.equal(out, w);
  }
});
