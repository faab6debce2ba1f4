/* Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
 *
 * Stale, foreign and garbage handles of the C API (label unit, so the ASan+UBSan and TSan
 * trees of scripts/sanitize.sh run it too): a batch released twice or read after its
 * release, a consumer used after bc_consumer_detach, a leader used after bc_leader_destroy,
 * one kind of handle passed as another, a made-up handle. Each is BC_ERR_INVALID_ARGUMENT
 * with a message naming the function and the handle, never a crash or a read of freed
 * memory. Also a batch asked for after BC_END_OF_STREAM (an error naming both epoch counts,
 * never a silent second end). Usage: capi_handles_test DATASET.h5 SAMPLES.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlpack/dlpack.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <batchcast/batchcast_c.h>

#include "capi_test_util.h"

/* The message names the handle as the library prints it (0x...). */
static void ExpectNamesHandle(const void* handle) {
  char hex[32];
  snprintf(hex, sizeof(hex), "0x%llx", (unsigned long long)(uintptr_t)handle);
  EXPECT(strstr(bc_last_error(), hex) != NULL);
}

static bc_consumer_t Attach(bc_leader_t leader, int epochs) {
  bc_consumer_config_t cfg;
  bc_consumer_config_init(&cfg);
  cfg.address = bc_leader_address(leader);
  cfg.options = "--batch-size 8 --buffer-depth 3";
  cfg.epochs = epochs;
  bc_consumer_t c = NULL;
  EXPECT_STATUS(bc_consumer_attach(&cfg, &c), BC_SUCCESS);
  return c;
}

