/* Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
 *
 * What the C API test programs (capi_test.c, capi_handles_test.c) share: the checks (each
 * failed one prints the file, the line, what was expected and bc_last_error(), and counts in
 * `failures`: one counter per program, so include this from one file of each), a leader over
 * the test dataset, and a consumer read to its end.
 */
#ifndef BATCHCAST_TESTS_CAPI_TEST_UTIL_H_
#define BATCHCAST_TESTS_CAPI_TEST_UTIL_H_

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <batchcast/batchcast_c.h>

static int failures = 0;

#define EXPECT(cond)                                                                       \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      fprintf(stderr, "%s:%d: expected %s (last error: %s)\n", __FILE__, __LINE__, #cond,  \
              bc_last_error());                                                            \
      ++failures;                                                                          \
    }                                                                                      \
  } while (0)
#define EXPECT_STATUS(call, want)                                                          \
  do {                                                                                     \
    bc_status_t got_ = (call);                                                             \
    if (got_ != (want)) {                                                                  \
      fprintf(stderr, "%s:%d: %s returned %s, expected %s (last error: %s)\n", __FILE__,  \
              __LINE__, #call, bc_status_string(got_), bc_status_string(want),             \
              bc_last_error());                                                            \
      ++failures;                                                                          \
    }                                                                                      \
  } while (0)
#define EXPECT_ERROR_HAS(text) EXPECT(strstr(bc_last_error(), (text)) != NULL)

/* A leader over `dataset` (one epoch, batches of 8 images of 16 x 16) with `extra` options;
 * NULL on a failure. */
static inline bc_leader_t StartLeader(const char* dataset, const char* extra) {
  static char options[512];
  snprintf(options, sizeof(options),
           "--dataset %s --epochs 1 --batch-size 8 --image-size 16 --threads 1 %s", dataset,
           extra);
  bc_leader_config_t lc;
  bc_leader_config_init(&lc);
  lc.options = options;
  bc_leader_t leader = NULL;
  EXPECT_STATUS(bc_leader_start(&lc, &leader), BC_SUCCESS);
  return leader;
}

/* Takes and releases every batch left to consumer `c`; the samples that were not fill
 * repeats. Expects the stream to end with BC_END_OF_STREAM. */
static inline int64_t ReadToTheEnd(bc_consumer_t c) {
  bc_batch_t b;
  bc_batch_info_t info;
  bc_batch_info_init(&info);
  int64_t got = 0;
  bc_status_t st;
  while ((st = bc_consumer_next(c, &b, &info)) == BC_SUCCESS) {
    got += info.size - info.repeats;
    EXPECT_STATUS(bc_batch_release(b), BC_SUCCESS);
  }
  EXPECT(st == BC_END_OF_STREAM);
  return got;
}

#endif /* BATCHCAST_TESTS_CAPI_TEST_UTIL_H_ */
