// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// The native decode pipeline as a leader's BatchSource.
#include "core/errors.h"
#include "producer/batch_source.h"
#include "producer/decoded_cache.h"

namespace batchcast::producer {
namespace {

class PipelineSource : public BatchSource {
 public:
  PipelineSource(std::unique_ptr<pipeline::Pipeline> p) : pipeline_(std::move(p)) {}
  int64_t num_samples() const override { return pipeline_->dataset().num_samples; }
  pipeline::SampleLayout MaxLayout() const override { return pipeline_->OutputLayout(0); }
  pipeline::SampleLayout Layout(int image_size) const override {
    return pipeline_->OutputLayout(image_size);
  }
  Status Fill(const pipeline::BatchRequest& req, pipeline::BatchResult* result) override {
    return pipeline_->RunBatch(req, result);
  }
  void Start(const pipeline::BatchRequest& req) override { pipeline_->StartBatch(req); }
  Status Finish(pipeline::BatchResult* result) override { return pipeline_->FinishBatch(result); }
  bool overlaps() const override { return true; }
  bool WaitOldest(int64_t timeout_ms) override { return pipeline_->WaitOldest(timeout_ms); }
  int64_t idle_ns() const override { return pipeline_->idle_ns(); }
  int threads() const override { return pipeline_->threads(); }

 private:
  std::unique_ptr<pipeline::Pipeline> pipeline_;
};

}  // namespace

void BatchSource::Start(const pipeline::BatchRequest& req) {
  pipeline::BatchResult result;
  Status st = Fill(req, &result);
  started_.emplace_back(std::move(st), std::move(result));
}

Status BatchSource::Finish(pipeline::BatchResult* result) {
  if (started_.empty())
    return FailedPreconditionError("batch source: Finish without a started fill");
  auto [st, r] = std::move(started_.front());
  started_.erase(started_.begin());
  *result = std::move(r);
  return st;
}

Result<std::unique_ptr<BatchSource>> MakePipelineSource(const Options& options) {
  if (options.dataset.empty())
    return InvalidArgumentError("no dataset given: set --dataset FILE.h5 (or BATCHCAST_DATASET)");
  auto reader = data::DatasetReader::Open(options.dataset);
  if (!reader.ok()) return reader.status();
  std::shared_ptr<DecodedCache> cache;
  if (options.cache > 0)
    cache = std::make_shared<DecodedCache>(options.cache, pipeline::DecodedCacheKeys((*reader)->info()),
                                           (*reader)->info().path);
  auto p = pipeline::Pipeline::Create(options, std::move(reader).value(), cache);
  if (!p.ok()) return p.status();
  if (cache != nullptr) BC_RETURN_IF_ERROR(CheckCacheBudget(options, **p, *cache));
  return std::unique_ptr<BatchSource>(new PipelineSource(std::move(p).value()));
}

}  // namespace batchcast::producer
