/*
 * Paced UDP load generator for the ingest benchmark (scripts/bench.ts compiles it with gcc).
 * Sends COUNT copies of a payload file at RATE datagrams/s from NSRC source sockets (round
 * robin, so SO_REUSEPORT receivers see several 4-tuples like several Antrea Agents would).
 * Optionally sends a template file first from every source and patches the IPFIX sequence
 * number (bytes 8..11) so IPFIX collectors such as nfcapd see a well-formed stream.
 * Only ever sends to the address given with -h (the bench passes 127.0.0.1).
 * Stream mode (-m FILE, with -T FILE for its templates): instead of one payload, a file of
 * messages, each a 2-byte big-endian length then the message; message i belongs to source
 * i % NSRC (the bench writes one Agent's messages per source), and each source sends its own
 * in order, round after round. Every message of the -T file goes first from every source.
 * -e OFF (stream mode) makes each round a newer export of the same flows, as an Agent's are: it
 * adds BASE (-E, default 0) at the start, then 1 each time a source completes a round of them,
 * to the big-endian u32 at byte OFF of each of that source's messages (the bench passes the
 * flowEndSeconds of its one-record messages) and to their export time (bytes 4..7). Without it
 * the rounds repeat the first one's times, and a collector takes them as stale updates.
 * -c FACTOR caps the catch-up after a stall at FACTOR x RATE (0, the default: back to back).
 * Prints one JSON line: {"sent":N,"seconds":S,"rate":R,"send_errors":E,"max_behind":B,
 * "passes":P}, B being the most datagrams the sender was ever behind its schedule (it was
 * descheduled): it sends them back to back, a burst no receiver is woken in time for; P the most
 * rounds any source completed (with -e, the next run's -E is BASE + P + 1: newer than anything
 * sent, a last round cut short included).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/*
 * Datagrams per sendmmsg: at most `rate` x BURST_SECONDS, never fewer than BATCH_MIN. Each loop
 * sends at most one batch and then sleeps (nanosleep(50 us), which takes 60-200 us on these
 * VMs, longer when the receiver keeps the other core busy), so a fixed batch of 32 capped the
 * sender at 32 per sleep: about 200k/s on 2026-12-04, when the 4 MiB runs asked for 320k.
 * Below 160k/s the batch stays 32, the burst the default-buffer trials were measured with.
 * Behind schedule by more than a batch (a sleep took longer than a batch lasts), one sendmmsg
 * takes two batches (at most BATCH_MAX), the catch-up still spaced to FACTOR x RATE by -c: with
 * one batch per wake-up, sleeps of more than 200 us kept the sender behind for good (at 320k/s
 * against the process it reached 286-296k while using 0.4 of a core, 2026-12-05).
 */
#define BATCH_MIN 32
#define BATCH_MAX 256
#define BURST_SECONDS 200e-6
#define MAXSRC 64

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static unsigned char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) { perror(path); exit(2); }
  unsigned char *buf = malloc(65536);
  *len = fread(buf, 1, 65536, f);
  fclose(f);
  return buf;
}

/* Adds `by` to the big-endian u32 at p[0..4). */
static void add_be32(unsigned char *p, uint32_t by) {
  uint32_t v = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
  v += by;
  p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
}

/* A length-prefixed message file (2-byte big-endian length, then the bytes), read whole. */
typedef struct { unsigned char *p; size_t len; } msg_t;

static msg_t *read_msgs(const char *path, int *n) {
  FILE *f = fopen(path, "rb");
  if (!f) { perror(path); exit(2); }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = malloc(size > 0 ? (size_t)size : 1);
  if (fread(buf, 1, (size_t)size, f) != (size_t)size) { perror(path); exit(2); }
  fclose(f);
  int cap = 1024, k = 0;
  msg_t *m = malloc(sizeof *m * cap);
  for (long at = 0; at + 2 <= size;) {
    size_t len = ((size_t)buf[at] << 8) | buf[at + 1];
    if (at + 2 + (long)len > size) { fprintf(stderr, "%s: truncated message\n", path); exit(2); }
    if (k == cap) m = realloc(m, sizeof *m * (cap *= 2));
    m[k].p = buf + at + 2;
    m[k].len = len;
    k++;
    at += 2 + (long)len;
  }
  *n = k;
  return m;
}

