/* Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
 *
 * The C API from C (label unit): versions, status strings, errors that name their cause,
 * size-prefixed structs from older and newer headers, fields refused as unsupported, a
 * leader and a consumer in one process, back-pressure as an error, DLPack export that
 * outlives the batch. Usage: capi_test DATASET.h5 SAMPLES (a dataset with SAMPLES images).
 */
#define _POSIX_C_SOURCE 200809L /* popen, getpid */
#include <dlpack/dlpack.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <batchcast/batchcast_c.h>

#include "capi_test_util.h"

static void TestVersionAndStrings(void) {
  const char* text = NULL;
  EXPECT(bc_get_version(&text) == BATCHCAST_VERSION_CODE);
  char want[64];
  snprintf(want, sizeof(want), "%d.%d.%d", BATCHCAST_VERSION_MAJOR, BATCHCAST_VERSION_MINOR,
           BATCHCAST_VERSION_PATCH);
  EXPECT(text != NULL && strcmp(text, want) == 0);
  EXPECT(strcmp(bc_status_string(BC_SUCCESS), "success") == 0);
  EXPECT(strcmp(bc_status_string(BC_ERR_UNAVAILABLE), "unavailable") == 0);
  EXPECT(strcmp(bc_status_string(BC_ERR_UNSUPPORTED), "unsupported") == 0);
  EXPECT(strcmp(bc_status_string((bc_status_t)77), "unknown status") == 0);
}

