/* How many network namespaces the ranks of `comm` run in (one per "host" in
 * tests/mpi/netns.sh), as rank 0 sees it; the other ranks get 0. Collective over `comm`. Shared
 * by tests/mpi/mpi_check.c and bench/mpi/mpi_pingpong.c, which print it with their OK line. */
#pragma once

#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int network_namespaces(MPI_Comm comm) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  char ns[64] = "";
  if (readlink("/proc/self/ns/net", ns, sizeof(ns) - 1) < 0) strcpy(ns, "?");
  char* all = rank == 0 ? calloc((size_t)size, sizeof(ns)) : NULL;
  MPI_Gather(ns, sizeof(ns), MPI_CHAR, all, sizeof(ns), MPI_CHAR, 0, comm);
  int distinct = 0;
  if (rank == 0) {
    for (int i = 0; i < size; ++i) {
      int seen = 0;
      for (int j = 0; j < i && !seen; ++j) {
        seen = strcmp(all + i * sizeof(ns), all + j * sizeof(ns)) == 0;
      }
      distinct += !seen;
    }
    free(all);
  }
  return distinct;
}
