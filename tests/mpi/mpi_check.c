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
 *   rma          MPI_Put, MPI_Get, MPI_Accumulate (SUM, REPLACE), MPI_Fetch_and_op (SUM,
 *                NO_OP) and MPI_Compare_and_swap in fence, lock (exclusive, shared, lock_all)
 *                and post/start/complete/wait epochs, and 1 MiB puts and gets, on windows of
 *                MPI_Win_create'd memory (osc/rdma over btl/ofi: fabq's RMA and atomics)
 *   bottom       struct datatypes at absolute addresses sent from and received into
 *                MPI_BOTTOM (mpi4py's testAlltoallwBottom): Send/Recv, Isend/Irecv and
 *                Sendrecv deliver the bytes; a persistent send, which Open MPI before 4.1.6
 *                hands the provider as a NULL buffer (its MTL leaves out the type's lower
 *                bound), is refused by fabq (-FI_EINVAL) and MPI_Start reports the error
 *                instead of hanging (MPI_Alltoallw from MPI_BOTTOM hangs in that Open MPI
 *                anyway: coll/basic ignores what MPI_Start returns and waits)
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

/* The rma suite: one-sided operations as osc/rdma issues them, through the window's BTL (fabq's
 * fi_write, fi_read, fi_atomic, fi_fetch_atomic and fi_compare_atomic under btl/ofi). Windows
 * come from MPI_Win_create, not MPI_Win_allocate: memory osc/rdma allocates itself may sit in a
 * shared segment that ranks of one host reach with loads and stores, user memory only over the
 * BTL. 8-byte integers and single elements: the atomics btl/ofi maps onto libfabric's. */
enum { kCells = 16, kBig = 1 << 20 };
/* Cells of the small window, each used by one check. */
enum { kPut, kGet, kSum, kReplace, kTicket, kSwap, kMismatch, kFlushed };

static int64_t* cells;
static MPI_Win cells_win;

/* Each rank's mark for a cell: never 0, which the checks use for "empty". */
static int64_t mark(int r) {
  return 1000 + r;
}

/* Every rank's cells hold `value` once all ranks have returned. */
static void reset_cells(int64_t value) {
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < kCells; ++i) cells[i] = value;
  MPI_Barrier(MPI_COMM_WORLD);
}

/* The values the ranks fetched from one shared counter that each added 1 to, in some order,
 * are 0 to size - 1, each once. */
static void check_tickets(int64_t mine, const char* how) {
  int64_t* all = calloc((size_t)size, sizeof(int64_t));
  int* seen = calloc((size_t)size, sizeof(int));
  MPI_Allgather(&mine, 1, MPI_INT64_T, all, 1, MPI_INT64_T, MPI_COMM_WORLD);
  for (int i = 0; i < size; ++i) {
    CHECK(all[i] >= 0 && all[i] < size && !seen[all[i]], "%s: rank %d fetched %lld", how, i,
          (long long)all[i]);
    seen[all[i]] = 1;
  }
  free(all);
  free(seen);
}

/* Of the ranks that all swapped their own mark into rank 0's cell holding 0, exactly one found
 * 0; the others found the winner's mark, which the cell keeps. Rank 0 stays out: Open MPI 4.1's
 * osc/rdma hands the BTL a compare-and-swap on the caller's own MPI_Win_create memory without
 * its registration, and btl/ofi dereferences the null key (a segfault in mca_btl_ofi_acswap). */
static void swap_into_rank0(int64_t* found, MPI_Win win) {
  const int64_t mine = mark(rank), empty = 0;
  *found = -1;
  if (rank != 0) MPI_Compare_and_swap(&mine, &empty, found, MPI_INT64_T, 0, kSwap, win);
}

static void check_one_swap_won(int64_t found, int64_t held, const char* how) {
  int64_t* all = calloc((size_t)size, sizeof(int64_t));
  MPI_Allgather(&found, 1, MPI_INT64_T, all, 1, MPI_INT64_T, MPI_COMM_WORLD);
  int winners = 0;
  for (int i = 1; i < size; ++i) winners += all[i] == 0;
  CHECK(winners == 1, "%s: %d ranks found the cell empty", how, winners);
  for (int i = 1; i < size; ++i) {
    CHECK(all[i] == 0 || all[i] == held, "%s: rank %d found %lld, the cell holds %lld", how, i,
          (long long)all[i], (long long)held);
  }
  CHECK(held >= mark(1) && held < mark(size), "%s: the cell holds %lld", how, (long long)held);
  free(all);
}

