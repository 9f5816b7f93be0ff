/**
 * UDP ingest benchmark: finds the highest lossless receive rate (< 0.1 % loss) of each receive
 * path with a rate search, against a C recv() baseline and Debian's nfcapd measured in the
 * same run. The load comes from udp_send.c (gcc-compiled, paced sendmmsg) sending the
 * golden Antrea IPFIX data message of spec/ipfix.md §1.13 (175 bytes, one record per
 * datagram) to 127.0.0.1 only. Each receiver runs as its own process and reports its count
 * over stdin/stdout (see udp_receiver.ts), so one process serves every trial of a search.
 */

import { fileURLToPath } from "node:url";

const HERE = fileURLToPath(new URL(".", import.meta.url));
const DENO = Deno.execPath();

/** Golden IPFIX template message (Template ID 256, 39 fields), spec/ipfix.md §1.13. */
export const GOLDEN_TEMPLATE_HEX =
  "000a01206553f1000000000033de13e200020110010000270096000400970004" +
  "0088000100070002000b00020004000100560008005500080002000800010008" +
  "00080004000c0004805600080000727980550008000072798002000800007279" +
  "80010008000072798065ffff0000dcba8064ffff0000dcba8068ffff0000dcba" +
  "8067ffff0000dcba8066ffff0000dcba8069ffff0000dcba806c00020000dcba" +
  "806dffff0000dcba806effff0000dcba806fffff0000dcba807300010000dcba" +
  "808dffff0000dcba808b00010000dcba8070ffff0000dcba8071ffff0000dcba" +
  "807600010000dcba808effff0000dcba808c00010000dcba8088ffff0000dcba" +
  "808900010000dcba8099ffff0000dcba809affff0000dcba806a00040000dcba";

/** Golden IPFIX data message (one record, 175 bytes), spec/ipfix.md §1.13. */
export const GOLDEN_DATA_HEX = "000a00af6553f10a0000000133de13e20100009f6553f1006553f10a02aed014" +
  "510600000000000000640000000000003a980000000000000064000000000000" +
  "3a980a0a004f0a0a015000000000000000500000000000002328000000000000" +
  "005000000000000023280a70657266746573742d610b616e747265612d746573" +
  "740a6b38732d6e6f64652d31000000000000000000000000000000000b455354" +
  "41424c495348454402000000000000";

