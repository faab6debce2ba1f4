/* Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
 *
 * A C trainer over the Batchcast C API (docs/api.md). Rank 0 starts a leader over the
 * dataset in its own process; every rank (rank 0 too) attaches a consumer to it, sees the
 * whole stream, and checks it got each of the dataset's samples exactly once per epoch
 * (fill repeats aside) with the same pixels as every other rank.
 *
 *   mpirun -n 3 ./c_trainer train.h5 240 2 16     # DATASET SAMPLES EPOCHS BATCH_SIZE
 *
 * Prints one "c_trainer: rank R ... OK" line per rank and exits 0, or names what was wrong.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <batchcast/batchcast_c.h>

#define CHECK_BC(call)                                                                 \
  do {                                                                                 \
    bc_status_t st_ = (call);                                                          \
    if (st_ != BC_SUCCESS) {                                                           \
      fprintf(stderr, "c_trainer: rank %d: %s failed: %s: %s\n", rank, #call,          \
              bc_status_string(st_), bc_last_error());                                 \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                    \
    }                                                                                  \
  } while (0)

/* FNV-1a over one sample's bytes. */
static uint64_t Hash(const unsigned char* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (argc != 5) {
    if (rank == 0) fprintf(stderr, "usage: c_trainer DATASET SAMPLES EPOCHS BATCH_SIZE\n");
    MPI_Finalize();
    return 2;
  }
  const char* dataset = argv[1];
  int samples = atoi(argv[2]), epochs = atoi(argv[3]), batch_size = atoi(argv[4]);

  /* Rank 0 leads: one decode of the stream for every rank. */
  char options[1024];
  snprintf(options, sizeof(options),
           "--dataset %s --epochs %d --batch-size %d --image-size 32 --seed 7 --threads 1",
           dataset, epochs, batch_size);
  bc_leader_t leader = NULL;
  char address[256] = {0};
  if (rank == 0) {
    bc_leader_config_t lc;
    bc_leader_config_init(&lc);
    lc.options = options;
    lc.expected_consumers = world;
    CHECK_BC(bc_leader_start(&lc, &leader));
    snprintf(address, sizeof(address), "%s", bc_leader_address(leader));
  }
  MPI_Bcast(address, sizeof(address), MPI_CHAR, 0, MPI_COMM_WORLD);

  bc_consumer_config_t cc;
  bc_consumer_config_init(&cc);
  cc.address = address;
  cc.options = options;
  cc.rank = rank;
  bc_consumer_t consumer;
  CHECK_BC(bc_consumer_attach(&cc, &consumer));

  int* seen = calloc((size_t)samples * epochs, sizeof(int));
  uint64_t* sums = calloc((size_t)epochs, sizeof(uint64_t));
  long total = 0, repeats = 0;
  bc_batch_t batch;
  bc_batch_info_t info;
  bc_batch_info_init(&info);
  bc_status_t st;
  while ((st = bc_consumer_next(consumer, &batch, &info)) == BC_SUCCESS) {
    size_t per_sample = info.images.nbytes / (size_t)info.size;
    for (int64_t i = 0; i < info.size; ++i) {
      int64_t id = info.sample_ids[i];
      if (id < 0 || id >= samples || info.epoch >= (uint64_t)epochs) {
        fprintf(stderr, "c_trainer: rank %d: sample %lld of epoch %llu is out of range\n", rank,
                (long long)id, (unsigned long long)info.epoch);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      if (seen[info.epoch * samples + id]++ == 0) {
        const unsigned char* px = (const unsigned char*)info.images.data + i * per_sample;
        sums[info.epoch] += Hash(px, per_sample) ^ (uint64_t)id;
      }
    }
    total += info.size;
    repeats += info.repeats;
    CHECK_BC(bc_batch_release(batch));
  }
  if (st != BC_END_OF_STREAM) {
    fprintf(stderr, "c_trainer: rank %d: next: %s: %s\n", rank, bc_status_string(st),
            bc_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  CHECK_BC(bc_consumer_detach(consumer));

  int bad = 0;
  for (int e = 0; e < epochs; ++e) {
    for (int id = 0; id < samples; ++id) {
      if (seen[e * samples + id] == 0) {
        fprintf(stderr, "c_trainer: rank %d: epoch %d never delivered sample %d\n", rank, e, id);
        bad = 1;
      }
    }
  }
  if (total - repeats != (long)samples * epochs) {
    fprintf(stderr, "c_trainer: rank %d: %ld samples, %ld of them repeats, expected %d x %d\n",
            rank, total, repeats, samples, epochs);
    bad = 1;
  }
  /* Every rank saw the same pixels for the same samples. */
  uint64_t* lo = calloc((size_t)epochs, sizeof(uint64_t));
  uint64_t* hi = calloc((size_t)epochs, sizeof(uint64_t));
  MPI_Allreduce(sums, lo, epochs, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(sums, hi, epochs, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  for (int e = 0; e < epochs; ++e) {
    if (lo[e] != hi[e]) {
      fprintf(stderr, "c_trainer: rank %d: epoch %d checksums differ between ranks\n", rank, e);
      bad = 1;
    }
  }
  if (leader != NULL) {
    CHECK_BC(bc_leader_wait(leader, -1));
    CHECK_BC(bc_leader_destroy(leader));
  }
  const char* version;
  bc_get_version(&version);
  printf("c_trainer: rank %d of %d: batchcast %s, %d epochs x %d samples, %ld repeats, "
         "checksum %016llx: %s\n",
         rank, world, version, epochs, samples, repeats, (unsigned long long)sums[0],
         bad ? "FAILED" : "OK");
  free(seen);
  free(sums);
  free(lo);
  free(hi);
  MPI_Finalize();
  return bad;
}
