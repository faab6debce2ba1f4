// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// The native decode pipeline as a leader's BatchSource.
#include "core/errors.h"
#include "producer/batch_source.h"

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
  int threads() const override { return pipeline_->threads(); }

 private:
  std::unique_ptr<pipeline::Pipeline> pipeline_;
};

}  // namespace

Result<std::unique_ptr<BatchSource>> MakePipelineSource(const Options& options) {
  if (options.dataset.empty())
    return InvalidArgumentError("no dataset given: set --dataset FILE.h5 (or BATCHCAST_DATASET)");
  auto reader = data::DatasetReader::Open(options.dataset);
  if (!reader.ok()) return reader.status();
  auto p = pipeline::Pipeline::Create(options, std::move(reader).value());
  if (!p.ok()) return p.status();
  return std::unique_ptr<BatchSource>(new PipelineSource(std::move(p).value()));
}

}  // namespace batchcast::producer
