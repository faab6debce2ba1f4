/* Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
 *
 * The Batchcast C API (C99 and later, usable from C++, Fortran's iso_c_binding, Julia,
 * Rust...). A consumer attaches to a node leader and iterates zero-copy batches; a leader
 * can be started over a dataset in this process. docs/api.md has a complete example.
 *
 *   bc_consumer_config_t cfg;
 *   bc_consumer_config_init(&cfg);
 *   cfg.address = address;  cfg.batch_size = 32;
 *   bc_consumer_t consumer;
 *   if (bc_consumer_attach(&cfg, &consumer) != BC_SUCCESS) {
 *     fprintf(stderr, "%s\n", bc_last_error());  return 1;
 *   }
 *   bc_batch_t batch;  bc_batch_info_t info;
 *   bc_batch_info_init(&info);
 *   while (bc_consumer_next(consumer, &batch, &info) == BC_SUCCESS) {
 *     train(info.images.data, info.labels.data, info.size);
 *     bc_batch_release(batch);
 *   }
 *   bc_consumer_detach(consumer);
 *
 * Conventions (those of nccl.h and ucp.h):
 * - Every function that can fail returns a bc_status_t; on an error, bc_last_error() is the
 *   message of the failing call on this thread ("consumer: no Batchcast leader listens at
 *   ..."). No C++ exception ever leaves a function of this API.
 * - Handles are opaque pointers; each *_attach / *_start has one matching *_detach /
 *   *_destroy. A NULL handle is BC_ERR_INVALID_ARGUMENT, never a crash; so is a handle used
 *   after its release, detach or destroy (a batch released twice, next() after detach), a
 *   handle of another kind or a made-up value: handles are entries of the library's tables
 *   with a generation, not addresses, and the message names the function and the handle.
 * - Config and info structs start with `struct_size`, set by their *_init function to the
 *   size your header knows. A newer library reads and writes only the fields that fit in
 *   it, so structs grow at the end without breaking binaries built against an older header;
 *   an older library refuses (BC_ERR_UNSUPPORTED) a newer struct whose unknown fields are
 *   not zero. Always call the *_init function, then set fields.
 * - A field this library cannot honour yet is refused with BC_ERR_UNSUPPORTED and a
 *   message naming it, never ignored.
 */
#ifndef BATCHCAST_BATCHCAST_C_H_
#define BATCHCAST_BATCHCAST_C_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "batchcast/version.h"

#if defined(BATCHCAST_BUILDING_LIBRARY)
#define BC_API __attribute__((visibility("default")))
#else
#define BC_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. 1-13 are the C++ batchcast::StatusCode values. */
typedef enum bc_status {
  BC_SUCCESS = 0,
  BC_ERR_INVALID_ARGUMENT = 1,     /* a bad option, struct or parameter */
  BC_ERR_NOT_FOUND = 2,            /* a file, dataset or leader that does not exist */
  BC_ERR_IO = 3,                   /* a read/write/system call failed */
  BC_ERR_CORRUPT_DATA = 4,         /* a damaged image, HDF5 layout or shared-memory record */
  BC_ERR_OUT_OF_RANGE = 5,
  BC_ERR_RESOURCE_EXHAUSTED = 6,   /* no free slot / membership entry / memory */
  BC_ERR_UNAVAILABLE = 7,          /* the leader (or a peer) is gone or not there */
  BC_ERR_FAILED_PRECONDITION = 8,  /* called in the wrong state */
  BC_ERR_PERMISSION_DENIED = 9,
  BC_ERR_DEADLINE_EXCEEDED = 10,   /* a bounded wait ran out */
  BC_ERR_CANCELLED = 11,
  BC_END_OF_STREAM = 12,           /* no more batches: the normal end of iteration */
  BC_ERR_INTERNAL = 13,            /* a bug in Batchcast: please report it */
  BC_ERR_UNSUPPORTED = 100         /* a field or feature this library does not provide */
} bc_status_t;

/* A static description of a status code, e.g. "unavailable". Never NULL. */
BC_API const char* bc_status_string(bc_status_t status);
/* The message of the last failed call on this thread ("" if none). Valid until the next
 * call of this API on the same thread. */
BC_API const char* bc_last_error(void);
/* The library's version (BATCHCAST_VERSION_NUMBER of it) and, if not NULL, its text. */
BC_API int bc_get_version(const char** text);

