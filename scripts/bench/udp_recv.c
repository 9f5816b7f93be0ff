/*
 * Baseline receiver for the UDP ingest benchmark: a plain blocking recv() loop in C that only
 * counts datagrams. Speaks the same stdin/stdout protocol as scripts/bench/udp_receiver.ts:
 * prints "READY <port>" once bound, then answers every stdin line with {"count":N}; exits on
 * stdin EOF. -b sets SO_RCVBUF (0 = system default, net.core.rmem_default).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static atomic_llong count;

static void *reporter(void *arg) {
  (void)arg;
  char line[256];
  while (fgets(line, sizeof line, stdin)) {
    printf("{\"count\":%lld}\n", (long long)atomic_load(&count));
    fflush(stdout);
  }
  exit(0);
}

int main(int argc, char **argv) {
  const char *host = "127.0.0.1";
  int port = 0, rcvbuf = 0, opt;
  while ((opt = getopt(argc, argv, "h:p:b:")) != -1) {
    switch (opt) {
      case 'h': host = optarg; break;
      case 'p': port = atoi(optarg); break;
      case 'b': rcvbuf = atoi(optarg); break;
      default: return 2;
    }
  }
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, host, &a.sin_addr);
  if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0) { perror("bind"); return 1; }
  socklen_t al = sizeof a;
  getsockname(fd, (struct sockaddr *)&a, &al);
  printf("READY %d\n", ntohs(a.sin_port));
  fflush(stdout);
  pthread_t t;
  pthread_create(&t, NULL, reporter, NULL);
  static char buf[65536];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n >= 0) atomic_fetch_add(&count, 1);
  }
}
