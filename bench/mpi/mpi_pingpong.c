/* MPI ping-pong between ranks 0 and 1, run by scripts/bench-mpi through Open MPI on fabq and on
 * the alternatives it is compared with:
 *   mpi_pingpong [-t seconds per size] [-r repetitions] [-s largest size]
 * For each size (8 B, then 64 B to 4 MiB by powers of 4) rank 0 sends, rank 1 receives and
 * sends the same bytes back. A warm-up of 20 round trips, each checked, also times the path;
 * from their median rank 0 chooses the iterations of a repetition so that all repetitions of a size
 * together take about the given time (0.25 s by default), between 4 and 200000, and tells
 * rank 1. Each repetition sends a pattern of its own, both receive buffers cleared before it,
 * and both ranks check what they hold after it, so a path that loses or corrupts bytes fails
 * (MPI_Abort, exit status not 0) instead of giving a figure.
 *
 * Output of rank 0, per size: one readable line and one CSV line
 *   csv,<bytes>,<latency us>,<bandwidth MB/s>,<min latency us>,<max latency us>,<iterations>,<reps>
 * latency = half the round trip, the median over the repetitions (min and max beside it);
 * bandwidth = bytes / median latency (10^6 B/s), what one direction carries in a ping-pong.
 * Last line: "mpi_pingpong: OK (2 ranks, <k> network namespaces)". Ranks past 1 only wait. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_netns.h"

enum { TAG = 17, CTL_TAG = 18, WARMUP = 20, MAX_REPS = 31 };

static int rank;

#define CHECK(cond, ...)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      fprintf(stderr, "mpi_pingpong rank %d: FAILED: %s:%d: ", rank, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                                       \
      fprintf(stderr, "\n");                                                              \
      fflush(stderr);                                                                     \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                       \
    }                                                                                     \
  } while (0)

/* Every 8-byte word differs from its neighbours and from the same word of any other seed. */
static uint64_t word(uint64_t seed, size_t i) {
  uint64_t x = (seed + 1) * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 29);
}

static void stamp(unsigned char* buf, size_t n, uint64_t seed) {
  for (size_t i = 0; i * 8 < n; ++i) {
    uint64_t w = word(seed, i);
    memcpy(buf + i * 8, &w, n - i * 8 < 8 ? n - i * 8 : 8);
  }
}

