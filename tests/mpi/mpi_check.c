/* MPI programs that check their own results, run by tests/mpi/mpi_test.sh through Open MPI on
 * fabq. One suite per run:
 *   p2p          point to point: wildcards, directed receives, probes, matched probes,
 *                synchronous sends, cancel, truncation, 1000 receives outstanding
 *   collectives  barrier, bcast, reduce, allreduce, gather, scatter, allgather, alltoall, on
 *                the world and on split and duplicated communicators
 *   threads      MPI_THREAD_MULTIPLE: 4 threads per rank exchanging with both neighbours
 *   large        messages of 64 KiB to 16 MiB, their bytes checked
 *   onesided     MPI_Put, MPI_Get and MPI_Accumulate in fence epochs (through whatever
 *                one-sided component runs them: pt2pt puts them on point to point)
 * Rank 0 prints "mpi_check <suite>: OK (<n> ranks, <k> network namespaces)"; any failure
 * prints what and aborts. */
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_netns.h"

static int rank, size;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "mpi_check rank %d: %s:%d: ", rank, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
      MPI_Abort(MPI_COMM_WORLD, 1);                                            \
    }                                                                          \
  } while (0)

static int next_rank(void) {
  return (rank + 1) % size;
}
static int prev_rank(void) {
  return (rank + size - 1) % size;
}

static void p2p(void) {
  MPI_Status st;
  /* A ring through MPI_ANY_SOURCE and MPI_ANY_TAG. */
  int out = rank * 10 + 1, in = -1;
  MPI_Request rq;
  MPI_Irecv(&in, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &rq);
  MPI_Send(&out, 1, MPI_INT, next_rank(), 100 + rank, MPI_COMM_WORLD);
  MPI_Wait(&rq, &st);
  CHECK(st.MPI_SOURCE == prev_rank() && st.MPI_TAG == 100 + prev_rank(), "ring source %d tag %d",
        st.MPI_SOURCE, st.MPI_TAG);
  CHECK(in == prev_rank() * 10 + 1, "ring value %d", in);

  /* Directed receives: rank 0 takes each rank's message in reverse order of rank, although
   * all were sent with the same tag and arrive in any order. */
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    for (int src = size - 1; src >= 1; --src) {
      int v = -1;
      MPI_Recv(&v, 1, MPI_INT, src, 7, MPI_COMM_WORLD, &st);
      CHECK(v == src * 1000 && st.MPI_SOURCE == src, "from %d got %d (source %d)", src, v,
            st.MPI_SOURCE);
    }
  } else {
    int v = rank * 1000;
    MPI_Send(&v, 1, MPI_INT, 0, 7, MPI_COMM_WORLD);
  }

  /* Iprobe until a message is there, Probe, then receive what they described. */
  MPI_Barrier(MPI_COMM_WORLD);
  int msg[3] = {rank, rank + 1, rank + 2};
  MPI_Send(msg, 3, MPI_INT, next_rank(), 9, MPI_COMM_WORLD);
  int flag = 0;
  while (!flag) MPI_Iprobe(MPI_ANY_SOURCE, 9, MPI_COMM_WORLD, &flag, &st);
  int count = 0;
  MPI_Get_count(&st, MPI_INT, &count);
  CHECK(count == 3 && st.MPI_SOURCE == prev_rank(), "iprobe count %d source %d", count,
        st.MPI_SOURCE);
  MPI_Probe(prev_rank(), 9, MPI_COMM_WORLD, &st);
  int got[3];
  MPI_Recv(got, 3, MPI_INT, st.MPI_SOURCE, 9, MPI_COMM_WORLD, &st);
  CHECK(got[0] == prev_rank() && got[2] == prev_rank() + 2, "probed message %d..%d", got[0],
        got[2]);

  /* Matched probe and receive. */
  MPI_Send(msg, 2, MPI_INT, next_rank(), 11, MPI_COMM_WORLD);
  MPI_Message m;
  MPI_Mprobe(MPI_ANY_SOURCE, 11, MPI_COMM_WORLD, &m, &st);
  MPI_Get_count(&st, MPI_INT, &count);
  CHECK(count == 2, "mprobe count %d", count);
  MPI_Mrecv(got, 2, MPI_INT, &m, &st);
  CHECK(got[0] == prev_rank() && st.MPI_SOURCE == prev_rank(), "mrecv %d source %d", got[0],
        st.MPI_SOURCE);

  /* A synchronous send completes once its receive has started. */
  if (rank == 0) {
    MPI_Ssend(&out, 1, MPI_INT, size - 1, 13, MPI_COMM_WORLD);
  } else if (rank == size - 1) {
    MPI_Recv(&in, 1, MPI_INT, 0, 13, MPI_COMM_WORLD, &st);
    CHECK(in == 1, "ssend value %d", in);
  }

  /* A receive nothing will match can be cancelled. */
  MPI_Irecv(&in, 1, MPI_INT, MPI_ANY_SOURCE, 999, MPI_COMM_WORLD, &rq);
  MPI_Cancel(&rq);
  MPI_Wait(&rq, &st);
  int cancelled = 0;
  MPI_Test_cancelled(&st, &cancelled);
  CHECK(cancelled, "the receive was not cancelled");

  /* A message longer than its receive is MPI_ERR_TRUNCATE. */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Send(msg, 3, MPI_INT, next_rank(), 15, MPI_COMM_WORLD);
  int rc = MPI_Recv(got, 1, MPI_INT, prev_rank(), 15, MPI_COMM_WORLD, &st);
  int cls = MPI_SUCCESS;
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_TRUNCATE, "truncation gave error class %d", cls);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);

  /* More receives outstanding than the provider's completion queue holds. */
  enum { kMany = 1000 };
  int* inbox = calloc(kMany, sizeof(int));
  int* outbox = calloc(kMany, sizeof(int));
  MPI_Request* reqs = calloc(2 * kMany, sizeof(MPI_Request));
  for (int i = 0; i < kMany; ++i) {
    MPI_Irecv(&inbox[i], 1, MPI_INT, prev_rank(), i, MPI_COMM_WORLD, &reqs[i]);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = kMany - 1; i >= 0; --i) {
    outbox[i] = rank * kMany + i;
    MPI_Isend(&outbox[i], 1, MPI_INT, next_rank(), i, MPI_COMM_WORLD, &reqs[kMany + i]);
  }
  MPI_Waitall(2 * kMany, reqs, MPI_STATUSES_IGNORE);
  for (int i = 0; i < kMany; ++i) {
    CHECK(inbox[i] == prev_rank() * kMany + i, "outstanding receive %d got %d", i, inbox[i]);
  }
  free(inbox);
  free(outbox);
  free(reqs);
}

