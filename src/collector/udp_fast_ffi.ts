/**
 * The libc binding behind the fast UDP receive path: socket setup (SO_REUSEPORT, SO_RCVBUF,
 * receive timeout) and `recvmmsg(2)`, which moves up to a whole batch of datagrams per system
 * call instead of one datagram per promise as `Deno.listenDatagram` does. Linux only (the
 * constants and struct layouts below are the LP64 Linux ABI shared by x86_64 and aarch64).
 * Needs `--allow-ffi`, which may be scoped to the C library alone (`--allow-ffi=<libc path>`,
 * see {@linkcode libcPath}): no pointer API is used (Deno grants `Deno.UnsafePointer` only with
 * the bare flag), buffer addresses and `errno` are read through libc's own `memcpy` instead.
 * Used by `udp_fast.ts` (socket setup, main thread) and
 * `udp_fast_worker.ts` (the blocking receive loop, one worker thread per socket).
 */

import { parseIP } from "../ipfix/ip.ts";

/** Linux socket constants (identical on x86_64 and aarch64). */
export const LINUX = {
  AF_INET: 2,
  AF_INET6: 10,
  SOCK_DGRAM: 2,
  SOCK_CLOEXEC: 0o2000000,
  SOL_SOCKET: 1,
  SO_REUSEADDR: 2,
  SO_RCVBUF: 8,
  SO_REUSEPORT: 15,
  SO_RCVTIMEO: 20,
  SO_RCVBUFFORCE: 33,
  SO_RXQ_OVFL: 40,
  SO_MEMINFO: 55,
  IPPROTO_IPV6: 41,
  IPV6_V6ONLY: 26,
  MSG_TRUNC: 0x20,
  MSG_DONTWAIT: 0x40,
  MSG_WAITFORONE: 0x10000,
  EAGAIN: 11,
  EINTR: 4,
  EBADF: 9,
  ENOSYS: 38,
  EPERM: 1,
  SCHED_OTHER: 0,
  SCHED_BATCH: 3,
} as const;

/** Size of `struct mmsghdr` on LP64 Linux (msghdr 56 + msg_len 4 + padding 4). */
export const MMSGHDR_SIZE = 64;
/** Size of `struct iovec` on LP64 Linux. */
export const IOVEC_SIZE = 16;
/** Bytes reserved per peer address (sockaddr_in6 is 28; rounded for alignment). */
export const SOCKADDR_SLOT = 32;
/** Control (cmsg) bytes per message: CMSG_SPACE(4) = 24, rounded for alignment. */
export const CMSG_SLOT = 32;

const SYMBOLS = {
  socket: { parameters: ["i32", "i32", "i32"], result: "i32" },
  setsockopt: { parameters: ["i32", "i32", "i32", "buffer", "u32"], result: "i32" },
  getsockopt: { parameters: ["i32", "i32", "i32", "buffer", "buffer"], result: "i32" },
  bind: { parameters: ["i32", "buffer", "u32"], result: "i32" },
  getsockname: { parameters: ["i32", "buffer", "buffer"], result: "i32" },
  recvmmsg: { parameters: ["i32", "buffer", "u32", "i32", "pointer"], result: "i32" },
  // recvmmsg with a timeout (a struct timespec, passed as a buffer: no pointer API under a
  // scoped --allow-ffi); the plain one above keeps its null timeout on the fast call path.
  recvmmsgTimeout: {
    name: "recvmmsg",
    parameters: ["i32", "buffer", "u32", "i32", "buffer"],
    result: "i32",
  },
  close: { parameters: ["i32"], result: "i32" },
  // syscall(2) for sched_setattr, which glibc < 2.41 does not wrap. Declared with fixed integer
  // arguments: on x86_64 and aarch64 Linux that is how the variadic function takes them.
  syscall: { parameters: ["i64", "i64", "buffer", "i64", "i64"], result: "i64" },
  __errno_location: { parameters: [], result: "pointer" },
  // memcpy(b, b, 0) returns b: the address of a buffer, without Deno.UnsafePointer.
  addressOf: { name: "memcpy", parameters: ["buffer", "buffer", "usize"], result: "usize" },
  // memcpy(out, p, n): reads n bytes at a pointer libc returned (errno), without a pointer view.
  load: { name: "memcpy", parameters: ["buffer", "pointer", "usize"], result: "pointer" },
} as const;