static void verify(const unsigned char* buf, size_t n, uint64_t seed, const char* what) {
  for (size_t i = 0; i * 8 < n; ++i) {
    uint64_t w = word(seed, i);
    size_t len = n - i * 8 < 8 ? n - i * 8 : 8;
    if (memcmp(buf + i * 8, &w, len) != 0) {
      size_t b = 0;
      while (b < len && buf[i * 8 + b] == ((const unsigned char*)&w)[b]) ++b;
      CHECK(0, "%s, %zu bytes: byte %zu is 0x%02x, expected 0x%02x", what, n, i * 8 + b,
            buf[i * 8 + b], ((const unsigned char*)&w)[b]);
    }
  }
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* Rank 0's side of `iters` round trips of n bytes; returns the seconds they took. */
static double ping(unsigned char* sbuf, unsigned char* rbuf, int n, long iters) {
  double t0 = MPI_Wtime();
  for (long i = 0; i < iters; ++i) {
    MPI_Send(sbuf, n, MPI_BYTE, 1, TAG, MPI_COMM_WORLD);
    MPI_Recv(rbuf, n, MPI_BYTE, 1, TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  return MPI_Wtime() - t0;
}

static void pong(unsigned char* buf, int n, long iters) {
  for (long i = 0; i < iters; ++i) {
    MPI_Status st;
    MPI_Recv(buf, n, MPI_BYTE, 0, TAG, MPI_COMM_WORLD, &st);
    int count = -1;
    MPI_Get_count(&st, MPI_BYTE, &count);
    CHECK(count == n, "received %d bytes, expected %d", count, n);
    MPI_Send(buf, n, MPI_BYTE, 0, TAG, MPI_COMM_WORLD);
  }
}

static void usage(void) {
  if (rank == 0)
    fprintf(stderr, "usage: mpi_pingpong [-t seconds per size] [-r reps (1-%d)] [-s largest]\n",
            MAX_REPS);
  MPI_Abort(MPI_COMM_WORLD, 2);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  double per_size = 0.25;
  int reps = 7;
  long largest = 4L << 20;
  int opt;
  while ((opt = getopt(argc, argv, "t:r:s:")) != -1) {
    if (opt == 't')
      per_size = atof(optarg);
    else if (opt == 'r')
      reps = atoi(optarg);
    else if (opt == 's')
      largest = atol(optarg);
    else
      usage();
  }
  if (per_size <= 0 || reps < 1 || reps > MAX_REPS || largest < 8 || largest > (1L << 30)) usage();
  CHECK(size >= 2, "needs 2 ranks, has %d", size);

  unsigned char* sbuf = malloc((size_t)largest);
  unsigned char* rbuf = malloc((size_t)largest);
  CHECK(sbuf && rbuf, "out of memory for %ld bytes", largest);
  memset(sbuf, 0, (size_t)largest);
  memset(rbuf, 0, (size_t)largest);

  if (rank == 0) {
    char host[256] = "?";
    gethostname(host, sizeof(host));
    printf(
        "mpi_pingpong: ranks 0 and 1 of %d, %d repetitions of about %.2f s per size; "
        "latency = half the round trip, bandwidth = bytes / latency\n",
        size, reps, per_size);
    printf("%10s %12s %12s %12s %12s %9s\n", "bytes", "latency us", "MB/s", "min us", "max us",
           "iters");
    fflush(stdout);
  }

  uint64_t seed = 0;
  for (long n = 8; n <= largest; n = n == 8 ? 64 : n * 4) {
    int bytes = (int)n;
    long iters = 0;
    /* Warm-up: every round trip checked on both sides, with a pattern of its own. */
    double warm[WARMUP];
    for (int w = 0; w < WARMUP; ++w, ++seed) {
      if (rank == 0) {
        stamp(sbuf, (size_t)n, seed);
        memset(rbuf, 0, (size_t)n);
        warm[w] = ping(sbuf, rbuf, bytes, 1);
        verify(rbuf, (size_t)n, seed, "warm-up echo");
      } else if (rank == 1) {
        memset(rbuf, 0, (size_t)n);
        pong(rbuf, bytes, 1);
        verify(rbuf, (size_t)n, seed, "warm-up message");
      }
    }
    if (rank == 0) {
      /* The median warm-up round trip: the first ones set up connections, and a rank that
       * lost its core for a scheduler tick must not decide the count. */
      qsort(warm, WARMUP, sizeof(warm[0]), cmp_double);
      double rtt = warm[WARMUP / 2];
      double want = per_size / reps / (rtt > 1e-7 ? rtt : 1e-7);
      iters = want < 4 ? 4 : want > 200000 ? 200000 : (long)want;
      MPI_Send(&iters, 1, MPI_LONG, 1, CTL_TAG, MPI_COMM_WORLD);
    } else if (rank == 1) {
      MPI_Recv(&iters, 1, MPI_LONG, 0, CTL_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }

    double lat[MAX_REPS];
    for (int r = 0; r < reps; ++r, ++seed) {
      if (rank == 0) {
        stamp(sbuf, (size_t)n, seed);
        memset(rbuf, 0, (size_t)n);
        lat[r] = ping(sbuf, rbuf, bytes, iters) / iters / 2 * 1e6;
        verify(rbuf, (size_t)n, seed, "echo after a timed repetition");
      } else if (rank == 1) {
        memset(rbuf, 0, (size_t)n);
        pong(rbuf, bytes, iters);
        verify(rbuf, (size_t)n, seed, "message after a timed repetition");
      }
    }
    if (rank == 0) {
      qsort(lat, (size_t)reps, sizeof(lat[0]), cmp_double);
      double med = reps % 2 ? lat[reps / 2] : (lat[reps / 2 - 1] + lat[reps / 2]) / 2;
      double bw = (double)n / med; /* bytes per us = MB/s */
      printf("%10ld %12.2f %12.1f %12.2f %12.2f %9ld\n", n, med, bw, lat[0], lat[reps - 1], iters);
      printf("csv,%ld,%.3f,%.2f,%.3f,%.3f,%ld,%d\n", n, med, bw, lat[0], lat[reps - 1], iters,
             reps);
      fflush(stdout);
    }
  }

  /* Where the ranks ran: one network namespace per host in scripts/bench-mpi. */
  const int namespaces = network_namespaces(MPI_COMM_WORLD);
  if (rank == 0) printf("mpi_pingpong: OK (%d ranks, %d network namespaces)\n", size, namespaces);
  free(sbuf);
  free(rbuf);
  MPI_Finalize();
  return 0;
}
