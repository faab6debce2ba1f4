// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// The native decode pipeline as a leader's BatchSource.
#include "core/errors.h"
#include "producer/batch_source.h"
#include "producer/decoded_cache.h"

namespace batchcast::producer {
namespace {

class PipelineSource : public BatchSource {
 public:
  // own: the options' view as given (ViewFromOptions: mean and std kept without normalize),
  // the base a consumer's partial view spec is read over.
  PipelineSource(std::unique_ptr<pipeline::Pipeline> p, const core::View& own)
      : pipeline_(std::move(p)), own_(own) {}
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
  const core::View* own_view() const override { return &own_; }
  Result<pipeline::SampleLayout> CheckView(const core::View& view) const override {
    return pipeline_->CheckView(view);
  }
  Result<int> AddView(const core::View& view) override { return pipeline_->AddView(view); }

 private:
  std::unique_ptr<pipeline::Pipeline> pipeline_;
  core::View own_;
};

}  // namespace

void BatchSource::Start(const pipeline::BatchRequest& req) {
  pipeline::BatchResult result;
  Status st = Fill(req, &result);
  started_.emplace_back(std::move(st), std::move(result));
}

Result<pipeline::SampleLayout> BatchSource::CheckView(const core::View& view) const {
  return FailedPreconditionError("{}: this batch source makes one kind of image only",
                                 core::ViewToString(view));
}

Result<int> BatchSource::AddView(const core::View& view) {
  return FailedPreconditionError("{}: this batch source makes one kind of image only",
                                 core::ViewToString(view));
}

Status BatchSource::Finish(pipeline::BatchResult* result) {
  if (started_.empty())
    return FailedPreconditionError("batch source: Finish without a started fill");
  auto [st, r] = std::move(started_.front());
  started_.erase(started_.begin());
  *result = std::move(r);
  return st;
}

Result<core::View> ViewSpecBase(const Options& options) {
  BC_ASSIGN_OR_RETURN(core::View own, core::ViewFromOptions(options));
  if (own.normalize) return own;
  Options normalized = options;
  normalized.normalize = true;
  auto with = core::ViewFromOptions(normalized);
  const core::View values = with.ok() ? *with : core::View{};
  own.mean = values.mean;
  own.std = values.std;
  own.mean_count = values.mean_count;
  own.std_count = values.std_count;
  return own;
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
  BC_ASSIGN_OR_RETURN(const core::View own, ViewSpecBase(options));
  return std::unique_ptr<BatchSource>(new PipelineSource(std::move(p).value(), own));
}

}  // namespace batchcast::producer