static void rma_fence(void) {
  reset_cells(0);
  cells[kGet] = mark(rank) * 2;
  MPI_Win_fence(MPI_MODE_NOPRECEDE, cells_win);
  const int64_t mine = mark(rank), one = 1, add = rank + 1, seven = 7 * (rank + 1);
  /* Put to the next rank, get from it; add to every rank; replace the next rank's cell. */
  int64_t got = -1;
  MPI_Put(&mine, 1, MPI_INT64_T, next_rank(), kPut, 1, MPI_INT64_T, cells_win);
  MPI_Get(&got, 1, MPI_INT64_T, next_rank(), kGet, 1, MPI_INT64_T, cells_win);
  for (int r = 0; r < size; ++r) {
    MPI_Accumulate(&add, 1, MPI_INT64_T, r, kSum, 1, MPI_INT64_T, MPI_SUM, cells_win);
  }
  MPI_Accumulate(&seven, 1, MPI_INT64_T, next_rank(), kReplace, 1, MPI_INT64_T, MPI_REPLACE,
                 cells_win);
  MPI_Win_fence(0, cells_win);
  CHECK(cells[kPut] == mark(prev_rank()), "fence put: %lld", (long long)cells[kPut]);
  CHECK(got == mark(next_rank()) * 2, "fence get: %lld", (long long)got);
  CHECK(cells[kSum] == (int64_t)size * (size + 1) / 2, "fence accumulate sum: %lld",
        (long long)cells[kSum]);
  CHECK(cells[kReplace] == 7 * (prev_rank() + 1), "fence accumulate replace: %lld",
        (long long)cells[kReplace]);
  /* Fetch-and-add on rank 0's ticket counter; read the next rank's sum back (NO_OP);
   * compare-and-swap into rank 0's empty cell, and into one that never matches. */
  int64_t ticket = -1, peek = -1, found = -1, unmatched = -1;
  const int64_t never = -5;
  MPI_Fetch_and_op(&one, &ticket, MPI_INT64_T, 0, kTicket, MPI_SUM, cells_win);
  MPI_Fetch_and_op(NULL, &peek, MPI_INT64_T, next_rank(), kSum, MPI_NO_OP, cells_win);
  swap_into_rank0(&found, cells_win);
  MPI_Compare_and_swap(&mine, &never, &unmatched, MPI_INT64_T, next_rank(), kMismatch, cells_win);
  MPI_Win_fence(0, cells_win);
  CHECK(peek == (int64_t)size * (size + 1) / 2, "fence fetch_and_op no_op: %lld", (long long)peek);
  CHECK(unmatched == 0 && cells[kMismatch] == 0, "fence compare_and_swap mismatch: %lld, %lld",
        (long long)unmatched, (long long)cells[kMismatch]);
  if (rank == 0) CHECK(cells[kTicket] == size, "fence tickets: %lld", (long long)cells[kTicket]);
  check_tickets(ticket, "fence fetch_and_op sum");
  int64_t swapped = cells[kSwap];
  MPI_Bcast(&swapped, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  check_one_swap_won(found, swapped, "fence compare_and_swap");
  /* No epoch after this one: the lock epochs that follow must not overlap a fence's. */
  MPI_Win_fence(MPI_MODE_NOSUCCEED, cells_win);
}

static void rma_lock(void) {
  reset_cells(0);
  const int64_t mine = mark(rank), one = 1, add = rank + 1;
  /* Exclusive: put into the next rank, then take a ticket from rank 0, one rank at a time. */
  MPI_Win_lock(MPI_LOCK_EXCLUSIVE, next_rank(), 0, cells_win);
  MPI_Put(&mine, 1, MPI_INT64_T, next_rank(), kPut, 1, MPI_INT64_T, cells_win);
  MPI_Win_unlock(next_rank(), cells_win);
  int64_t ticket = -1;
  MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, cells_win);
  MPI_Fetch_and_op(&one, &ticket, MPI_INT64_T, 0, kTicket, MPI_SUM, cells_win);
  MPI_Win_unlock(0, cells_win);
  MPI_Barrier(MPI_COMM_WORLD);
  /* Reads of one's own window memory need an epoch on it to see what others wrote. */
  MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, cells_win);
  CHECK(cells[kPut] == mark(prev_rank()), "exclusive put: %lld", (long long)cells[kPut]);
  if (rank == 0) {
    CHECK(cells[kTicket] == size, "exclusive tickets: %lld", (long long)cells[kTicket]);
  }
  MPI_Win_unlock(rank, cells_win);
  check_tickets(ticket, "exclusive fetch_and_op sum");

  /* Shared: all ranks at once add to rank 0, swap into its empty cell, replace in the next. */
  int64_t found = -1;
  MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, cells_win);
  MPI_Accumulate(&add, 1, MPI_INT64_T, 0, kSum, 1, MPI_INT64_T, MPI_SUM, cells_win);
  swap_into_rank0(&found, cells_win);
  MPI_Win_unlock(0, cells_win);
  MPI_Win_lock(MPI_LOCK_SHARED, next_rank(), 0, cells_win);
  MPI_Accumulate(&mine, 1, MPI_INT64_T, next_rank(), kReplace, 1, MPI_INT64_T, MPI_REPLACE,
                 cells_win);
  MPI_Win_unlock(next_rank(), cells_win);
  MPI_Barrier(MPI_COMM_WORLD);
  int64_t sum = -1, swapped = -1, replaced = -1;
  MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, cells_win);
  MPI_Fetch_and_op(NULL, &sum, MPI_INT64_T, 0, kSum, MPI_NO_OP, cells_win);
  MPI_Fetch_and_op(NULL, &swapped, MPI_INT64_T, 0, kSwap, MPI_NO_OP, cells_win);
  MPI_Win_unlock(0, cells_win);
  MPI_Win_lock(MPI_LOCK_SHARED, next_rank(), 0, cells_win);
  MPI_Get(&replaced, 1, MPI_INT64_T, next_rank(), kReplace, 1, MPI_INT64_T, cells_win);
  MPI_Win_unlock(next_rank(), cells_win);
  CHECK(sum == (int64_t)size * (size + 1) / 2, "shared accumulate sum: %lld", (long long)sum);
  CHECK(replaced == mine, "shared accumulate replace: %lld", (long long)replaced);
  check_one_swap_won(found, swapped, "shared compare_and_swap");

  /* lock_all: a put to the next rank, flushed, is what a get from it then reads. */
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Win_lock_all(0, cells_win);
  const int64_t flushed = mark(rank) * 3;
  int64_t back = -1, peek = -1;
  MPI_Put(&flushed, 1, MPI_INT64_T, next_rank(), kFlushed, 1, MPI_INT64_T, cells_win);
  MPI_Win_flush(next_rank(), cells_win);
  MPI_Get(&back, 1, MPI_INT64_T, next_rank(), kFlushed, 1, MPI_INT64_T, cells_win);
  MPI_Fetch_and_op(NULL, &peek, MPI_INT64_T, next_rank(), kFlushed, MPI_NO_OP, cells_win);
  MPI_Win_unlock_all(cells_win);
  CHECK(back == flushed, "lock_all get after flushed put: %lld", (long long)back);
  CHECK(peek == flushed, "lock_all fetch_and_op no_op after flushed put: %lld", (long long)peek);
}