static void check_collectives(MPI_Comm comm) {
  int r, n;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &n);
  MPI_Barrier(comm);
  int v = r == 0 ? 4242 : -1;
  MPI_Bcast(&v, 1, MPI_INT, 0, comm);
  CHECK(v == 4242, "bcast %d", v);
  long mine = r + 1, sum = 0;
  MPI_Reduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, 0, comm);
  if (r == 0) CHECK(sum == (long)n * (n + 1) / 2, "reduce %ld", sum);
  long max = 0;
  MPI_Allreduce(&mine, &max, 1, MPI_LONG, MPI_MAX, comm);
  CHECK(max == n, "allreduce max %ld", max);
  int* all = calloc(n, sizeof(int));
  int* back = calloc(n, sizeof(int));
  MPI_Allgather(&r, 1, MPI_INT, all, 1, MPI_INT, comm);
  for (int i = 0; i < n; ++i) CHECK(all[i] == i, "allgather[%d] %d", i, all[i]);
  MPI_Gather(&r, 1, MPI_INT, all, 1, MPI_INT, n - 1, comm);
  if (r == n - 1) {
    for (int i = 0; i < n; ++i) CHECK(all[i] == i, "gather[%d] %d", i, all[i]);
  }
  for (int i = 0; i < n; ++i) all[i] = 100 * i;
  int one = -1;
  MPI_Scatter(all, 1, MPI_INT, &one, 1, MPI_INT, 0, comm);
  CHECK(one == 100 * r, "scatter %d", one);
  for (int i = 0; i < n; ++i) all[i] = r * n + i;
  MPI_Alltoall(all, 1, MPI_INT, back, 1, MPI_INT, comm);
  for (int i = 0; i < n; ++i) CHECK(back[i] == i * n + r, "alltoall[%d] %d", i, back[i]);
  free(all);
  free(back);
}

static void collectives(void) {
  check_collectives(MPI_COMM_WORLD);
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half);
  check_collectives(half);
  MPI_Comm_free(&half);
  /* Many communicators: their ids travel in the tag bits fabq matches. */
  MPI_Comm dups[64];
  for (int i = 0; i < 64; ++i) MPI_Comm_dup(MPI_COMM_WORLD, &dups[i]);
  for (int i = 63; i >= 0; i -= 9) check_collectives(dups[i]);
  for (int i = 0; i < 64; ++i) MPI_Comm_free(&dups[i]);
}