/** Decodes a hex string. */
export function hexToBytes(hex: string): Uint8Array {
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/** Paths of the compiled tools and payload files. */
export interface UdpTools {
  /** Scratch directory (removed by the caller). */
  dir: string;
  /** Compiled udp_send. */
  send: string;
  /** Compiled udp_recv (baseline). */
  recv: string;
  /** Golden data message file. */
  dataFile: string;
  /** Golden template message file. */
  templateFile: string;
}

/** Compiles the C sender/baseline with gcc and writes the payloads into a temp dir. */
export async function buildUdpTools(): Promise<UdpTools> {
  const dir = await Deno.makeTempDir({ prefix: "fa-bench-udp-" });
  const tools: UdpTools = {
    dir,
    send: `${dir}/udp_send`,
    recv: `${dir}/udp_recv`,
    dataFile: `${dir}/data.bin`,
    templateFile: `${dir}/template.bin`,
  };
  for (
    const [src, out, extra] of [
      ["udp_send.c", tools.send, []],
      ["udp_recv.c", tools.recv, ["-pthread"]],
    ] as const
  ) {
    const r = await new Deno.Command("gcc", {
      args: ["-O2", ...extra, "-o", out, `${HERE}${src}`],
      stdout: "piped",
      stderr: "piped",
    }).output();
    if (!r.success) {
      throw new Error(`gcc ${src} failed: ${new TextDecoder().decode(r.stderr)}`);
    }
  }
  await Deno.writeFile(tools.dataFile, hexToBytes(GOLDEN_DATA_HEX));
  await Deno.writeFile(tools.templateFile, hexToBytes(GOLDEN_TEMPLATE_HEX));
  return tools;
}

/** A receiver process speaking the READY/count protocol. */
export interface ReceiverProc {
  /** Bound UDP port. */
  port: number;
  /** Process id (for CPU accounting). */
  pid: number;
  /** Asks for the current count (and any extra fields). */
  query(): Promise<{ count: number } & Record<string, unknown>>;
  /** Ends the process. */
  stop(): Promise<void>;
}

/** Starts a receiver process and waits for its READY line. */
export async function spawnReceiver(cmd: string, args: string[]): Promise<ReceiverProc> {
  const child = new Deno.Command(cmd, {
    args,
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const writer = child.stdin.getWriter();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).pipeThrough(lineSplitter());
  const reader = lines.getReader();
  const first = await withTimeout(reader.read(), 20_000, `${cmd} did not get ready`);
  const m = /^READY (\d+)$/.exec(first.value ?? "");
  if (m === null) {
    child.kill("SIGKILL");
    throw new Error(`${cmd}: unexpected first line ${JSON.stringify(first.value)}`);
  }
  const enc = new TextEncoder();
  return {
    port: Number(m[1]),
    pid: child.pid,
    async query() {
      await writer.write(enc.encode("count\n"));
      const r = await withTimeout(reader.read(), 10_000, `${cmd} did not answer`);
      return JSON.parse(r.value ?? "{}");
    },
    async stop() {
      try {
        await writer.close();
      } catch { /* already gone */ }
      const timer = setTimeout(() => {
        try {
          child.kill("SIGKILL");
        } catch { /* exited */ }
      }, 3000);
      await child.status;
      clearTimeout(timer);
      await reader.cancel().catch(() => {});
    },
  };
}

function lineSplitter(): TransformStream<string, string> {
  let buf = "";
  return new TransformStream({
    transform(chunk, ctl) {
      buf += chunk;
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        ctl.enqueue(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
      }
    },
  });
}

async function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let t: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>((_, rej) => (t = setTimeout(() => rej(new Error(what)), ms))),
    ]);
  } finally {
    clearTimeout(t);
  }
}

/** What the sender reports. */
export interface SendResult {
  /** Datagrams sent. */
  sent: number;
  /** Wall time of the sending loop. */
  seconds: number;
  /** Achieved rate. */
  rate: number;
  /**
   * Most datagrams the sender was behind its schedule at once (descheduled): sent back to
   * back as one catch-up burst, which a small socket buffer must absorb.
   */
  max_behind?: number;
  /** Stream mode: the most rounds a source completed (see udp_send.c `-e`). */
  passes?: number;
}

/**
 * A recorded stream for udp_send's stream mode: length-prefixed message files (2-byte big-endian
 * length, then the message); data message i goes out of source socket i % sources.
 */
export interface SendStream {
  /** The data messages. */
  messages: string;
  /** Template messages, sent first from every source. */
  templates: string;
  /**
   * Byte offset, in every data message, of a big-endian u32 (the flow end) that udp_send raises,
   * with the export time, by {@linkcode passBase} at the start and by 1 at each new round
   * (`-e`/`-E`): each round is then a newer export of the same flows. Unset: rounds repeat.
   */
  passOffset?: number;
  /** What the messages' flow end and export time are raised by at the start. */
  passBase?: number;
}

