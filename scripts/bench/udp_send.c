/*
 * Paced UDP load generator for the ingest benchmark (scripts/bench.ts compiles it with gcc).
 * Sends COUNT copies of a payload file at RATE datagrams/s from NSRC source sockets (round
 * robin, so SO_REUSEPORT receivers see several 4-tuples like several Antrea Agents would).
 * Optionally sends a template file first from every source and patches the IPFIX sequence
 * number (bytes 8..11) so IPFIX collectors such as nfcapd see a well-formed stream.
 * Only ever sends to the address given with -h (the bench passes 127.0.0.1).
 * Prints one JSON line: {"sent":N,"seconds":S,"rate":R}.
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

#define BATCH 32
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

int main(int argc, char **argv) {
  const char *host = "127.0.0.1", *payload_path = NULL, *template_path = NULL;
  int port = 0, nsrc = 1, patch_seq = 0, opt;
  long long count = 1000;
  double rate = 0;
  while ((opt = getopt(argc, argv, "h:p:n:r:f:t:s:q")) != -1) {
    switch (opt) {
      case 'h': host = optarg; break;
      case 'p': port = atoi(optarg); break;
      case 'n': count = atoll(optarg); break;
      case 'r': rate = atof(optarg); break;
      case 'f': payload_path = optarg; break;
      case 't': template_path = optarg; break;
      case 's': nsrc = atoi(optarg); break;
      case 'q': patch_seq = 1; break;
      default: fprintf(stderr, "usage: udp_send -h ip -p port -n count -r rate -f payload [-t template] [-s nsrc] [-q]\n"); return 2;
    }
  }
  if (!payload_path || port <= 0 || nsrc < 1 || nsrc > MAXSRC) { fprintf(stderr, "bad arguments\n"); return 2; }
  size_t plen, tlen = 0;
  unsigned char *payload = read_file(payload_path, &plen);
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
  }
  if (tmpl) usleep(100000); /* let the collector install the template before data */

  /* one buffer per batch slot so sequence patching does not alias */
  unsigned char *bufs = malloc((size_t)BATCH * plen);
  struct mmsghdr msgs[BATCH];
  struct iovec iov[BATCH];
  for (int i = 0; i < BATCH; i++) {
    memcpy(bufs + (size_t)i * plen, payload, plen);
    iov[i].iov_base = bufs + (size_t)i * plen;
    iov[i].iov_len = plen;
    memset(&msgs[i], 0, sizeof msgs[i]);
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }

  long long sent = 0, errors = 0;
  int src = 0;
  double t0 = now_s();
  while (sent < count) {
    long long due = count;
    if (rate > 0) {
      due = (long long)((now_s() - t0) * rate) + 1;
      if (due > count) due = count;
    }
    long long n = due - sent;
    if (n <= 0) {
      /* Sleep rather than spin: on a 2-core box a spinning sender steals the receiver's CPU.
       * The schedule is absolute (due from t0), so oversleeping only makes a small burst. */
      struct timespec ts = {0, 50000};
      nanosleep(&ts, NULL);
      continue;
    }
    if (n > BATCH) n = BATCH;
    if (patch_seq && plen >= 12) {
      for (int i = 0; i < n; i++) {
        uint32_t s = htonl(++seq[src]);
        memcpy(bufs + (size_t)i * plen + 8, &s, 4);
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
    sent += r;
    src = (src + 1) % nsrc;
  }
  double secs = now_s() - t0;
  printf("{\"sent\":%lld,\"seconds\":%.6f,\"rate\":%.1f,\"send_errors\":%lld}\n", sent, secs,
         secs > 0 ? sent / secs : 0.0, errors);
  return 0;
}