enum { kThreads = 4, kRounds = 200 };

static void* thread_main(void* arg) {
  const int t = (int)(intptr_t)arg;
  for (int i = 0; i < kRounds; ++i) {
    int out[2] = {rank, t * kRounds + i}, in[2] = {-1, -1};
    MPI_Status st;
    MPI_Sendrecv(out, 2, MPI_INT, next_rank(), t, in, 2, MPI_INT, prev_rank(), t, MPI_COMM_WORLD,
                 &st);
    CHECK(in[0] == prev_rank() && in[1] == t * kRounds + i, "thread %d round %d got %d/%d", t, i,
          in[0], in[1]);
  }
  return NULL;
}

static void threads(void) {
  pthread_t th[kThreads];
  for (int t = 0; t < kThreads; ++t) {
    CHECK(pthread_create(&th[t], NULL, thread_main, (void*)(intptr_t)t) == 0, "pthread_create");
  }
  for (int t = 0; t < kThreads; ++t) pthread_join(th[t], NULL);
}

static void large(void) {
  const size_t max = (size_t)16 << 20;
  unsigned char* out = malloc(max);
  unsigned char* in = malloc(max);
  CHECK(out != NULL && in != NULL, "malloc");
  for (size_t len = (size_t)64 << 10; len <= max; len *= 4) {
    for (size_t i = 0; i < len; ++i) out[i] = (unsigned char)(i * 131 + rank + len);
    memset(in, 0, len);
    MPI_Status st;
    MPI_Sendrecv(out, (int)len, MPI_BYTE, next_rank(), 3, in, (int)len, MPI_BYTE, prev_rank(), 3,
                 MPI_COMM_WORLD, &st);
    for (size_t i = 0; i < len; ++i) {
      CHECK(in[i] == (unsigned char)(i * 131 + prev_rank() + len), "%zu bytes: byte %zu differs",
            len, i);
    }
  }
  free(out);
  free(in);
}

static void onesided(void) {
  long buf[64] = {0};
  MPI_Win win;
  MPI_Win_create(buf, sizeof(buf), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
  MPI_Win_fence(0, win);
  long v = 1000 + rank;
  MPI_Put(&v, 1, MPI_LONG, next_rank(), rank, 1, MPI_LONG, win);
  MPI_Win_fence(0, win);
  CHECK(buf[prev_rank()] == 1000 + prev_rank(), "put: %ld", buf[prev_rank()]);
  long one = rank + 1;
  MPI_Accumulate(&one, 1, MPI_LONG, 0, 63, 1, MPI_LONG, MPI_SUM, win);
  MPI_Win_fence(0, win);
  if (rank == 0) {
    CHECK(buf[63] == (long)size * (size + 1) / 2, "accumulate: %ld", buf[63]);
  }
  long got = -1;
  MPI_Get(&got, 1, MPI_LONG, next_rank(), rank, 1, MPI_LONG, win);
  MPI_Win_fence(0, win);
  CHECK(got == 1000 + rank, "get: %ld", got);
  MPI_Win_free(&win);
}

int main(int argc, char** argv) {
  const char* suite = argc > 1 ? argv[1] : "";
  int provided = MPI_THREAD_SINGLE;
  if (strcmp(suite, "threads") == 0) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  } else {
    MPI_Init(&argc, &argv);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (strcmp(suite, "p2p") == 0) {
    p2p();
  } else if (strcmp(suite, "collectives") == 0) {
    collectives();
  } else if (strcmp(suite, "threads") == 0) {
    CHECK(provided == MPI_THREAD_MULTIPLE, "MPI_THREAD_MULTIPLE not provided (%d)", provided);
    threads();
  } else if (strcmp(suite, "large") == 0) {
    large();
  } else if (strcmp(suite, "onesided") == 0) {
    onesided();
  } else {
    CHECK(0, "unknown suite '%s' (p2p, collectives, threads, large, onesided)", suite);
  }
  /* Where the ranks ran: one network namespace per host in tests/mpi/mpi_test.sh. */
  const int namespaces = network_namespaces(MPI_COMM_WORLD);
  if (rank == 0) {
    printf("mpi_check %s: OK (%d ranks, %d network namespaces)\n", suite, size, namespaces);
  }
  MPI_Finalize();
  return 0;
}
