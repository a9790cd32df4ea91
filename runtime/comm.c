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

float gcc_comm_weight(int mean, int64_t shard_rows, int64_t global_rows) {
  if (shard_rows <= 0 || global_rows <= 0)
    return 0.0f;
  return mean ? (float)((double)shard_rows / (double)global_rows) : 1.0f;
}