static void rma_pscw(void) {
  reset_cells(0);
  /* Each rank exposes its window to the previous rank and accesses the next one's. */
  MPI_Group world, from, to;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  const int prev = prev_rank(), next = next_rank();
  MPI_Group_incl(world, 1, &prev, &from);
  MPI_Group_incl(world, 1, &next, &to);
  cells[kGet] = mark(rank) * 5;
  const int64_t mine = mark(rank), add = rank + 1, one = 1;
  int64_t got = -1, ticket = -1, found = -1;
  MPI_Win_post(from, 0, cells_win);
  MPI_Win_start(to, 0, cells_win);
  MPI_Put(&mine, 1, MPI_INT64_T, next, kPut, 1, MPI_INT64_T, cells_win);
  MPI_Get(&got, 1, MPI_INT64_T, next, kGet, 1, MPI_INT64_T, cells_win);
  MPI_Accumulate(&add, 1, MPI_INT64_T, next, kSum, 1, MPI_INT64_T, MPI_SUM, cells_win);
  MPI_Accumulate(&mine, 1, MPI_INT64_T, next, kReplace, 1, MPI_INT64_T, MPI_REPLACE, cells_win);
  MPI_Fetch_and_op(&one, &ticket, MPI_INT64_T, next, kTicket, MPI_SUM, cells_win);
  const int64_t empty = 0;
  MPI_Compare_and_swap(&mine, &empty, &found, MPI_INT64_T, next, kSwap, cells_win);
  MPI_Win_complete(cells_win);
  MPI_Win_wait(cells_win);
  CHECK(cells[kPut] == mark(prev), "pscw put: %lld", (long long)cells[kPut]);
  CHECK(got == mark(next) * 5, "pscw get: %lld", (long long)got);
  CHECK(cells[kSum] == prev + 1, "pscw accumulate sum: %lld", (long long)cells[kSum]);
  CHECK(cells[kReplace] == mark(prev), "pscw accumulate replace: %lld", (long long)cells[kReplace]);
  CHECK(ticket == 0 && cells[kTicket] == 1, "pscw fetch_and_op sum: fetched %lld, holds %lld",
        (long long)ticket, (long long)cells[kTicket]);
  CHECK(found == 0 && cells[kSwap] == mark(prev), "pscw compare_and_swap: found %lld, holds %lld",
        (long long)found, (long long)cells[kSwap]);
  MPI_Group_free(&from);
  MPI_Group_free(&to);
  MPI_Group_free(&world);
}