/**
 * Where the C library is looked for, by absolute path: a scoped `--allow-ffi=PATH` grants
 * exactly the path string given (Deno does not resolve `/lib` → `/usr/lib`), so the
 * `permissions` subcommand and {@linkcode openLibc} must agree on it. Debian/Ubuntu multiarch
 * first, then the usual others.
 */
export const LIBC_PATHS: readonly string[] = [
  "/lib/x86_64-linux-gnu/libc.so.6",
  "/usr/lib/x86_64-linux-gnu/libc.so.6",
  "/lib/aarch64-linux-gnu/libc.so.6",
  "/usr/lib/aarch64-linux-gnu/libc.so.6",
  "/lib64/libc.so.6",
  "/usr/lib64/libc.so.6",
  "/lib/libc.so.6",
  "/usr/lib/libc.so.6",
];

/**
 * The first of {@linkcode LIBC_PATHS} that exists here, or undefined. Looking needs read
 * permission (the `permissions` subcommand and the launcher have it); a process that may not
 * look takes a path it was granted `--allow-ffi` for as the one, so that it computes the same
 * path as the launcher that granted it (its check of a reloaded configuration).
 */
export function libcPath(): string | undefined {
  for (const p of LIBC_PATHS) {
    try {
      if (Deno.statSync(p).isFile) return p;
    } catch (err) {
      if (
        err instanceof Deno.errors.NotCapable &&
        Deno.permissions.querySync({ name: "ffi", path: p }).state === "granted"
      ) {
        return p;
      }
      // absent or not readable: the next one
    }
  }
  return undefined;
}

/** The opened libc symbols. */
export type LibC = Deno.DynamicLibrary<typeof SYMBOLS>["symbols"];

let cached: Deno.DynamicLibrary<typeof SYMBOLS> | undefined;

/** Opens libc once per thread (each worker has its own isolate and so its own handle). */
export function openLibc(): LibC {
  if (cached === undefined) {
    let lastError: unknown;
    // Scoped grants name a path; the bare flag also lets the loader search by name.
    for (const name of [...LIBC_PATHS, "libc.so.6", "libc.so"]) {
      try {
        cached = Deno.dlopen(name, SYMBOLS);
        break;
      } catch (e) {
        lastError = e;
      }
    }
    if (cached === undefined) {
      throw new Error(`udp_fast: cannot open libc: ${String(lastError)}`);
    }
  }
  return cached.symbols;
}

/** sched_getattr(2) and sched_setattr(2) system call numbers. */
const SYS_SCHED: Record<string, { get: bigint; set: bigint }> = {
  x86_64: { get: 315n, set: 314n },
  aarch64: { get: 275n, set: 274n },
};

/** Bytes of `struct sched_attr` up to `sched_period` (SCHED_ATTR_SIZE_VER0). */
const SCHED_ATTR_SIZE = 48;

/**
 * Asks the kernel for a short scheduling slice for the calling thread
 * (`sched_attr.sched_runtime` of a SCHED_OTHER/BATCH thread: Linux >= 6.12 honours it and
 * clamps it to 0.1-100 ms; older kernels accept and ignore it). The thread's CPU share is
 * unchanged, but a thread with a shorter slice gets an earlier deadline when it wakes, so it
 * preempts the thread running on its CPU instead of waiting for that thread's slice to end.
 * Needs no privilege (unlike a lower nice value or a real-time policy); the policy and nice
 * value are read first and kept. Returns 0, or an errno (ENOSYS: not on this platform;
 * EPERM: the thread has a real-time policy, left alone).
 */
export function setThreadSlice(libc: LibC, micros: number): number {
  const nr = SYS_SCHED[Deno.build.arch];
  if (nr === undefined) return LINUX.ENOSYS;
  const attr = new Uint8Array(SCHED_ATTR_SIZE);
  const v = new DataView(attr.buffer);
  // pid 0: the calling thread (a worker thread is a task of its own).
  if (libc.syscall(nr.get, 0n, attr, BigInt(SCHED_ATTR_SIZE), 0n) !== 0n) return errno(libc);
  const policy = v.getUint32(4, true);
  if (policy !== LINUX.SCHED_OTHER && policy !== LINUX.SCHED_BATCH) return LINUX.EPERM;
  v.setUint32(0, SCHED_ATTR_SIZE, true);
  v.setBigUint64(8, 0n, true); // sched_flags
  v.setBigUint64(24, BigInt(Math.round(micros * 1000)), true); // sched_runtime, ns
  return libc.syscall(nr.set, 0n, attr, 0n, 0n) === 0n ? 0 : errno(libc);
}