static void TestArgumentErrors(void) {
  bc_consumer_t c = NULL;
  EXPECT_STATUS(bc_consumer_attach(NULL, &c), BC_ERR_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS("bc_consumer_config_t is NULL");
  bc_batch_t b;
  EXPECT_STATUS(bc_consumer_next(NULL, &b, NULL), BC_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(bc_consumer_detach(NULL), BC_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(bc_batch_release(NULL), BC_SUCCESS);
  EXPECT_STATUS(bc_leader_wait(NULL, 0), BC_ERR_INVALID_ARGUMENT);

  bc_consumer_config_t cfg;
  memset(&cfg, 0, sizeof(cfg)); /* forgot bc_consumer_config_init */
  cfg.address = "nobody";
  EXPECT_STATUS(bc_consumer_attach(&cfg, &c), BC_ERR_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS("bc_consumer_config_init");

  bc_consumer_config_init(&cfg);
  cfg.address = "batchcast-capi-test-nobody";
  cfg.options = "--connect-timeout 0"; /* try once */
  EXPECT_STATUS(bc_consumer_attach(&cfg, &c), BC_ERR_UNAVAILABLE);
  EXPECT_ERROR_HAS("no Batchcast leader listens");
  EXPECT(c == NULL);

  /* Fields are checked like the options they set. */
  cfg.options = "--connect-timeout 0 --mode shard";
  cfg.rank = 5;
  cfg.world_size = 4;
  EXPECT_STATUS(bc_consumer_attach(&cfg, &c), BC_ERR_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS("0 <= rank < world_size");
  cfg.options = "--connect-timeout 0";
  cfg.rank = -1;
  cfg.world_size = 0;
  cfg.drop_last = 1;
  cfg.pad_last = 1;
  EXPECT_STATUS(bc_consumer_attach(&cfg, &c), BC_ERR_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS("drop_last");
  cfg.drop_last = cfg.pad_last = 0;
  cfg.timeout_ms = -5;
  EXPECT_STATUS(bc_consumer_attach(&cfg, &c), BC_ERR_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS("timeout_ms");
  cfg.timeout_ms = 0;
  /* Resume: the run epoch is -1 (start_epoch) or at most start_epoch. */
  cfg.start_run_epoch = -2;
  EXPECT_STATUS(bc_consumer_attach(&cfg, &c), BC_ERR_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS("start_run_epoch -2");
  cfg.start_epoch = 2;
  cfg.start_run_epoch = 3;
  EXPECT_STATUS(bc_consumer_attach(&cfg, &c), BC_ERR_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS("never run ahead of the stream's");
  /* An older header's struct ends before start_run_epoch: what lies there is not read. */
  cfg.struct_size = offsetof(bc_consumer_config_t, start_run_epoch);
  EXPECT_STATUS(bc_consumer_attach(&cfg, &c), BC_ERR_UNAVAILABLE);
  bc_consumer_config_init(&cfg);
  cfg.address = "batchcast-capi-test-nobody";
  cfg.options = "--connect-timeout 0 --batch-sze 32";
  EXPECT_STATUS(bc_consumer_attach(&cfg, &c), BC_ERR_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS("did you mean 'batch_size'");

  /* A newer header's struct: unknown fields that are 0 are fine, others are refused. */
  struct {
    bc_consumer_config_t cfg;
    int64_t newer_field;
  } newer;
  bc_consumer_config_init(&newer.cfg);
  newer.cfg.struct_size = sizeof(newer);
  newer.cfg.address = "batchcast-capi-test-nobody";
  newer.cfg.options = "--connect-timeout 0";
  newer.newer_field = 0;
  EXPECT_STATUS(bc_consumer_attach(&newer.cfg, &c), BC_ERR_UNAVAILABLE);
  newer.newer_field = 1;
  EXPECT_STATUS(bc_consumer_attach(&newer.cfg, &c), BC_ERR_UNSUPPORTED);
  EXPECT_ERROR_HAS("does not know");

  bc_leader_config_t lc;
  bc_leader_config_init(&lc);
  lc.options = "--dataset /nonexistent/batchcast-capi.h5";
  bc_leader_t l = NULL;
  EXPECT(bc_leader_start(&lc, &l) != BC_SUCCESS);
  EXPECT_ERROR_HAS("/nonexistent/batchcast-capi.h5");
  EXPECT(l == NULL);
}

/* A DLPack tensor keeps the batch's memory after bc_batch_release until its deleter. */
static void TestDlpack(bc_batch_t batch, const bc_batch_info_t* info) {
  struct DLManagedTensor* t = NULL;
  EXPECT_STATUS(bc_batch_to_dlpack(batch, BC_TENSOR_IMAGES, &t), BC_SUCCESS);
  EXPECT_STATUS(bc_batch_to_dlpack(batch, (bc_tensor_kind_t)9, &t), BC_ERR_INVALID_ARGUMENT);
  struct DLManagedTensor* labels = NULL;
  EXPECT_STATUS(bc_batch_to_dlpack(batch, BC_TENSOR_LABELS, &labels), BC_SUCCESS);
  if (t == NULL || labels == NULL) return;
  EXPECT(t->dl_tensor.data == info->images.data);
  EXPECT(t->dl_tensor.ndim == 4 && t->dl_tensor.shape[0] == info->size);
  EXPECT(t->dl_tensor.dtype.code == kDLUInt && t->dl_tensor.dtype.bits == 8);
  EXPECT(labels->dl_tensor.ndim == 1 && labels->dl_tensor.dtype.code == kDLInt &&
         labels->dl_tensor.dtype.bits == 64);
  /* By name: the batch's own tensors, and a refusal naming what it has. */
  struct DLManagedTensor* ids = NULL;
  EXPECT_STATUS(bc_batch_tensor_dlpack(batch, "sample_ids", &ids), BC_SUCCESS);
  if (ids != NULL) {
    EXPECT(ids->dl_tensor.ndim == 1 && ids->dl_tensor.shape[0] == info->size);
    EXPECT(ids->dl_tensor.data == info->sample_ids);
    ids->deleter(ids);
  }
  struct DLManagedTensor* none = NULL;
  EXPECT_STATUS(bc_batch_tensor_dlpack(batch, "embedding", &none), BC_ERR_NOT_FOUND);
  EXPECT_ERROR_HAS("no tensor 'embedding'; it has images, labels, sample_ids");
  int count = -1;
  const char* name = NULL;
  EXPECT_STATUS(bc_batch_num_tensors(batch, &count), BC_SUCCESS);
  EXPECT(count == 0);
  EXPECT_STATUS(bc_batch_tensor_name(batch, 0, &name), BC_ERR_OUT_OF_RANGE);
  bc_ragged_t ragged;
  bc_ragged_init(&ragged);
  EXPECT_STATUS(bc_batch_ragged(batch, "labels", &ragged), BC_ERR_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS("bc_batch_ragged: tensor 'labels' has a fixed per-sample shape");
  EXPECT_STATUS(bc_batch_ragged(batch, "tokens", &ragged), BC_ERR_NOT_FOUND);
  EXPECT_ERROR_HAS("bc_batch_ragged: the batch has no tensor 'tokens'");
  EXPECT_STATUS(bc_batch_ragged(batch, NULL, &ragged), BC_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(bc_batch_ragged(batch, "labels", NULL), BC_ERR_INVALID_ARGUMENT);
  ragged.struct_size = 8;
  EXPECT_STATUS(bc_batch_ragged(batch, "labels", &ragged), BC_ERR_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS("bc_ragged_t.struct_size is 8, smaller than any version of it");
  struct DLManagedTensorVersioned* v = NULL;
  bc_status_t vs = bc_batch_to_dlpack_versioned(batch, BC_TENSOR_IMAGES, &v);
#if DLPACK_VERSION < 100
  EXPECT(vs == BC_ERR_UNSUPPORTED && v == NULL);
  EXPECT_ERROR_HAS("DLManagedTensorVersioned");
#else
  EXPECT(vs == BC_SUCCESS && v != NULL);
  if (v != NULL) v->deleter(v);
#endif
  int64_t first_label = ((const int64_t*)labels->dl_tensor.data)[0];
  EXPECT_STATUS(bc_batch_release(batch), BC_SUCCESS);
  /* Still readable: the tensors hold the slot. */
  EXPECT(((const int64_t*)labels->dl_tensor.data)[0] == first_label);
  t->deleter(t);
  labels->deleter(labels);
}

/* One consumer of it, labelled `rank`, starting at batch `start_batch`; NULL on a failure. */
static bc_consumer_t AttachTo(bc_leader_t leader, int rank, int64_t start_batch) {
  bc_consumer_config_t cfg;
  bc_consumer_config_init(&cfg);
  cfg.address = bc_leader_address(leader);
  cfg.options = "--epochs 1 --batch-size 8 --buffer-depth 2";
  cfg.rank = rank;
  cfg.start_batch = start_batch; /* the field, not the option string */
  bc_consumer_t c = NULL;
  EXPECT_STATUS(bc_consumer_attach(&cfg, &c), BC_SUCCESS);
  return c;
}

/* Detaches and waits for the leader's clean end. */
static void Finish(bc_consumer_t c, bc_leader_t leader) {
  EXPECT_STATUS(bc_consumer_detach(c), BC_SUCCESS);
  EXPECT_STATUS(bc_leader_wait(leader, -1), BC_SUCCESS);
  EXPECT_STATUS(bc_leader_destroy(leader), BC_SUCCESS);
}

static void TestStream(const char* dataset, int samples) {
  bc_leader_t leader = StartLeader(dataset, "");
  if (leader == NULL) return;
  /* The one naming rule of a leader's unique address: batchcast-<uid>-<pid>-<front door>-<n>. */
  EXPECT(strncmp(bc_leader_address(leader), "batchcast-", 10) == 0 &&
         strstr(bc_leader_address(leader), "-c-leader-") != NULL);
  bc_consumer_t c = AttachTo(leader, 3, 0);
  if (c == NULL) return;
  int64_t per_epoch = 0;
  EXPECT_STATUS(bc_consumer_batches_per_epoch(c, 0, &per_epoch), BC_SUCCESS);
  EXPECT(per_epoch == (samples + 7) / 8);

  /* A newer header's info struct: the library fills what it knows, zeroes the rest. */
  struct {
    bc_batch_info_t info;
    int64_t newer_field;
  } newer;
  bc_batch_info_init(&newer.info);
  newer.info.struct_size = sizeof(newer);
  newer.newer_field = -1;
  bc_batch_t held[2];
  EXPECT_STATUS(bc_consumer_next(c, &held[0], &newer.info), BC_SUCCESS);
  EXPECT(newer.newer_field == 0 && newer.info.struct_size == sizeof(newer));
  EXPECT(newer.info.size == 8 && newer.info.epoch == 0 && newer.info.index == 0);
  EXPECT(newer.info.images.ndim == 4 && newer.info.images.shape[0] == 8);
  EXPECT(newer.info.images.shape[2] == 16 && newer.info.layout == BC_LAYOUT_NCHW);
  bc_batch_info_t info;
  bc_batch_info_init(&info);
  EXPECT_STATUS(bc_consumer_next(c, &held[1], &info), BC_SUCCESS);
  EXPECT(info.index == 1 && info.lr_factor == 1.0f);
  uint64_t pos_epoch = 9, pos_batch = 9;
  EXPECT_STATUS(bc_consumer_position(c, &pos_epoch, &pos_batch), BC_SUCCESS);
  EXPECT(pos_epoch == 0 && pos_batch == 2);
  bc_position_t pos;
  bc_position_init(&pos);
  EXPECT_STATUS(bc_consumer_get_position(c, &pos), BC_SUCCESS);
  EXPECT(pos.epoch == 0 && pos.batch == 2 && pos.run_epoch == 0);
  EXPECT_STATUS(bc_consumer_get_position(c, NULL), BC_ERR_INVALID_ARGUMENT);
  pos.struct_size = 0; /* forgot bc_position_init */
  EXPECT_STATUS(bc_consumer_get_position(c, &pos), BC_ERR_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS("bc_position_init");
  EXPECT_STATUS(bc_consumer_get_position(NULL, &pos), BC_ERR_INVALID_ARGUMENT);
  /* buffer_depth batches held: another is an error, not a deadlock. */
  bc_batch_t extra = NULL;
  EXPECT_STATUS(bc_consumer_next(c, &extra, &info), BC_ERR_FAILED_PRECONDITION);
  EXPECT(extra == NULL);
  TestDlpack(held[0], &newer.info);
  EXPECT_STATUS(bc_batch_info(held[1], &info), BC_SUCCESS);
  EXPECT(info.index == 1);
  EXPECT_STATUS(bc_batch_release(held[1]), BC_SUCCESS);

  EXPECT(16 + ReadToTheEnd(c) == samples);
  Finish(c, leader);
}

/* Resume: a consumer started at (epoch 0, batch 3) gets batches 3.. of the epoch only. */
static void TestResume(const char* dataset, int samples) {
  bc_leader_t leader = StartLeader(dataset, "--start-batch 3");
  if (leader == NULL) return;
  bc_consumer_t c = AttachTo(leader, -1, 3);
  if (c == NULL) return;
  bc_batch_t b;
  bc_batch_info_t info;
  bc_batch_info_init(&info);
  int64_t got = 0, first_index = -1;
  while (bc_consumer_next(c, &b, &info) == BC_SUCCESS) {
    if (first_index < 0) first_index = (int64_t)info.index;
    got += info.size;
    bc_batch_release(b);
  }
  EXPECT(first_index == 3);
  EXPECT(got == samples - 3 * 8);
  Finish(c, leader);
}

/* A position a service's replay moved (its own epoch 0 at stream epoch 1), resumed through the
 * config field: two epochs of the stream, the run epoch counted; bc_consumer_position cannot
 * say it and refuses; a stream that ends too soon for it is refused at attach. */
static void TestMovedResume(const char* dataset, int samples) {
  for (int stream_epochs = 2; stream_epochs <= 3; ++stream_epochs) {
    char extra[64];
    snprintf(extra, sizeof(extra), "--start-epoch 1 --epochs %d", stream_epochs);
    bc_leader_t leader = StartLeader(dataset, extra);
    if (leader == NULL) return;
    bc_consumer_config_t cfg;
    bc_consumer_config_init(&cfg);
    cfg.address = bc_leader_address(leader);
    cfg.options = "--batch-size 8 --buffer-depth 2";
    cfg.epochs = 2;
    cfg.start_epoch = 1;
    cfg.start_run_epoch = 0;
    bc_consumer_t c = NULL;
    if (stream_epochs == 2) { /* stream epoch 1 only: one of the two epochs it needs */
      EXPECT_STATUS(bc_consumer_attach(&cfg, &c), BC_ERR_FAILED_PRECONDITION);
      EXPECT_ERROR_HAS("needs 2 more epochs of the stream");
      EXPECT_STATUS(bc_leader_destroy(leader), BC_SUCCESS);
      continue;
    }
    EXPECT_STATUS(bc_consumer_attach(&cfg, &c), BC_SUCCESS);
    if (c == NULL) return;
    uint64_t epoch = 9, batch = 9;
    EXPECT_STATUS(bc_consumer_position(c, &epoch, &batch), BC_ERR_FAILED_PRECONDITION);
    EXPECT_ERROR_HAS("bc_consumer_get_position");
    bc_position_t pos;
    bc_position_init(&pos);
    EXPECT_STATUS(bc_consumer_get_position(c, &pos), BC_SUCCESS);
    EXPECT(pos.epoch == 1 && pos.batch == 0 && pos.run_epoch == 0);
    bc_batch_t b;
    bc_batch_info_t info;
    bc_batch_info_init(&info);
    int64_t got = 0;
    while (bc_consumer_next(c, &b, &info) == BC_SUCCESS) {
      got += info.size;
      bc_batch_release(b);
    }
    EXPECT(got == 2 * (int64_t)samples);
    EXPECT_STATUS(bc_consumer_get_position(c, &pos), BC_SUCCESS);
    EXPECT(pos.epoch == 3 && pos.batch == 0 && pos.run_epoch == 2);
    Finish(c, leader);
  }
}

/* A consumer's own view (bc_consumer_config_t.view): its group's images, every sample once;
 * refused with the cause by a leader that serves its own view only, and when too long. */
static void TestView(const char* dataset, int samples) {
  bc_leader_t leader = StartLeader(dataset, "--views-max 2");
  if (leader == NULL) return;
  bc_consumer_config_t cfg;
  bc_consumer_config_init(&cfg);
  cfg.address = bc_leader_address(leader);
  cfg.options = "--epochs 1 --batch-size 8 --buffer-depth 2";
  cfg.view = "view(size=8,crop=center)";
  bc_consumer_t c = NULL;
  EXPECT_STATUS(bc_consumer_attach(&cfg, &c), BC_SUCCESS);
  if (c == NULL) return;
  bc_batch_t b;
  bc_batch_info_t info;
  bc_batch_info_init(&info);
  int64_t got = 0;
  while (bc_consumer_next(c, &b, &info) == BC_SUCCESS) {
    EXPECT(info.images.ndim == 4 && info.images.shape[1] == 3 && info.images.shape[2] == 8 &&
           info.images.shape[3] == 8 && info.image_size == 8);
    EXPECT(info.images.nbytes == (uint64_t)info.size * 3 * 8 * 8);
    got += info.size - info.repeats;
    bc_batch_release(b);
  }
  EXPECT(got == samples);
  Finish(c, leader);

  leader = StartLeader(dataset, "");
  if (leader == NULL) return;
  cfg.address = bc_leader_address(leader);
  EXPECT_STATUS(bc_consumer_attach(&cfg, &c), BC_ERR_FAILED_PRECONDITION);
  EXPECT_ERROR_HAS("views_max=1");
  static char longer[400];
  memset(longer, ' ', sizeof(longer) - 1);
  memcpy(longer, "view(size=8)", 12);
  cfg.view = longer;
  EXPECT_STATUS(bc_consumer_attach(&cfg, &c), BC_ERR_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS("at most 255 fit a join");
  EXPECT_STATUS(bc_leader_destroy(leader), BC_SUCCESS);
}

/* A consumer of the Producer at `address` with option flags `options` (NULL: failed). */
static bc_consumer_t AttachProducer(const char* address, const char* options) {
  bc_consumer_config_t cfg;
  bc_consumer_config_init(&cfg);
  cfg.address = address;
  cfg.options = options;
  bc_consumer_t c = NULL;
  EXPECT_STATUS(bc_consumer_attach(&cfg, &c), BC_SUCCESS);
  return c;
}

/* `capi_test --named ADDRESS SAMPLES` (tests/python/test_named_tensors.py): consumes a
 * Python Producer's dict batches, whose tensor "tok" holds int64 [4] = id * 4 + k and "emb"
 * float32 [2] = (id, -id) for sample id, and checks every sample by name through DLPack. */
static int ConsumeNamed(const char* address, int samples) {
  bc_consumer_t c = AttachProducer(address, "--batch-size 5");
  if (c == NULL) return 1;
  bc_batch_t batch;
  bc_batch_info_t info;
  bc_batch_info_init(&info);
  int seen = 0, bad = 0, count = 0;
  while (bc_consumer_next(c, &batch, &info) == BC_SUCCESS) {
    const char* second = NULL;
    EXPECT_STATUS(bc_batch_num_tensors(batch, &count), BC_SUCCESS);
    EXPECT_STATUS(bc_batch_tensor_name(batch, 1, &second), BC_SUCCESS);
    EXPECT(count == 2 && second != NULL && strcmp(second, "emb") == 0);
    struct DLManagedTensor *tok = NULL, *emb = NULL;
    EXPECT_STATUS(bc_batch_tensor_dlpack(batch, "tok", &tok), BC_SUCCESS);
    EXPECT_STATUS(bc_batch_tensor_dlpack(batch, "emb", &emb), BC_SUCCESS);
    if (tok == NULL || emb == NULL) break;
    EXPECT(tok->dl_tensor.ndim == 2 && tok->dl_tensor.shape[1] == 4);
    EXPECT(emb->dl_tensor.dtype.code == kDLFloat && emb->dl_tensor.dtype.bits == 32);
    const int64_t* t = (const int64_t*)tok->dl_tensor.data;
    const float* e = (const float*)emb->dl_tensor.data;
    for (int64_t i = 0; i < info.size; ++i) {
      const int64_t id = info.sample_ids[i];
      for (int k = 0; k < 4; ++k) bad += t[i * 4 + k] != id * 4 + k;
      bad += e[i * 2] != (float)id || e[i * 2 + 1] != -(float)id;
    }
    seen += (int)info.size - info.repeats;
    tok->deleter(tok);
    emb->deleter(emb);
    bc_batch_release(batch);
  }
  bc_consumer_detach(c);
  EXPECT(bad == 0);
  EXPECT(seen == samples);
  if (failures == 0) printf("capi_test: named OK %d samples\n", seen);
  return failures == 0 ? 0 : 1;
}

/* `capi_test --ragged ADDRESS SAMPLES` (tests/python/test_ragged_tensors.py): consumes a
 * Python Producer's dict batches whose variable-length tensor "tok" holds, for sample id,
 * id % 5 int64 rows id * 10 + r (some samples empty), beside a fixed "emb"; checks every row
 * through bc_batch_ragged and DLPack, and that misuse is refused naming the tensor. */
static int ConsumeRagged(const char* address, int samples) {
  bc_consumer_t c = AttachProducer(address, "--batch-size 7");
  if (c == NULL) return 1;
  bc_batch_t batch;
  bc_batch_info_t info;
  bc_batch_info_init(&info);
  int seen = 0, bad = 0, empty = 0;
  while (bc_consumer_next(c, &batch, &info) == BC_SUCCESS) {
    bc_ragged_t tok;
    bc_ragged_init(&tok);
    EXPECT_STATUS(bc_batch_ragged(batch, "tok", &tok), BC_SUCCESS);
    EXPECT(tok.size == info.size && tok.offsets != NULL && tok.offsets[0] == 0);
    EXPECT(tok.values.ndim == 1 && tok.values.dtype == BC_DTYPE_INT64);
    EXPECT(tok.values.shape[0] == tok.offsets[tok.size]);
    EXPECT_STATUS(bc_batch_ragged(batch, "emb", &tok), BC_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(bc_last_error(), "tensor 'emb' has a fixed per-sample shape") != NULL);
    EXPECT_STATUS(bc_batch_ragged(batch, "nope", &tok), BC_ERR_NOT_FOUND);
    bc_ragged_init(&tok);
    EXPECT_STATUS(bc_batch_ragged(batch, "tok", &tok), BC_SUCCESS);
    struct DLManagedTensor *values = NULL, *offsets = NULL, *none = NULL;
    EXPECT_STATUS(bc_batch_tensor_dlpack(batch, "tok", &values), BC_SUCCESS);
    EXPECT_STATUS(bc_batch_offsets_dlpack(batch, "emb", &none), BC_ERR_INVALID_ARGUMENT);
    EXPECT(none == NULL);
    EXPECT_STATUS(bc_batch_offsets_dlpack(batch, "tok", &offsets), BC_SUCCESS);
    if (values == NULL || offsets == NULL || tok.offsets == NULL) break;
    EXPECT(values->dl_tensor.data == tok.values.data && offsets->dl_tensor.ndim == 1 &&
           offsets->dl_tensor.shape[0] == info.size + 1);
    const int64_t* v = (const int64_t*)tok.values.data;
    const int64_t* o = (const int64_t*)offsets->dl_tensor.data;
    for (int64_t i = 0; i < info.size; ++i) {
      const int64_t id = info.sample_ids[i];
      bad += o[i + 1] - o[i] != id % 5 || o[i] != tok.offsets[i];
      for (int64_t r = 0; r < id % 5 && r < o[i + 1] - o[i]; ++r) bad += v[o[i] + r] != id * 10 + r;
      empty += id % 5 == 0;
    }
    seen += (int)info.size - info.repeats;
    bc_batch_release(batch);  /* the DLPack tensors keep the batch's memory */
    bad += o[info.size] != tok.offsets[info.size];
    values->deleter(values);
    offsets->deleter(offsets);
  }
  bc_consumer_detach(c);
  EXPECT(bad == 0);
  EXPECT(seen == samples);
  EXPECT(empty > 0);
  if (failures == 0) printf("capi_test: ragged OK %d samples, %d empty\n", seen, empty);
  return failures == 0 ? 0 : 1;
}

/* `capi_test --stage DATASET SAMPLES MEAN_PT` (tests/python/test_model_stage.py): a C API
 * leader with a model stage whose module returns each image's per-channel mean (tensor
 * "mean", float32 [C]). With keep_input=true every sample's "mean" equals the mean of its
 * pixels computed here; with keep_input=false the batch has no images (a clear error naming
 * the option) and the same means arrive (a checksum over sample ids equal to the first run). */
static double StageRun(const char* dataset, int samples, const char* module, int keep) {
  char extra[1024];
  snprintf(extra, sizeof(extra),
           "--limit-samples %d --stage model(path=%s,output=mean,keep_input=%s)", samples,
           module, keep ? "true" : "false");
  bc_leader_t leader = StartLeader(dataset, extra);
  if (leader == NULL) return -1;
  bc_consumer_t c = AttachTo(leader, 0, 0);
  if (c == NULL) return -1;
  bc_batch_t b;
  bc_batch_info_t info;
  bc_batch_info_init(&info);
  double checksum = 0;
  int seen = 0, bad = 0;
  while (bc_consumer_next(c, &b, &info) == BC_SUCCESS) {
    struct DLManagedTensor *mean = NULL, *images = NULL;
    EXPECT_STATUS(bc_batch_tensor_dlpack(b, "mean", &mean), BC_SUCCESS);
    if (mean == NULL) break;
    const int64_t ch = mean->dl_tensor.shape[1];
    const float* m = (const float*)mean->dl_tensor.data;
    if (keep) {
      EXPECT_STATUS(bc_batch_tensor_dlpack(b, "images", &images), BC_SUCCESS);
      if (images == NULL) break;
      const int64_t hw = images->dl_tensor.shape[2] * images->dl_tensor.shape[3];
      const uint8_t* px = (const uint8_t*)images->dl_tensor.data;
      for (int64_t i = 0; i < info.size * ch; ++i) {
        double sum = 0;
        for (int64_t k = 0; k < hw; ++k) sum += px[i * hw + k];
        bad += fabs(sum / (double)hw - m[i]) > 1e-3;
      }
      images->deleter(images);
    } else {
      EXPECT(bc_batch_tensor_dlpack(b, "images", &images) == BC_ERR_NOT_FOUND);
      EXPECT(strstr(bc_last_error(), "keep_input=false in option 'stage'") != NULL);
    }
    for (int64_t i = 0; i < info.size - info.repeats; ++i)
      for (int64_t k = 0; k < ch; ++k)
        checksum += (double)m[i * ch + k] * (double)(info.sample_ids[i] + 1) * (double)(k + 1);
    seen += (int)(info.size - info.repeats);
    mean->deleter(mean);
    bc_batch_release(b);
  }
  EXPECT(bad == 0);
  EXPECT(seen == samples);
  Finish(c, leader);
  return checksum;
}

/* The `telemetry` option through the C API (docs/telemetry.md "Outputs are checked at the
 * start"): an unwritable path is refused by bc_leader_start and bc_consumer_attach before
 * anything runs, naming the path and the cause; a run directory gets one file per handle,
 * written when the stream ends (bc_leader_wait, bc_consumer_detach). */
static int CountFilesWithPrefix(const char* dir, const char* prefix, int nonempty_only) {
  char cmd[1024];
  snprintf(cmd, sizeof(cmd), "find '%s' -maxdepth 1 -name '%s*.h5' %s | wc -l", dir, prefix,
           nonempty_only ? "-size +0" : "");
  FILE* p = popen(cmd, "r");
  int n = -1;
  if (p != NULL) {
    if (fscanf(p, "%d", &n) != 1) n = -1;
    pclose(p);
  }
  return n;
}

static void TestTelemetryOutputs(const char* dataset) {
  bc_leader_config_t lc;
  bc_leader_config_init(&lc);
  char options[1024];
  snprintf(options, sizeof(options),
           "--dataset %s --epochs 1 --batch-size 8 --image-size 16 --threads 1 "
           "--telemetry hdf5=/dev/null/run.h5", dataset);
  lc.options = options;
  bc_leader_t leader = NULL;
  EXPECT_STATUS(bc_leader_start(&lc, &leader), BC_ERR_FAILED_PRECONDITION);
  EXPECT(leader == NULL);
  EXPECT_ERROR_HAS("telemetry hdf5 file /dev/null/run.h5");
  EXPECT_ERROR_HAS("Not a directory");

  bc_consumer_config_t cfg;
  bc_consumer_config_init(&cfg);
  cfg.address = "batchcast-c-no-such-leader";
  cfg.options = "--epochs 1 --batch-size 8 --telemetry trace=/dev/null/t.json";
  bc_consumer_t c = NULL;
  EXPECT_STATUS(bc_consumer_attach(&cfg, &c), BC_ERR_FAILED_PRECONDITION);  /* not a timeout */
  EXPECT(c == NULL);
  EXPECT_ERROR_HAS("telemetry trace /dev/null/t.json");

  char run[512], extra[640], copts[700];
  snprintf(run, sizeof(run), "%s.run-%d", dataset, (int)getpid());
  snprintf(extra, sizeof(extra), "--telemetry dir:%s", run);
  leader = StartLeader(dataset, extra);
  if (leader == NULL) return;
  cfg.address = bc_leader_address(leader);
  snprintf(copts, sizeof(copts), "--epochs 1 --batch-size 8 --buffer-depth 2 --telemetry dir:%s",
           run);
  cfg.options = copts;
  cfg.rank = 0;
  EXPECT_STATUS(bc_consumer_attach(&cfg, &c), BC_SUCCESS);
  if (c == NULL) return;
  EXPECT(CountFilesWithPrefix(run, "leader-", 0) == 1);   /* claimed at the start (the */
  EXPECT(CountFilesWithPrefix(run, "consumer-", 0) == 1); /* leader may be done already), */
  EXPECT(CountFilesWithPrefix(run, "consumer-", 1) == 0); /* written at the end */
  bc_batch_t b;
  bc_status_t st;
  while ((st = bc_consumer_next(c, &b, NULL)) == BC_SUCCESS) bc_batch_release(b);
  EXPECT(st == BC_END_OF_STREAM);
  Finish(c, leader);
  EXPECT(CountFilesWithPrefix(run, "leader-", 1) == 1);
  EXPECT(CountFilesWithPrefix(run, "consumer-", 1) == 1);
  char rm[700];
  snprintf(rm, sizeof(rm), "rm -rf '%s'", run);
  EXPECT(system(rm) == 0);
}

static int TestStage(const char* dataset, int samples, const char* module) {
  const double kept = StageRun(dataset, samples, module, 1);
  const double dropped = StageRun(dataset, samples, module, 0);
  EXPECT(kept > 0 && fabs(kept - dropped) <= 1e-9 * kept);
  if (failures == 0) printf("capi_test: stage OK %d samples, checksum %.6g\n", samples, kept);
  return failures == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc == 4 && strcmp(argv[1], "--named") == 0) return ConsumeNamed(argv[2], atoi(argv[3]));
  if (argc == 4 && strcmp(argv[1], "--ragged") == 0) return ConsumeRagged(argv[2], atoi(argv[3]));
  if (argc == 5 && strcmp(argv[1], "--stage") == 0)
    return TestStage(argv[2], atoi(argv[3]), argv[4]);
  if (argc != 3) {
    fprintf(stderr, "usage: capi_test DATASET.h5 SAMPLES\n");
    return 2;
  }
  TestVersionAndStrings();
  TestArgumentErrors();
  TestStream(argv[1], atoi(argv[2]));
  TestResume(argv[1], atoi(argv[2]));
  TestMovedResume(argv[1], atoi(argv[2]));
  TestView(argv[1], atoi(argv[2]));
  TestTelemetryOutputs(argv[1]);
  if (failures == 0) printf("capi_test: PASS\n");
  return failures == 0 ? 0 : 1;
}