/** Runs udp_send against 127.0.0.1:port: the golden message, or `opts.stream`. */
export async function blast(
  tools: UdpTools,
  port: number,
  opts: {
    count: number;
    rate: number;
    sources: number;
    ipfix?: boolean;
    stream?: SendStream;
    /** Catch-up after a stall capped at this multiple of `rate` (default: back to back). */
    catchup?: number;
  },
): Promise<SendResult> {
  const args = [
    "-h",
    "127.0.0.1",
    "-p",
    String(port),
    "-n",
    String(opts.count),
    "-r",
    String(opts.rate),
    ...(opts.stream
      ? ["-m", opts.stream.messages, "-T", opts.stream.templates]
      : ["-f", tools.dataFile]),
    ...(opts.stream?.passOffset !== undefined
      ? ["-e", String(opts.stream.passOffset), "-E", String(opts.stream.passBase ?? 0)]
      : []),
    "-s",
    String(opts.sources),
  ];
  if (opts.ipfix) args.push("-t", tools.templateFile, "-q");
  if (opts.catchup !== undefined) args.push("-c", String(opts.catchup));
  const r = await new Deno.Command(tools.send, { args, stdout: "piped", stderr: "piped" })
    .output();
  if (!r.success) throw new Error(`udp_send failed: ${new TextDecoder().decode(r.stderr)}`);
  return JSON.parse(new TextDecoder().decode(r.stdout));
}

/** One measured trial. */
export interface Trial {
  /** Requested rate (datagrams/s). */
  requested: number;
  /** Rate the sender achieved. */
  achieved: number;
  /** Datagrams sent. */
  sent: number;
  /** Datagrams the receiver counted. */
  received: number;
  /** 1 - received/sent. */
  loss: number;
}

/** Loss below which a trial counts as lossless. */
export const LOSSLESS = 0.001;

/** Polls of {@linkcode settledCount} a count must hold still for before it is final. */
export const SETTLE_POLLS = 2;

/**
 * What a receiver counted since `before` once it is done: a receiver may still be working
 * through its socket buffer or queue, so this waits until its count reaches `before + expected`
 * or holds still over {@linkcode SETTLE_POLLS} polls 200 ms apart (5 s at most). Two polls, not
 * one: the process counts a record aggregated only once its shard has ingested it, which after
 * a trial's last datagram can take 150 ms (the receive thread's batch, up to 100 ms for a lone
 * datagram, then the shard flush, up to 50 ms), close to one poll's 200 ms on a slow machine.
 */
export async function settledCount(
  rx: { query(): Promise<{ count: number }> },
  before: number,
  expected: number,
): Promise<number> {
  let now = (await rx.query()).count;
  let still = 0;
  const deadline = Date.now() + 5000;
  while (now - before < expected && still < SETTLE_POLLS && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 200));
    const next = (await rx.query()).count;
    still = next === now ? still + 1 : 0;
    now = next;
  }
  return now - before;
}

/** Runs one trial against a running receiver: send, wait for it to drain, compare counts. */
export async function trialAgainst(
  rx: ReceiverProc,
  tools: UdpTools,
  rate: number,
  seconds: number,
  sources: number,
): Promise<Trial> {
  const before = (await rx.query()).count;
  const count = Math.max(1, Math.round(rate * seconds));
  const s = await blast(tools, rx.port, { count, rate, sources });
  const received = await settledCount(rx, before, s.sent);
  return {
    requested: rate,
    achieved: Math.min(rate, s.rate),
    sent: s.sent,
    received,
    loss: s.sent === 0 ? 0 : Math.max(0, 1 - received / s.sent),
  };
}

/** User + system CPU seconds used so far by process `pid` (all threads), from /proc. */
export async function cpuSeconds(pid: number): Promise<number> {
  const stat = await Deno.readTextFile(`/proc/${pid}/stat`);
  // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(f[11]) + Number(f[12])) / 100; // USER_HZ is 100 on Linux
}

/** Result of a rate search (`T`: what one trial measured). */
export interface SearchResult<T extends Trial = Trial> {
  /** Highest lossless achieved rate (0 when even the lowest rate lost). */
  lossless: number;
  /**
   * True when the sender, not the receiver, set the limit (it fell > 10 % short of the
   * requested rate on a lossless trial): the receiver can take at least `lossless`.
   */
  senderLimited: boolean;
  /** Every trial, in order. */
  trials: T[];
}

