// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Prints the layout of every public struct that crosses the library boundary, as JSON, for
// scripts/abi_check.py (docs/api.md "ABI policy"): size and alignment, and the offset of
// each field where the type is standard-layout (Options holds std::strings: size only).
#include <cstddef>
#include <cstdio>

// The umbrella header and the C header: this file is compiled with no MPI include path (and
// as C++20), so it also proves that batchcast/batchcast.h needs no <mpi.h> (issue 17).
#include "batchcast/batchcast.h"
#include "batchcast/batchcast_c.h"

namespace {

bool first_struct = true;
bool first_field = true;

void Begin(const char* name, size_t size, size_t align) {
  std::printf("%s\n  \"%s\": {\"size\": %zu, \"align\": %zu, \"fields\": {",
              first_struct ? "" : ",", name, size, align);
  first_struct = false;
  first_field = true;
}
void Field(const char* name, size_t offset) {
  std::printf("%s\"%s\": %zu", first_field ? "" : ", ", name, offset);
  first_field = false;
}
void End() { std::printf("}}"); }

}  // namespace

#define BC_STRUCT(T) Begin(#T, sizeof(T), alignof(T))
#define BC_FIELD(T, f) Field(#f, offsetof(T, f))

int main() {
  std::printf("{");
  BC_STRUCT(batchcast::Options);
  End();
  BC_STRUCT(batchcast::Batch);
  End();
  BC_STRUCT(batchcast::ConsumerStats);
  End();
  BC_STRUCT(batchcast::StreamPosition);
  BC_FIELD(batchcast::StreamPosition, epoch);
  BC_FIELD(batchcast::StreamPosition, batch);
  BC_FIELD(batchcast::StreamPosition, run_epoch);
  End();
  BC_STRUCT(batchcast::DeviceBatch);
  End();
  BC_STRUCT(batchcast::TensorView);
  BC_FIELD(batchcast::TensorView, data);
  BC_FIELD(batchcast::TensorView, dtype);
  BC_FIELD(batchcast::TensorView, ndim);
  BC_FIELD(batchcast::TensorView, shape);
  BC_FIELD(batchcast::TensorView, nbytes);
  End();
  BC_STRUCT(batchcast::BatchInfo);
  BC_FIELD(batchcast::BatchInfo, epoch);
  BC_FIELD(batchcast::BatchInfo, index);
  BC_FIELD(batchcast::BatchInfo, producer_seq);
  BC_FIELD(batchcast::BatchInfo, producer_batch);
  BC_FIELD(batchcast::BatchInfo, size);
  BC_FIELD(batchcast::BatchInfo, repeats);
  BC_FIELD(batchcast::BatchInfo, lr_factor);
  BC_FIELD(batchcast::BatchInfo, image_size);
  BC_FIELD(batchcast::BatchInfo, last_in_epoch);
  BC_FIELD(batchcast::BatchInfo, channels_last);
  BC_FIELD(batchcast::BatchInfo, wait_ns);
  BC_FIELD(batchcast::BatchInfo, handoff_ns);
  End();
  // The C API's size-prefixed structs may grow at the end (struct_size); bc_tensor_t is
  // embedded in bc_batch_info_t and may not.
  BC_STRUCT(bc_tensor_t);
  BC_FIELD(bc_tensor_t, data);
  BC_FIELD(bc_tensor_t, dtype);
  BC_FIELD(bc_tensor_t, ndim);
  BC_FIELD(bc_tensor_t, shape);
  BC_FIELD(bc_tensor_t, nbytes);
  End();
  BC_STRUCT(bc_consumer_config_t);
  BC_FIELD(bc_consumer_config_t, struct_size);
  BC_FIELD(bc_consumer_config_t, address);
  BC_FIELD(bc_consumer_config_t, options);
  BC_FIELD(bc_consumer_config_t, batch_size);
  BC_FIELD(bc_consumer_config_t, buffer_depth);
  BC_FIELD(bc_consumer_config_t, epochs);
  BC_FIELD(bc_consumer_config_t, rank);
  BC_FIELD(bc_consumer_config_t, world_size);
  BC_FIELD(bc_consumer_config_t, drop_last);
  BC_FIELD(bc_consumer_config_t, timeout_ms);
  BC_FIELD(bc_consumer_config_t, pad_last);
  BC_FIELD(bc_consumer_config_t, start_epoch);
  BC_FIELD(bc_consumer_config_t, start_batch);
  BC_FIELD(bc_consumer_config_t, start_run_epoch);
  BC_FIELD(bc_consumer_config_t, view);
  End();
  BC_STRUCT(bc_batch_info_t);
  BC_FIELD(bc_batch_info_t, struct_size);
  BC_FIELD(bc_batch_info_t, images);
  BC_FIELD(bc_batch_info_t, labels);
  BC_FIELD(bc_batch_info_t, sample_ids);
  BC_FIELD(bc_batch_info_t, size);
  BC_FIELD(bc_batch_info_t, epoch);
  BC_FIELD(bc_batch_info_t, index);
  BC_FIELD(bc_batch_info_t, producer_seq);
  BC_FIELD(bc_batch_info_t, lr_factor);
  BC_FIELD(bc_batch_info_t, layout);
  BC_FIELD(bc_batch_info_t, repeats);
  BC_FIELD(bc_batch_info_t, image_size);
  BC_FIELD(bc_batch_info_t, last_in_epoch);
  BC_FIELD(bc_batch_info_t, reserved0);
  End();
  BC_STRUCT(bc_leader_config_t);
  BC_FIELD(bc_leader_config_t, struct_size);
  BC_FIELD(bc_leader_config_t, options);
  BC_FIELD(bc_leader_config_t, address);
  BC_FIELD(bc_leader_config_t, expected_consumers);
  BC_FIELD(bc_leader_config_t, max_consumer_batch);
  BC_FIELD(bc_leader_config_t, join_timeout_ms);
  End();
  BC_STRUCT(bc_position_t);
  BC_FIELD(bc_position_t, struct_size);
  BC_FIELD(bc_position_t, epoch);
  BC_FIELD(bc_position_t, batch);
  BC_FIELD(bc_position_t, run_epoch);
  End();
  BC_STRUCT(bc_ragged_t);
  BC_FIELD(bc_ragged_t, struct_size);
  BC_FIELD(bc_ragged_t, values);
  BC_FIELD(bc_ragged_t, offsets);
  BC_FIELD(bc_ragged_t, size);
  End();
  std::printf("\n}\n");
  return 0;
}
