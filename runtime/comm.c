/*
 * comm.c - what every communicator shares (comm.h): the shares of a global
 * batch.
 */
#include "runtime/comm.h"

void gcc_comm_share(int64_t global_rows, int rank, int size, int64_t *first, int64_t *rows) {
  int64_t base = global_rows / size, extra = global_rows % size;
  *rows = base + (rank < extra ? 1 : 0);
  *first = (int64_t)rank * base + (rank < extra ? rank : extra);
}