/* 1 MiB to and from the next rank: larger than osc/rdma's 32 KiB buffers and than the puts and
 * gets it issues in one piece, so it arrives in several. */
static void rma_large(void) {
  unsigned char* window = malloc(kBig);
  unsigned char* out = malloc(kBig);
  unsigned char* in = malloc(kBig);
  CHECK(window != NULL && out != NULL && in != NULL, "malloc");
  for (size_t i = 0; i < kBig; ++i) {
    window[i] = (unsigned char)(i * 7 + rank);
    out[i] = (unsigned char)(i * 131 + rank);
  }
  memset(in, 0, kBig);
  MPI_Win win;
  MPI_Win_create(window, kBig, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
  MPI_Win_fence(MPI_MODE_NOPRECEDE, win);
  MPI_Get(in, kBig, MPI_BYTE, next_rank(), 0, kBig, MPI_BYTE, win);
  MPI_Win_fence(0, win);
  for (size_t i = 0; i < kBig; ++i) {
    CHECK(in[i] == (unsigned char)(i * 7 + next_rank()), "1 MiB get: byte %zu differs", i);
  }
  MPI_Put(out, kBig, MPI_BYTE, next_rank(), 0, kBig, MPI_BYTE, win);
  MPI_Win_fence(MPI_MODE_NOSUCCEED, win);
  for (size_t i = 0; i < kBig; ++i) {
    CHECK(window[i] == (unsigned char)(i * 131 + prev_rank()), "1 MiB put: byte %zu differs", i);
  }
  /* The same under lock_all, read back before the epoch ends. */
  MPI_Barrier(MPI_COMM_WORLD);
  for (size_t i = 0; i < kBig; ++i) out[i] = (unsigned char)(i * 17 + rank);
  memset(in, 0, kBig);
  MPI_Win_lock_all(0, win);
  MPI_Put(out, kBig, MPI_BYTE, next_rank(), 0, kBig, MPI_BYTE, win);
  MPI_Win_flush(next_rank(), win);
  MPI_Get(in, kBig, MPI_BYTE, next_rank(), 0, kBig, MPI_BYTE, win);
  MPI_Win_unlock_all(win);
  CHECK(memcmp(in, out, kBig) == 0, "1 MiB lock_all get after flushed put differs");
  MPI_Win_free(&win);
  free(window);
  free(out);
  free(in);
}

static void rma(void) {
  cells = calloc(kCells, sizeof(int64_t));
  CHECK(cells != NULL, "calloc");
  MPI_Win_create(cells, kCells * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD,
                 &cells_win);
  rma_fence();
  rma_lock();
  rma_pscw();
  MPI_Win_free(&cells_win);
  free(cells);
  rma_large();
}

/* The bottom suite: `count` ints at `at` as one struct datatype whose only displacement is the
 * absolute address of `at` (MPI_Get_address), used from MPI_BOTTOM. */
static MPI_Datatype absolute_ints(int* at, int count) {
  MPI_Aint where;
  MPI_Get_address(at, &where);
  MPI_Datatype t, ints = MPI_INT;
  MPI_Type_create_struct(1, &count, &where, &ints, &t);
  MPI_Type_commit(&t);
  return t;
}

static void check_ints(const int* got, int count, int from, const char* how) {
  for (int i = 0; i < count; ++i) {
    CHECK(got[i] == from * 1000 + i, "%s: int %d is %d, not %d", how, i, got[i], from * 1000 + i);
  }
}

static void bottom(void) {
  enum { kCount = 64 };
  const int peer = rank ^ 1;
  if (peer >= size) return;
  int out[kCount], in[kCount];
  for (int i = 0; i < kCount; ++i) out[i] = rank * 1000 + i;
  MPI_Datatype st = absolute_ints(out, kCount);
  MPI_Datatype rt = absolute_ints(in, kCount);
  MPI_Request rq[2];

  memset(in, 0, sizeof(in));
  if (rank < peer) {
    MPI_Send(MPI_BOTTOM, 1, st, peer, 1, MPI_COMM_WORLD);
    MPI_Recv(MPI_BOTTOM, 1, rt, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  } else {
    MPI_Recv(MPI_BOTTOM, 1, rt, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Send(MPI_BOTTOM, 1, st, peer, 1, MPI_COMM_WORLD);
  }
  check_ints(in, kCount, peer, "MPI_Send from MPI_BOTTOM");

  memset(in, 0, sizeof(in));
  MPI_Irecv(MPI_BOTTOM, 1, rt, peer, 2, MPI_COMM_WORLD, &rq[0]);
  MPI_Isend(MPI_BOTTOM, 1, st, peer, 2, MPI_COMM_WORLD, &rq[1]);
  MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
  check_ints(in, kCount, peer, "MPI_Isend from MPI_BOTTOM");

  memset(in, 0, sizeof(in));
  MPI_Sendrecv(MPI_BOTTOM, 1, st, peer, 3, MPI_BOTTOM, 1, rt, peer, 3, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
  check_ints(in, kCount, peer, "MPI_Sendrecv from MPI_BOTTOM");

  /* A persistent send: the data, or an error MPI_Start reports; never a hang. */
  memset(in, 0, sizeof(in));
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Irecv(MPI_BOTTOM, 1, rt, peer, 4, MPI_COMM_WORLD, &rq[0]);
  MPI_Send_init(MPI_BOTTOM, 1, st, peer, 4, MPI_COMM_WORLD, &rq[1]);
  const int started = MPI_Start(&rq[1]);
  if (started == MPI_SUCCESS) {
    MPI_Wait(&rq[1], MPI_STATUS_IGNORE);
  } else {
    /* Refused: the peer's receive still wants its message. */
    MPI_Send(out, kCount, MPI_INT, peer, 4, MPI_COMM_WORLD);
  }
  MPI_Request_free(&rq[1]);
  MPI_Wait(&rq[0], MPI_STATUS_IGNORE);
  check_ints(in, kCount, peer, "a persistent send from MPI_BOTTOM");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  int refused = started != MPI_SUCCESS, any = 0;
  MPI_Allreduce(&refused, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any) {
    printf("mpi_check bottom: a persistent send from MPI_BOTTOM was refused (MPI_Start: error)\n");
  }
  MPI_Type_free(&st);
  MPI_Type_free(&rt);
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
  } else if (strcmp(suite, "rma") == 0) {
    rma();
  } else if (strcmp(suite, "bottom") == 0) {
    bottom();
  } else {
    CHECK(0, "unknown suite '%s' (p2p, collectives, threads, large, onesided, rma, bottom)", suite);
  }
  /* Where the ranks ran: one network namespace per host in tests/mpi/mpi_test.sh. */
  const int namespaces = network_namespaces(MPI_COMM_WORLD);
  if (rank == 0) {
    printf("mpi_check %s: OK (%d ranks, %d network namespaces)\n", suite, size, namespaces);
  }
  MPI_Finalize();
  return 0;
}