typedef enum bc_dtype { BC_DTYPE_UINT8 = 0, BC_DTYPE_FLOAT32 = 1, BC_DTYPE_INT64 = 2 } bc_dtype_t;
typedef enum bc_layout {
  BC_LAYOUT_NCHW = 0, /* images are N x C x H x W */
  BC_LAYOUT_NHWC = 1  /* images are N x H x W x C (option layout=hwc) */
} bc_layout_t;

/* ---- consumer ---- */

typedef struct bc_consumer_s* bc_consumer_t;
typedef struct bc_batch_s* bc_batch_t;

/* bc_consumer_config_t.epochs: follow the leader to the end of its stream. */
#define BC_EPOCHS_UNTIL_STREAM_ENDS (1 << 30)

typedef struct bc_consumer_config {
  size_t struct_size;    /* sizeof(bc_consumer_config_t); set by bc_consumer_config_init */
  const char* address;   /* the leader's address; NULL: BATCHCAST_ADDRESS (batchcast-run) */
  const char* options;   /* option flags, e.g. "--carve-offset --seed 7"; NULL: none. Read
                            after the BATCHCAST_* environment, before the fields below */
  int32_t batch_size;    /* 0: the options' batch_size (default 64) */
  int32_t buffer_depth;  /* unreleased batches you may hold; 0: the options' (default 2) */
  int32_t epochs;        /* 0: the options' epochs; BC_EPOCHS_UNTIL_STREAM_ENDS */
  int32_t rank;          /* the label in logs and errors; with mode=shard (in options) also
                            the data-parallel rank; -1: none (mode=shard: RANK) */
  int32_t world_size;    /* data-parallel ranks with mode=shard; 0: the options' (WORLD_SIZE) */
  int32_t drop_last;     /* 1: drop the epoch's partial last batch (DataLoader drop_last) */
  int64_t timeout_ms;    /* how long to wait for the leader to listen; 0: the options'
                            connect_timeout (default 30 s; "--connect-timeout 0": try once) */
  int32_t pad_last;      /* 1: pad the partial last batch with repeats of its own samples */
  int32_t start_epoch;   /* resume at this epoch (bc_consumer_get_position of the interrupted run;
                            the leader needs the same --start-epoch / --start-batch) */
  int64_t start_batch;   /* resume at this batch within start_epoch */
  int32_t start_run_epoch; /* resume: the consumer's own epoch there (bc_position_t.run_epoch
                              of the interrupted run); -1 (bc_consumer_config_init): the
                              options' (default: start_epoch) */
  const char* view;      /* this consumer's own view, a spec over the leader's view such as
                            "view(size=160,flip=0)" (docs/pipeline.md, Views); NULL: the
                            options' view (default: the leader's own). The leader needs
                            views_max > 1 */
} bc_consumer_config_t;

static inline void bc_consumer_config_init(bc_consumer_config_t* config) {
  memset(config, 0, sizeof(*config));
  config->struct_size = sizeof(*config);
  config->rank = -1;
  config->start_run_epoch = -1;
}

typedef struct bc_tensor {
  void* data;        /* in the leader's shared memory; read-only; valid until release */
  int32_t dtype;     /* bc_dtype_t */
  int32_t ndim;
  int64_t shape[4];
  size_t nbytes;
} bc_tensor_t;

typedef struct bc_batch_info {
  size_t struct_size;          /* sizeof(bc_batch_info_t); set by bc_batch_info_init */
  bc_tensor_t images;          /* [size, C, H, W] or [size, H, W, C] (layout) */
  bc_tensor_t labels;          /* int64 [size] */
  const int64_t* sample_ids;   /* the dataset index of each sample, [size] */
  int64_t size;                /* samples in this batch */
  uint64_t epoch;
  uint64_t index;              /* this consumer's batch index within the epoch */
  uint64_t producer_seq;       /* position of the producer batch in the stream */
  float lr_factor;             /* progressive resizing: scale your learning rate by this */
  int32_t layout;              /* bc_layout_t */
  int32_t repeats;             /* samples that are fill repeats */
  int32_t image_size;
  int32_t last_in_epoch;       /* 1 for this consumer's last batch of the epoch */
  int32_t reserved0;
} bc_batch_info_t;

static inline void bc_batch_info_init(bc_batch_info_t* info) {
  memset(info, 0, sizeof(*info));
  info->struct_size = sizeof(*info);
}

/* Attaches to a leader. Errors: BC_ERR_UNAVAILABLE (no leader at the address),
 * BC_ERR_FAILED_PRECONDITION (more epochs than the stream has), BC_ERR_INVALID_ARGUMENT. */