/** Options for {@linkcode searchLosslessRate}. */
export interface SearchOptions {
  /** First rate tried. */
  start: number;
  /** Highest rate tried. */
  max: number;
  /** Lowest rate tried when going down. */
  min: number;
  /** Bisection steps after the doubling phase. */
  refine: number;
}

/**
 * Doubles the rate from `start` until a trial loses (or `max`), then bisects between the last
 * lossless and the first lossy rate. Goes down by halves when `start` already loses.
 */
export async function searchLosslessRate<T extends Trial = Trial>(
  run: (rate: number) => Promise<T>,
  opts: SearchOptions,
): Promise<SearchResult<T>> {
  const trials: T[] = [];
  // A rate fails only when two trials in a row lose: on a shared 2-core machine a single
  // scheduling hiccup of another process can overflow any socket buffer once.
  const attempt = async (rate: number): Promise<T> => {
    let t = await run(rate);
    trials.push(t);
    if (t.loss >= LOSSLESS) {
      t = await run(rate);
      trials.push(t);
    }
    return t;
  };
  const ok = (t: Trial): boolean => t.loss < LOSSLESS;
  let pass = 0, passAchieved = 0, fail = 0, senderLimited = false;
  let rate = opts.start;
  for (;;) {
    const t = await attempt(rate);
    if (ok(t)) {
      pass = rate;
      passAchieved = Math.max(passAchieved, t.achieved);
      if (t.achieved < rate * 0.9) {
        // The sender could not go faster: the receiver is not the limit any more.
        senderLimited = true;
        break;
      }
      if (rate >= opts.max || fail !== 0) break;
      rate = Math.min(opts.max, rate * 2);
    } else {
      fail = rate;
      if (pass !== 0) break;
      if (rate <= opts.min) break;
      rate = Math.max(opts.min, Math.floor(rate / 2));
    }
  }
  if (pass !== 0 && fail !== 0 && !senderLimited) {
    let lo = pass, hi = fail;
    for (let i = 0; i < opts.refine && hi - lo > lo * 0.05; i++) {
      const mid = Math.round((lo + hi) / 2);
      const t = await attempt(mid);
      if (ok(t)) {
        lo = mid;
        passAchieved = Math.max(passAchieved, t.achieved);
        if (t.achieved < mid * 0.9) {
          senderLimited = true;
          break;
        }
      } else hi = mid;
    }
  }
  return { lossless: Math.round(passAchieved), senderLimited, trials };
}

/** A receive path to measure. */
export interface ReceiverSpec {
  /** Short name used in the table and JSON. */
  name: string;
  /** Executable. */
  cmd: string;
  /** Arguments. */
  args: string[];
}

/**
 * Socket receive buffer of the headline comparison (C baseline, udp_fast, nfcapd). 4 MiB is
 * udp_fast's default request and the operator setting docs/udp-ingest.md recommends; with the
 * 208 KiB kernel default every receiver's "lossless" rate measures scheduler hiccups instead.
 */
export const BIG_RCVBUF = 4 << 20;

/** The receive paths compared by the benchmark. */
export function receiverSpecs(tools: UdpTools, which: string[]): ReceiverSpec[] {
  const ts = `${HERE}udp_receiver.ts`;
  const deno = (mode: string, ...extra: string[]): string[] => [
    "run",
    "--allow-all",
    "--unstable-net",
    ts,
    `--mode=${mode}`,
    ...extra,
  ];
  const all: ReceiverSpec[] = [
    { name: "c_recv", cmd: tools.recv, args: ["-p", "0", "-b", String(BIG_RCVBUF)] },
    { name: "c_recv_defbuf", cmd: tools.recv, args: ["-p", "0"] },
    { name: "udp_fast", cmd: DENO, args: deno("fast", `--rcvbuf=${BIG_RCVBUF}`) },
    { name: "udp_fast_defbuf", cmd: DENO, args: deno("fast", "--rcvbuf=0") },
    { name: "udp_fast_2w", cmd: DENO, args: deno("fast", "--workers=2", `--rcvbuf=${BIG_RCVBUF}`) },
    { name: "deno_listenDatagram", cmd: DENO, args: deno("deno") },
    { name: "node_dgram", cmd: DENO, args: deno("dgram") },
  ];
  return all.filter((s) => which.includes(s.name));
}