/** Returns the calling thread's `errno` (valid right after a failed libc call). */
export function errno(libc: LibC): number {
  const p = libc.__errno_location();
  if (p === null) return 0;
  libc.load(errnoBytes, p, 4n);
  return errnoWord[0];
}

const errnoWord = new Int32Array(1);
const errnoBytes = new Uint8Array(errnoWord.buffer);

/** The address of `a`'s first byte (for the structs `recvmmsg` reads). */
export function addressOf(libc: LibC, a: Uint8Array): bigint {
  return BigInt(libc.addressOf(a, a, 0n));
}

/** Returns true when this platform can use the FFI path (Linux, 64-bit, FFI permitted). */
export function ffiAvailable(): boolean {
  if (Deno.build.os !== "linux") return false;
  if (Deno.build.arch !== "x86_64" && Deno.build.arch !== "aarch64") return false;
  try {
    if (Deno.permissions.querySync({ name: "ffi" }).state === "granted") return true;
    return LIBC_PATHS.some((path) =>
      Deno.permissions.querySync({ name: "ffi", path }).state === "granted"
    );
  } catch {
    return false;
  }
}

/** A parsed bind address. */
export interface BindAddress {
  /** AF_INET or AF_INET6. */
  family: number;
  /** Address bytes (4 or 16), network order. */
  bytes: Uint8Array;
}

/**
 * Parses an IP literal (no DNS: a collector binds to a configured address, and a blocking
 * resolver call has no place in socket setup). `localhost` maps to 127.0.0.1.
 */
export function parseBindHost(hostname: string): BindAddress {
  let h = hostname.trim();
  if (h === "localhost") h = "127.0.0.1";
  if (h.startsWith("[") && h.endsWith("]")) h = h.slice(1, -1);
  // A zone (fe80::1%eth0) is not part of the address bytes; the one parser rejects it.
  const pct = h.indexOf("%");
  if (pct >= 0 && h.includes(":")) h = h.slice(0, pct);
  const bytes = parseIP(h);
  if (bytes === undefined) {
    throw new Error(`udp_fast: hostname ${JSON.stringify(hostname)}: not an IP literal`);
  }
  return { family: bytes.length === 4 ? LINUX.AF_INET : LINUX.AF_INET6, bytes };
}

/** Encodes a `sockaddr_in`/`sockaddr_in6` for bind(2). */
export function encodeSockaddr(addr: BindAddress, port: number): Uint8Array {
  const buf = new Uint8Array(addr.family === LINUX.AF_INET ? 16 : 28);
  const dv = new DataView(buf.buffer);
  dv.setUint16(0, addr.family, true);
  dv.setUint16(2, port, false);
  buf.set(addr.bytes, addr.family === LINUX.AF_INET ? 4 : 8);
  return buf;
}

/** Options for {@linkcode openUdpSocket}. */
export interface SocketOptions {
  /** Set SO_REUSEPORT so several sockets (one per worker) share the port. */
  reusePort: boolean;
  /** SO_RCVBUF request in bytes; 0 keeps `net.core.rmem_default`. */
  recvBufferBytes: number;
  /** Receive timeout so a blocked worker notices `close()`. */
  timeoutMs: number;
}