BC_API bc_status_t bc_consumer_attach(const bc_consumer_config_t* config, bc_consumer_t* out);
/* The next batch and its description (`info` may be NULL). BC_END_OF_STREAM after the
 * last, once: asking again is BC_ERR_FAILED_PRECONDITION naming both epoch counts (a loop
 * over more epochs than the stream has). Release every batch; holding buffer_depth of them and asking for another is
 * BC_ERR_FAILED_PRECONDITION, never a deadlock. */
BC_API bc_status_t bc_consumer_next(bc_consumer_t consumer, bc_batch_t* batch,
                                    bc_batch_info_t* info);
/* Fills `info` again for a batch still held. */
BC_API bc_status_t bc_batch_info(bc_batch_t batch, bc_batch_info_t* info);
/* Gives the batch's slot back (tensors exported with bc_batch_to_dlpack keep it alive until
 * their deleter runs). The handle is invalid afterwards: releasing it again, or any use, is
 * BC_ERR_INVALID_ARGUMENT. NULL is accepted. */
BC_API bc_status_t bc_batch_release(bc_batch_t batch);
/* Where to resume (Consumer::Position()): the batch bc_consumer_next returns next. */
typedef struct bc_position {
  size_t struct_size;  /* sizeof(bc_position_t); set by bc_position_init */
  uint64_t epoch;      /* the stream epoch: attach with start_epoch = epoch */
  uint64_t batch;      /* the batch within it, in this consumer's batch size: start_batch */
  int64_t run_epoch;   /* this consumer's own epoch there, over its whole run: start_run_epoch
                          (below epoch only after a service's resume replay moved it onto
                          later stream epochs; docs/service.md "Resuming a trial") */
} bc_position_t;

static inline void bc_position_init(bc_position_t* position) {
  memset(position, 0, sizeof(*position));
  position->struct_size = sizeof(*position);
}

/* Where to resume. Save it with a checkpoint; attach with start_epoch, start_batch and
 * start_run_epoch set to it (and the leader's --start-epoch/--start-batch) to go on from
 * there with exactly the epochs the run has left. */
BC_API bc_status_t bc_consumer_get_position(bc_consumer_t consumer, bc_position_t* position);
/* The epoch and batch of bc_consumer_get_position only. BC_ERR_FAILED_PRECONDITION when the
 * consumer's own epoch differs from the stream's (a service's resume replay moved it): those
 * two numbers would resume it with too few epochs; use bc_consumer_get_position. */
BC_API bc_status_t bc_consumer_position(bc_consumer_t consumer, uint64_t* epoch,
                                        uint64_t* batch);
/* Batches this consumer gets in stream epoch `epoch` (0 past the end). */
BC_API bc_status_t bc_consumer_batches_per_epoch(bc_consumer_t consumer, uint64_t epoch,
                                                 int64_t* out);
/* Leaves the stream (the leader and other consumers go on) and frees the handle, also on
 * an error. Batches still held stay valid until released. */
BC_API bc_status_t bc_consumer_detach(bc_consumer_t consumer);

/* ---- DLPack export (https://dmlc.github.io/dlpack) ----
 * A batch's tensor as a DLPack managed tensor that any framework can take without a copy
 * (torch.utils.dlpack.from_dlpack, jax.dlpack, cupy.from_dlpack). The tensor keeps the
 * batch's slot alive until its deleter is called, also after bc_batch_release. The memory
 * is the leader's read-only shared memory. */
typedef enum bc_tensor_kind { BC_TENSOR_IMAGES = 0, BC_TENSOR_LABELS = 1 } bc_tensor_kind_t;
struct DLManagedTensor;
struct DLManagedTensorVersioned;
/* DLPack < 1.0 (DLManagedTensor). */
BC_API bc_status_t bc_batch_to_dlpack(bc_batch_t batch, bc_tensor_kind_t which,
                                      struct DLManagedTensor** out);
/* Named tensors (docs/data-plane.md "Named tensors"): the batch's tensor `name` as DLPack:
 * "images", "labels", "sample_ids", or a further tensor the producer published (a Python
 * Producer's dict batch, a leader model stage's output), [size, per-sample shape...].
 * BC_ERR_NOT_FOUND, naming the batch's tensors, when it has none of that name. A bool tensor
 * leaves as uint8 (DLPack 0.6 has no bool). */