/** CPU cost of a receiver at one fixed rate. */
export interface CpuCost {
  /** Offered rate (datagrams/s). */
  rate: number;
  /** Receiver CPU (user + system, all threads) per received datagram, microseconds. */
  microsPerDatagram: number | null;
  /** Share of one core used at that rate (1 = a full core). */
  cores: number;
  /** Loss during the measurement (a receiver that drops work looks cheaper than it is). */
  loss: number;
}

/** A receive path's rate search plus its CPU cost at fixed rates. */
export interface ReceiverResult extends SearchResult {
  /** CPU cost per fixed rate, in the order measured. */
  cpu: CpuCost[];
}

/**
 * Warms the receiver up (JIT, worker start) with an uncounted burst, measures its CPU per
 * datagram at fixed rates (a steadier comparison than the lossless rate on a shared machine),
 * then runs the rate search.
 */
export async function measureReceiver(
  tools: UdpTools,
  spec: ReceiverSpec,
  opts: SearchOptions & { seconds: number; sources: number; cpuRates: number[] },
): Promise<ReceiverResult> {
  const rx = await spawnReceiver(spec.cmd, spec.args);
  try {
    await trialAgainst(rx, tools, opts.start, Math.min(0.5, opts.seconds), opts.sources);
    const cpu: CpuCost[] = [];
    for (const rate of opts.cpuRates) {
      const c0 = await cpuSeconds(rx.pid);
      const w0 = performance.now();
      const t = await trialAgainst(rx, tools, rate, opts.seconds, opts.sources);
      const c1 = await cpuSeconds(rx.pid);
      const wall = (performance.now() - w0) / 1000;
      cpu.push({
        rate,
        microsPerDatagram: t.received > 0 ? Math.round((c1 - c0) / t.received * 1e7) / 10 : null,
        cores: Math.round((c1 - c0) / wall * 100) / 100,
        loss: t.loss,
      });
    }
    const search = await searchLosslessRate(
      (rate) => trialAgainst(rx, tools, rate, opts.seconds, opts.sources),
      opts,
    );
    return { ...search, cpu };
  } finally {
    await rx.stop();
  }
}

/** Returns true if `nfcapd` and `nfdump` are on PATH. */
export async function nfcapdAvailable(): Promise<boolean> {
  try {
    const a = await new Deno.Command("nfcapd", { args: ["-V"], stdout: "null", stderr: "null" })
      .output();
    const b = await new Deno.Command("nfdump", { args: ["-V"], stdout: "null", stderr: "null" })
      .output();
    return a.success && b.success;
  } catch {
    return false;
  }
}

/** True once something holds the port (our bind fails); /proc/net/udp reads are unreliable here. */
function udpPortBound(port: number): boolean {
  try {
    Deno.listenDatagram({ transport: "udp", hostname: "127.0.0.1", port }).close();
    return false;
  } catch (e) {
    return e instanceof Deno.errors.AddrInUse;
  }
}

function freeUdpPort(): number {
  const s = Deno.listenDatagram({ transport: "udp", hostname: "127.0.0.1", port: 0 });
  const port = (s.addr as Deno.NetAddr).port;
  s.close();
  return port;
}

/**
 * Bytes waiting in the receive queue of the UDP socket bound to 127.0.0.1:`port` (the
 * `rx_queue` column of /proc/net/udp), or null when no such socket is listed.
 */
function udpReceiveQueue(port: number): number | null {
  let text: string;
  try {
    text = Deno.readTextFileSync("/proc/net/udp");
  } catch {
    return null;
  }
  const local = `0100007F:${port.toString(16).toUpperCase().padStart(4, "0")}`;
  for (const line of text.split("\n")) {
    const f = line.trim().split(/\s+/);
    if (f[1] === local) return parseInt(f[4].split(":")[1], 16);
  }
  return null;
}

