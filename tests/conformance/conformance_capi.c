/* Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
 *
 * conformance_capi SOCKET EXPECT "OPTIONS"
 * The C API's leader in the front-door conformance test: bc_leader_start with the scenario's
 * options string, "ready SOCKET" once it listens, then bc_leader_wait. A refused option fails
 * bc_leader_start: its message (bc_last_error) goes to stderr, exit code 2. */
#include <stdio.h>
#include <stdlib.h>

#include "batchcast/batchcast_c.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: conformance_capi SOCKET EXPECT OPTIONS\n");
    return 2;
  }
  bc_leader_config_t lc;
  bc_leader_config_init(&lc);
  lc.address = argv[1];
  lc.expected_consumers = atoi(argv[2]);
  lc.options = argv[3];
  bc_leader_t leader = NULL;
  bc_status_t st = bc_leader_start(&lc, &leader);
  if (st != BC_SUCCESS) {
    fprintf(stderr, "conformance_capi: %s\n", bc_last_error());
    return st == BC_ERR_INVALID_ARGUMENT ? 2 : 1;
  }
  printf("ready %s\n", bc_leader_address(leader));
  fflush(stdout);
  st = bc_leader_wait(leader, -1);
  if (st != BC_SUCCESS) fprintf(stderr, "conformance_capi: %s\n", bc_last_error());
  bc_status_t destroyed = bc_leader_destroy(leader);
  return st == BC_SUCCESS && destroyed == BC_SUCCESS ? 0 : 1;
}