BC_API bc_status_t bc_batch_tensor_dlpack(bc_batch_t batch, const char* name,
                                          struct DLManagedTensor** out);
/* The further named tensors of a batch (images, labels and sample_ids not counted) and the
 * name of the i-th (valid while the batch is; BC_ERR_OUT_OF_RANGE past the last). */
BC_API bc_status_t bc_batch_num_tensors(bc_batch_t batch, int* out);
BC_API bc_status_t bc_batch_tensor_name(bc_batch_t batch, int i, const char** out);
/* Variable-length tensors (docs/api.md "Variable-length tensors"): a named tensor whose
 * samples differ in their first dimension (token sequences of different lengths), as the rows
 * of every sample one after another, `values` [rows, per-row shape...] (in the leader's
 * read-only shared memory, like every tensor; bc_batch_tensor_dlpack exports the same), and
 * int64 row offsets [size + 1] from 0: sample i is rows offsets[i] .. offsets[i + 1] - 1 (a
 * sample may have none). Valid while the batch is. */
typedef struct bc_ragged {
  size_t struct_size;      /* sizeof(bc_ragged_t); set by bc_ragged_init */
  bc_tensor_t values;      /* dtype: the batchcast::DType code (docs/api.md) */
  const int64_t* offsets;  /* [size + 1] */
  int64_t size;            /* samples in the batch */
} bc_ragged_t;

static inline void bc_ragged_init(bc_ragged_t* ragged) {
  memset(ragged, 0, sizeof(*ragged));
  ragged->struct_size = sizeof(*ragged);
}

/* The variable-length tensor `name` of a batch. BC_ERR_NOT_FOUND, naming the batch's tensors,
 * when it has none of that name; BC_ERR_INVALID_ARGUMENT when the tensor has a fixed
 * per-sample shape (take it with bc_batch_tensor_dlpack). */
BC_API bc_status_t bc_batch_ragged(bc_batch_t batch, const char* name, bc_ragged_t* out);
/* Its row offsets as DLPack, int64 [size + 1] (its values: bc_batch_tensor_dlpack). */
BC_API bc_status_t bc_batch_offsets_dlpack(bc_batch_t batch, const char* name,
                                           struct DLManagedTensor** out);
/* DLPack >= 1.0 (DLManagedTensorVersioned, flagged read-only). BC_ERR_UNSUPPORTED when the
 * library was built against a DLPack header older than 1.0 (see bc_last_error()). */
BC_API bc_status_t bc_batch_to_dlpack_versioned(bc_batch_t batch, bc_tensor_kind_t which,
                                                struct DLManagedTensorVersioned** out);

/* ---- leader: produce a stream from a dataset in this process ---- */

typedef struct bc_leader_s* bc_leader_t;

typedef struct bc_leader_config {
  size_t struct_size;          /* sizeof(bc_leader_config_t); set by bc_leader_config_init */
  const char* options;         /* option flags: "--dataset train.h5 --epochs 2 --image-size
                                  64" (docs/configuration.md); words split at spaces */
  const char* address;         /* NULL: a new unique address (bc_leader_address) */
  int32_t expected_consumers;  /* wait for this many before the first batch; default 1 */
  int32_t max_consumer_batch;  /* largest consumer batch size; 0: the options' batch_size */
  int64_t join_timeout_ms;     /* how long to wait for them; default 120000 */
} bc_leader_config_t;

static inline void bc_leader_config_init(bc_leader_config_t* config) {
  memset(config, 0, sizeof(*config));
  config->struct_size = sizeof(*config);
  config->expected_consumers = 1;
  config->join_timeout_ms = 120000;
}

/* Opens the dataset and starts producing on background threads. */
BC_API bc_status_t bc_leader_start(const bc_leader_config_t* config, bc_leader_t* out);
/* The address consumers attach to. Valid while the leader lives; "" (and bc_last_error())
 * for a NULL or destroyed handle. */
BC_API const char* bc_leader_address(bc_leader_t leader);
/* Waits until the stream is complete (every epoch produced, every consumer gone) and
 * returns the leader's status. timeout_ms < 0: forever; BC_ERR_DEADLINE_EXCEEDED when it
 * runs out. */
BC_API bc_status_t bc_leader_wait(bc_leader_t leader, int64_t timeout_ms);
/* Stops the leader (the stream fails for its consumers if it was not complete) and frees
 * the handle. Returns its status. */
BC_API bc_status_t bc_leader_destroy(bc_leader_t leader);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* BATCHCAST_BATCHCAST_C_H_ */