/** The last `max` characters of a child's stream, read as it comes (a piped stream left unread could block it). */
async function tailOf(stream: ReadableStream<Uint8Array>, max = 2048): Promise<string> {
  let text = "";
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    text = (text + chunk).slice(-max);
  }
  return text.trim();
}

/**
 * One nfcapd trial: fresh nfcapd, template then `rate * seconds` data records, a wait until its
 * socket's receive queue is empty (nfcapd read every datagram the kernel kept; it stops reading
 * at SIGTERM), SIGTERM (it flushes its file), then the record count nfdump reads back. Its
 * socket buffer is set with `-B` like the other receivers' (0 = its default). A failure names
 * what nfcapd printed.
 */
export async function nfcapdTrial(
  tools: UdpTools,
  rate: number,
  seconds: number,
  recvBufferBytes = BIG_RCVBUF,
): Promise<Trial> {
  const dir = await Deno.makeTempDir({ dir: tools.dir, prefix: "nfcapd-" });
  const port = freeUdpPort();
  const child = new Deno.Command("nfcapd", {
    args: [
      "-p",
      String(port),
      "-b",
      "127.0.0.1",
      "-w",
      dir,
      "-t",
      "3600",
      ...(recvBufferBytes > 0 ? ["-B", String(recvBufferBytes)] : []),
    ],
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const stderr = tailOf(child.stderr);
  let exited: Deno.CommandStatus | null = null;
  const status = child.status.then((s) => exited = s);
  const failure = async (what: string): Promise<Error> => {
    try {
      child.kill("SIGKILL");
    } catch { /* already exited */ }
    await status;
    const said = await stderr;
    return new Error(
      `nfcapd ${what}${exited?.signal ? ` (signal ${exited.signal})` : ` (exit ${exited?.code})`}` +
        (said ? `: ${said}` : ", nothing on stderr"),
    );
  };
  try {
    const deadline = Date.now() + 10_000;
    while (!udpPortBound(port)) {
      if (exited !== null) throw await failure("exited before binding its port");
      if (Date.now() > deadline) throw await failure("did not bind its port in 10 s");
      await new Promise((r) => setTimeout(r, 50));
    }
    const count = Math.max(1, Math.round(rate * seconds));
    const s = await blast(tools, port, { count, rate, sources: 1, ipfix: true });
    const drained = Date.now() + 10_000;
    while ((udpReceiveQueue(port) ?? 0) > 0 && Date.now() < drained) {
      await new Promise((r) => setTimeout(r, 50));
    }
    await new Promise((r) => setTimeout(r, 200));
    if (exited !== null) throw await failure("exited during the trial");
    child.kill("SIGTERM");
    await status;
    let received = 0;
    for await (const e of Deno.readDir(dir)) {
      if (!e.name.startsWith("nfcapd.")) continue;
      const r = await new Deno.Command("nfdump", {
        args: ["-r", `${dir}/${e.name}`, "-I"],
        stdout: "piped",
        stderr: "piped",
      }).output();
      const m = /^Flows: (\d+)$/m.exec(new TextDecoder().decode(r.stdout));
      if (m === null) {
        throw new Error(
          `nfdump -I ${e.name} printed no "Flows:" line (exit ${r.code}): ` +
            new TextDecoder().decode(r.stderr).trim().slice(-2048),
        );
      }
      received += Number(m[1]);
    }
    return {
      requested: rate,
      achieved: Math.min(rate, s.rate),
      sent: s.sent,
      received,
      loss: Math.max(0, 1 - received / s.sent),
    };
  } finally {
    try {
      child.kill("SIGKILL");
    } catch { /* already exited */ }
    await status.catch(() => {});
    await stderr.catch(() => {});
  }
}