/** Creates, configures and binds a UDP socket; returns the fd and the bound port. */
export function openUdpSocket(
  libc: LibC,
  addr: BindAddress,
  port: number,
  opts: SocketOptions,
): { fd: number; port: number; recvBufferBytes: number } {
  const fd = libc.socket(addr.family, LINUX.SOCK_DGRAM | LINUX.SOCK_CLOEXEC, 0);
  if (fd < 0) throw new Error(`udp_fast: socket() failed errno=${errno(libc)}`);
  try {
    const one = new Int32Array([1]);
    const zero = new Int32Array([0]);
    if (addr.family === LINUX.AF_INET6) {
      // "::" should take IPv4 Agents too, like Go's and Deno's dual-stack listeners.
      libc.setsockopt(fd, LINUX.IPPROTO_IPV6, LINUX.IPV6_V6ONLY, zero, 4);
    }
    // No SO_REUSEADDR: on UDP it lets a second socket (another instance, another process in
    // the pod) bind the port and take every datagram. SO_REUSEPORT, for our own sockets, is
    // limited by the kernel to sockets of the same user.
    if (opts.reusePort) {
      check(
        libc,
        libc.setsockopt(fd, LINUX.SOL_SOCKET, LINUX.SO_REUSEPORT, one, 4),
        "SO_REUSEPORT",
      );
    }
    // Ask the kernel to attach the socket's drop counter to received datagrams, so the
    // receiver can report what the kernel threw away (best effort: absent on old kernels).
    libc.setsockopt(fd, LINUX.SOL_SOCKET, LINUX.SO_RXQ_OVFL, one, 4);
    if (opts.recvBufferBytes > 0) {
      const size = new Int32Array([Math.min(opts.recvBufferBytes, 0x3fffffff)]);
      // SO_RCVBUFFORCE ignores net.core.rmem_max but needs CAP_NET_ADMIN; fall back silently
      // to SO_RCVBUF, which the kernel caps at rmem_max (the effective size is reported).
      if (libc.setsockopt(fd, LINUX.SOL_SOCKET, LINUX.SO_RCVBUFFORCE, size, 4) !== 0) {
        libc.setsockopt(fd, LINUX.SOL_SOCKET, LINUX.SO_RCVBUF, size, 4);
      }
    }
    setRecvTimeout(libc, fd, opts.timeoutMs);
    const sa = encodeSockaddr(addr, port);
    check(libc, libc.bind(fd, sa, sa.byteLength), `bind port ${port}`);
    const out = new Uint8Array(28);
    const len = new Uint32Array([28]);
    check(libc, libc.getsockname(fd, out, len), "getsockname");
    const bound = new DataView(out.buffer).getUint16(2, false);
    const rb = new Int32Array([0]);
    const rbLen = new Uint32Array([4]);
    libc.getsockopt(fd, LINUX.SOL_SOCKET, LINUX.SO_RCVBUF, rb, rbLen);
    return { fd, port: bound, recvBufferBytes: rb[0] };
  } catch (e) {
    libc.close(fd);
    throw e;
  }
}

/** Index of the drop count in SO_MEMINFO's array (`SK_MEMINFO_DROPS`, linux/sock_diag.h). */
const SK_MEMINFO_DROPS = 8;
/** SO_MEMINFO's array as read: `SK_MEMINFO_VARS` u32s (9 since Linux 4.x; room for more). */
const meminfo = new Uint32Array(16);
const meminfoLen = new Uint32Array(1);

/**
 * The socket's drop count now (the counter SO_RXQ_OVFL attaches to each datagram, and
 * `/proc/net/udp`'s drops column), or undefined when the kernel does not report it. SO_RXQ_OVFL
 * tells of drops only with the next datagram queued: the tail of a burst dropped while the
 * receiving thread was off the CPU stays unseen until another datagram comes, so the receiver
 * also reads it when the socket is quiet and at stop.
 */
export function socketDrops(libc: LibC, fd: number): number | undefined {
  meminfoLen[0] = meminfo.byteLength;
  if (libc.getsockopt(fd, LINUX.SOL_SOCKET, LINUX.SO_MEMINFO, meminfo, meminfoLen) !== 0) {
    return undefined;
  }
  return meminfoLen[0] >= (SK_MEMINFO_DROPS + 1) * 4 ? meminfo[SK_MEMINFO_DROPS] : undefined;
}

/** Changes a socket's receive timeout (SO_RCVTIMEO). */
export function setRecvTimeout(libc: LibC, fd: number, timeoutMs: number): void {
  const tv = new BigInt64Array([
    BigInt(Math.floor(timeoutMs / 1000)),
    BigInt((timeoutMs % 1000) * 1000),
  ]);
  check(libc, libc.setsockopt(fd, LINUX.SOL_SOCKET, LINUX.SO_RCVTIMEO, tv, 16), "SO_RCVTIMEO");
}

function check(libc: LibC, rc: number, what: string): void {
  if (rc !== 0) throw new Error(`udp_fast: ${what} failed errno=${errno(libc)}`);
}