int main(int argc, char **argv) {
  const char *host = "127.0.0.1", *payload_path = NULL, *template_path = NULL;
  const char *stream_path = NULL, *stream_tmpl_path = NULL;
  int port = 0, nsrc = 1, patch_seq = 0, opt, pass_off = -1;
  uint32_t pass_base = 0;
  long long count = 1000;
  double rate = 0, catchup = 0;
  while ((opt = getopt(argc, argv, "h:p:n:r:f:t:s:qm:T:c:e:E:")) != -1) {
    switch (opt) {
      case 'h': host = optarg; break;
      case 'p': port = atoi(optarg); break;
      case 'n': count = atoll(optarg); break;
      case 'r': rate = atof(optarg); break;
      case 'f': payload_path = optarg; break;
      case 't': template_path = optarg; break;
      case 's': nsrc = atoi(optarg); break;
      case 'q': patch_seq = 1; break;
      case 'm': stream_path = optarg; break;
      case 'T': stream_tmpl_path = optarg; break;
      case 'c': catchup = atof(optarg); break;
      case 'e': pass_off = atoi(optarg); break;
      case 'E': pass_base = (uint32_t)strtoul(optarg, NULL, 10); break;
      default: fprintf(stderr, "usage: udp_send -h ip -p port -n count -r rate [-c factor] (-f payload [-t template] [-q] | -m stream [-T templates] [-e offset [-E base]]) [-s nsrc]\n"); return 2;
    }
  }
  if ((!payload_path == !stream_path) || (stream_path && patch_seq) || port <= 0 || nsrc < 1 ||
      nsrc > MAXSRC || (pass_off >= 0 && !stream_path)) {
    fprintf(stderr, "bad arguments\n");
    return 2;
  }
  size_t plen = 0, tlen = 0;
  unsigned char *payload = payload_path ? read_file(payload_path, &plen) : NULL;
  /* Stream mode: each source's messages and where it is in them. */
  msg_t *smsg[MAXSRC];
  int scount[MAXSRC], scur[MAXSRC];
  long long spasses[MAXSRC], max_passes = 0;
  int nstmpl = 0;
  msg_t *stmpl = NULL;
  if (stream_path) {
    int n;
    msg_t *all = read_msgs(stream_path, &n);
    for (int k = 0; k < nsrc; k++) {
      smsg[k] = malloc(sizeof(msg_t) * (size_t)(n / nsrc + 1));
      scount[k] = 0;
      scur[k] = 0;
      spasses[k] = 0;
    }
    for (int i = 0; i < n; i++) {
      if (pass_off >= 0) {
        if (all[i].len < (size_t)pass_off + 4 || all[i].len < 8) {
          fprintf(stderr, "%s: message %d has no u32 at %d\n", stream_path, i, pass_off);
          return 2;
        }
        add_be32(all[i].p + pass_off, pass_base);
        add_be32(all[i].p + 4, pass_base);
      }
      smsg[i % nsrc][scount[i % nsrc]++] = all[i];
    }
    for (int k = 0; k < nsrc; k++) {
      if (scount[k] == 0) { fprintf(stderr, "%s: no message for source %d\n", stream_path, k); return 2; }
    }
    if (stream_tmpl_path) stmpl = read_msgs(stream_tmpl_path, &nstmpl);
  }
  unsigned char *tmpl = template_path ? read_file(template_path, &tlen) : NULL;

  struct sockaddr_storage dst;
  socklen_t dlen;
  memset(&dst, 0, sizeof dst);
  struct sockaddr_in *d4 = (struct sockaddr_in *)&dst;
  struct sockaddr_in6 *d6 = (struct sockaddr_in6 *)&dst;
  int family;
  if (inet_pton(AF_INET, host, &d4->sin_addr) == 1) {
    d4->sin_family = family = AF_INET; d4->sin_port = htons(port); dlen = sizeof *d4;
  } else if (inet_pton(AF_INET6, host, &d6->sin6_addr) == 1) {
    d6->sin6_family = family = AF_INET6; d6->sin6_port = htons(port); dlen = sizeof *d6;
  } else { fprintf(stderr, "bad host %s\n", host); return 2; }

  int fds[MAXSRC];
  uint32_t seq[MAXSRC];
  for (int i = 0; i < nsrc; i++) {
    fds[i] = socket(family, SOCK_DGRAM, 0);
    int sb = 4 << 20;
    setsockopt(fds[i], SOL_SOCKET, SO_SNDBUF, &sb, sizeof sb);
    if (connect(fds[i], (struct sockaddr *)&dst, dlen) != 0) { perror("connect"); return 1; }
    seq[i] = 0;
    if (tmpl) send(fds[i], tmpl, tlen, 0);
    for (int t = 0; t < nstmpl; t++) send(fds[i], stmpl[t].p, stmpl[t].len, 0);
  }
  if (tmpl || nstmpl) usleep(100000); /* let the collector install the template before data */

  /* one buffer per batch slot so sequence patching does not alias */
  long long batch = BATCH_MIN;
  if (rate * BURST_SECONDS > batch) batch = (long long)(rate * BURST_SECONDS);
  if (batch > BATCH_MAX) batch = BATCH_MAX;
  unsigned char *bufs = malloc((size_t)BATCH_MAX * (plen > 0 ? plen : 1));
  struct mmsghdr msgs[BATCH_MAX];
  struct iovec iov[BATCH_MAX];
  for (int i = 0; i < BATCH_MAX; i++) {
    if (payload) memcpy(bufs + (size_t)i * plen, payload, plen);
    iov[i].iov_base = bufs + (size_t)i * plen;
    iov[i].iov_len = plen;
    memset(&msgs[i], 0, sizeof msgs[i]);
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }

  long long sent = 0, errors = 0, max_behind = 0;
  int src = 0;
  double t0 = now_s(), next_send = 0;
  while (sent < count) {
    long long due = count;
    double t = now_s();
    if (rate > 0) {
      due = (long long)((t - t0) * rate) + 1;
      if (due > count) due = count;
    }
    long long n = due - sent;
    if (n > max_behind) max_behind = n;
    if (n > 0 && t < next_send) n = 0; /* behind, but catching up no faster than -c allows */
    if (n <= 0) {
      /* Sleep rather than spin: on a 2-core box a spinning sender steals the receiver's CPU.
       * The schedule is absolute (due from t0), so oversleeping only makes a small burst. */
      struct timespec ts = {0, 50000};
      nanosleep(&ts, NULL);
      continue;
    }
    /* Behind by more than a batch: two in one call (see BATCH_MAX's notes). */
    long long cap = n > batch ? 2 * batch : batch;
    if (cap > BATCH_MAX) cap = BATCH_MAX;
    if (n > cap) n = cap;
    /* A batch ends with the round: the next round's messages are patched first. */
    if (stream_path && pass_off >= 0 && scur[src] + n > scount[src]) n = scount[src] - scur[src];
    if (catchup > 0 && rate > 0) next_send = t + (double)n / (catchup * rate);
    if (patch_seq && plen >= 12) {
      for (int i = 0; i < n; i++) {
        uint32_t s = htonl(++seq[src]);
        memcpy(bufs + (size_t)i * plen + 8, &s, 4);
      }
    }
    if (stream_path) {
      for (int i = 0; i < n; i++) {
        msg_t *m = &smsg[src][(scur[src] + i) % scount[src]];
        iov[i].iov_base = m->p;
        iov[i].iov_len = m->len;
      }
    }
    int r = sendmmsg(fds[src], msgs, (unsigned)n, 0);
    if (r < 0) {
      if (errno != EAGAIN && errno != ENOBUFS && errno != EINTR && errno != ECONNREFUSED) { perror("sendmmsg"); return 1; }
      errors++;
      if (patch_seq) seq[src] -= (uint32_t)n;
      continue;
    }
    if (patch_seq && r < n) seq[src] -= (uint32_t)(n - r);
    if (stream_path) {
      scur[src] = (scur[src] + r) % scount[src];
      if (r > 0 && scur[src] == 0 && pass_off >= 0) {
        for (int i = 0; i < scount[src]; i++) {
          add_be32(smsg[src][i].p + pass_off, 1);
          add_be32(smsg[src][i].p + 4, 1);
        }
        if (++spasses[src] > max_passes) max_passes = spasses[src];
      }
    }
    sent += r;
    src = (src + 1) % nsrc;
  }
  double secs = now_s() - t0;
  printf("{\"sent\":%lld,\"seconds\":%.6f,\"rate\":%.1f,\"send_errors\":%lld,\"max_behind\":%lld,\"passes\":%lld}\n",
         sent, secs, secs > 0 ? sent / secs : 0.0, errors, max_behind, max_passes);
  return 0;
}