/* Every batch entry point on a released batch `b`. */
static void ExpectReleased(bc_batch_t b) {
  bc_batch_info_t info;
  bc_batch_info_init(&info);
  EXPECT_STATUS(bc_batch_info(b, &info), BC_ERR_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS("bc_batch_info: bc_batch_t");
  EXPECT_ERROR_HAS("was released (bc_batch_release)");
  ExpectNamesHandle(b);
  EXPECT_STATUS(bc_batch_release(b), BC_ERR_INVALID_ARGUMENT); /* the double release */
  EXPECT_ERROR_HAS("bc_batch_release: bc_batch_t");
  EXPECT_ERROR_HAS("was released");
  ExpectNamesHandle(b);
  struct DLManagedTensor* t = (struct DLManagedTensor*)&info; /* overwritten with NULL */
  EXPECT_STATUS(bc_batch_to_dlpack(b, BC_TENSOR_IMAGES, &t), BC_ERR_INVALID_ARGUMENT);
  EXPECT(t == NULL);
  EXPECT_ERROR_HAS("was released");
  EXPECT_STATUS(bc_batch_tensor_dlpack(b, "labels", &t), BC_ERR_INVALID_ARGUMENT);
  int n = -1;
  EXPECT_STATUS(bc_batch_num_tensors(b, &n), BC_ERR_INVALID_ARGUMENT);
  const char* name = NULL;
  EXPECT_STATUS(bc_batch_tensor_name(b, 0, &name), BC_ERR_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS("bc_batch_tensor_name");
  bc_ragged_t ragged;
  bc_ragged_init(&ragged);
  EXPECT_STATUS(bc_batch_ragged(b, "tok", &ragged), BC_ERR_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS("bc_batch_ragged: bc_batch_t");
  EXPECT(ragged.offsets == NULL);
  t = (struct DLManagedTensor*)&info;
  EXPECT_STATUS(bc_batch_offsets_dlpack(b, "tok", &t), BC_ERR_INVALID_ARGUMENT);
  EXPECT(t == NULL);
}

static void TestBatchesAndConsumers(const char* dataset, int samples) {
  bc_leader_t leader = StartLeader(dataset, "");
  if (leader == NULL) return;
  bc_consumer_t c = Attach(leader, 1);
  if (c == NULL) return;
  bc_batch_info_t info;
  bc_batch_info_init(&info);
  bc_batch_t first = NULL, second = NULL, kept = NULL;
  EXPECT_STATUS(bc_consumer_next(c, &first, &info), BC_SUCCESS);
  EXPECT_STATUS(bc_batch_release(first), BC_SUCCESS);
  ExpectReleased(first);

  /* The released entry is reused with a new generation: the old handle stays stale. */
  EXPECT_STATUS(bc_consumer_next(c, &second, &info), BC_SUCCESS);
  EXPECT(second != first);
  EXPECT_STATUS(bc_batch_info(first, &info), BC_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(bc_batch_info(second, &info), BC_SUCCESS);
  EXPECT(info.index == 1);

  /* One kind of handle passed as another, and made-up handles. */
  EXPECT_STATUS(bc_batch_release((bc_batch_t)(void*)c), BC_ERR_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS("is a bc_consumer_t, not a bc_batch_t");
  bc_batch_t made_up;
  EXPECT_STATUS(bc_consumer_next((bc_consumer_t)(void*)second, &made_up, NULL),
                BC_ERR_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS("is a bc_batch_t, not a bc_consumer_t");
  EXPECT_STATUS(bc_leader_wait((bc_leader_t)(void*)c, 0), BC_ERR_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS("is a bc_consumer_t, not a bc_leader_t");
  int on_stack = 0;
  EXPECT_STATUS(bc_batch_release((bc_batch_t)(void*)&on_stack), BC_ERR_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS("is not a bc_batch_t this library handed out");
  ExpectNamesHandle(&on_stack);
  EXPECT_STATUS(bc_consumer_detach((bc_consumer_t)(uintptr_t)0x1234), BC_ERR_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS("is not a bc_consumer_t this library handed out");

  /* A batch kept past the consumer's detach stays valid until released, once. */
  EXPECT_STATUS(bc_consumer_next(c, &kept, &info), BC_SUCCESS);
  EXPECT_STATUS(bc_batch_release(second), BC_SUCCESS);
  EXPECT_STATUS(bc_consumer_detach(c), BC_SUCCESS);
  EXPECT_STATUS(bc_batch_info(kept, &info), BC_SUCCESS);
  EXPECT(info.index == 2 && info.size == 8);
  const unsigned char* pixels = (const unsigned char*)info.images.data;
  unsigned sum = 0;
  for (size_t i = 0; i < info.images.nbytes; ++i) sum += pixels[i]; /* still mapped (ASan) */
  (void)sum;

  /* The consumer after its detach: every entry point refuses, naming it. */
  bc_batch_t b = NULL;
  EXPECT_STATUS(bc_consumer_next(c, &b, &info), BC_ERR_INVALID_ARGUMENT);
  EXPECT(b == NULL);
  EXPECT_ERROR_HAS("bc_consumer_next: bc_consumer_t");
  EXPECT_ERROR_HAS("was detached (bc_consumer_detach)");
  ExpectNamesHandle(c);
  uint64_t e = 0, bi = 0;
  EXPECT_STATUS(bc_consumer_position(c, &e, &bi), BC_ERR_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS("bc_consumer_position");
  int64_t per_epoch = 0;
  EXPECT_STATUS(bc_consumer_batches_per_epoch(c, 0, &per_epoch), BC_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(bc_consumer_detach(c), BC_ERR_INVALID_ARGUMENT); /* the double detach */
  EXPECT_ERROR_HAS("bc_consumer_detach: bc_consumer_t");

  EXPECT_STATUS(bc_batch_release(kept), BC_SUCCESS);
  ExpectReleased(kept);
  (void)samples;
  EXPECT_STATUS(bc_leader_destroy(leader), BC_SUCCESS); /* stops the stream its consumer left */

  /* The leader after its destroy. */
  EXPECT_STATUS(bc_leader_wait(leader, 0), BC_ERR_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS("bc_leader_wait: bc_leader_t");
  EXPECT_ERROR_HAS("was destroyed (bc_leader_destroy)");
  ExpectNamesHandle(leader);
  EXPECT_STATUS(bc_leader_destroy(leader), BC_ERR_INVALID_ARGUMENT); /* the double destroy */
  EXPECT_ERROR_HAS("bc_leader_destroy: bc_leader_t");
  EXPECT(strcmp(bc_leader_address(leader), "") == 0);
  EXPECT_ERROR_HAS("bc_leader_address: bc_leader_t");
}

/* A consumer that follows the stream to its end, then asks again: the first end is
 * BC_END_OF_STREAM, a batch asked for after it an error naming both epoch counts (a loop over
 * more epochs than the stream has must not train on nothing). */
static void TestPastTheEnd(const char* dataset, int samples) {
  bc_leader_t leader = StartLeader(dataset, "");
  if (leader == NULL) return;
  bc_consumer_t c = Attach(leader, BC_EPOCHS_UNTIL_STREAM_ENDS);
  if (c == NULL) return;
  EXPECT(ReadToTheEnd(c) == samples);
  bc_batch_t b = NULL;
  bc_batch_info_t info;
  bc_batch_info_init(&info);
  EXPECT_STATUS(bc_consumer_next(c, &b, &info), BC_ERR_FAILED_PRECONDITION);
  EXPECT(b == NULL);
  EXPECT_ERROR_HAS("after the end of this consumer's stream");
  EXPECT_ERROR_HAS("completed 1 epoch and the leader's stream at");
  EXPECT_ERROR_HAS("has 1 epoch: there is no further epoch");
  EXPECT_STATUS(bc_consumer_detach(c), BC_SUCCESS);
  EXPECT_STATUS(bc_leader_wait(leader, -1), BC_SUCCESS);
  EXPECT_STATUS(bc_leader_destroy(leader), BC_SUCCESS);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: capi_handles_test DATASET.h5 SAMPLES\n");
    return 2;
  }
  const int samples = atoi(argv[2]);
  TestBatchesAndConsumers(argv[1], samples);
  TestPastTheEnd(argv[1], samples);
  if (failures != 0) {
    fprintf(stderr, "capi_handles_test: %d failure(s)\n", failures);
    return 1;
  }
  printf("capi_handles_test: PASS\n");
  return 0;
}
