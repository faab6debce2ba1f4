// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// bench_views: one decode, many views (docs/pipeline.md, "Views"). Three groups of a sweep,
// RandomResizedCrop 160, 192 and 224 + flip + normalize (float32 CHW), on the decode
// benchmark's real-photo JPEGs, through the real Pipeline::RunBatch with one worker thread.
// Side by side in one run, CPU time in paired turns (PairedCpu: every chain runs a slice of
// --slice samples before the next slice, so a change in the machine's speed hits every chain
// alike):
//   224 alone         the 224 group as a one-view leader (the reference: cost 1)
//   160 / 192 alone   the other two groups' own leaders
//   three views       one pipeline, the three groups (each its own random draw), one read
//                     and one decode per sample and DCT scale: three_views_cpu_ratio
//   shared draw       the three groups naming one draw (one box per sample, three sizes)
//   ... dct_scaling=0 both again without DCT scaling: every group at the full scale, so one
//                     decode per sample (the 224 group never scales on these 500x375 photos:
//                     half of any box is under 224 px, so its cost is the same); the shared
//                     draw without DCT scaling is one decode and three transforms, the least
//                     any leader of these three exact views can cost
//   two normalisations  the 224 view twice on one draw, ImageNet's mean/std and a ViT's
//                     (0.5): one decode and one resize per sample, two output passes
//   decodes only      what "224 alone", "three views" and "three views, dct_scaling=0" decode
//                     per sample (the same boxes, PlanDecodes, the crop decoder), and nothing
//                     else: three_views_decode_ratio is the floor under three_views_cpu_ratio
//                     that no transform work can lower
// separate_leaders_cpu_ratio = (224 + 160 + 192 alone) / 224 alone: three leaders, one per view.
// Also: decodes per sample, and the decode and per-group transform time per sample of the
// three-view chain (the stage times telemetry shows). The load average is printed at the
// start and the end (the machine is shared).
#include <optional>
#include <string>
#include <vector>

#include "core/view.h"
#include "harness.h"
#include "pipeline/crop_decode.h"
#include "pipeline/decode.h"
#include "pipeline/pipeline.h"
#include "pipeline/transform.h"
#include "pipeline/views.h"
#include "tests/unit/pipeline/memory_reader.h"

namespace batchcast::bench {
namespace {

struct Args {
  std::string set;
  int images = 300, reps = 5, slice = 8;
  int profile = -1;  // --profile C: only chain C (0-based, in the table's order), for perf
};

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "bench_views: %s\n", what.c_str());
  std::exit(1);
}

core::View ViewOf(const std::string& spec, const core::View& base) {
  auto v = core::ParseView(spec, base);
  if (!v.ok()) Fail(v.status().ToString());
  return *v;
}

// One leader: a pipeline of one worker thread filling `views` (empty: its own view) from every
// sample of a slice.
class Chain {
 public:
  Chain(std::string name, const Options& o, std::shared_ptr<data::DatasetReader> reader,
        const std::vector<core::View>& views, int slice)
      : name_(std::move(name)) {
    auto p = pipeline::Pipeline::Create(o, std::move(reader));
    if (!p.ok()) Fail(p.status().ToString());
    pipeline_ = std::move(*p);
    for (const core::View& v : views) {
      auto id = pipeline_->AddView(v);
      if (!id.ok()) Fail(id.status().ToString());
      images_.emplace_back(pipeline_->GroupLayout(*id).bytes() * size_t(slice));
      groups_.push_back(pipeline::GroupTarget{*id, 0, images_.back().data()});
    }
    if (views.empty()) images_.emplace_back(pipeline_->OutputLayout().bytes() * size_t(slice));
    labels_.resize(size_t(slice));
    group_ns_.assign(std::max<size_t>(1, groups_.size()), 0);
  }

  // Samples [first, first + count) of `epoch`; returns the process CPU seconds they took.
  double Slice(uint64_t epoch, int64_t first, int64_t count) {
    idx_.clear();
    for (int64_t i = first; i < first + count; ++i) idx_.push_back(i);
    pipeline::BatchRequest req{epoch, idx_, 0, groups_.empty() ? images_[0].data() : nullptr,
                               labels_.data()};
    req.groups = groups_;
    pipeline::BatchResult r;
    const double c0 = ProcessCpuSeconds();
    Status s = pipeline_->RunBatch(req, &r);
    const double cpu = ProcessCpuSeconds() - c0;
    if (!s.ok()) Fail(name_ + ": " + s.ToString());
    samples_ += count;
    decodes_ += r.decodes;
    decode_ns_ += r.decode_ns;
    for (size_t g = 0; g < r.group_transform_ns.size(); ++g) group_ns_[g] += r.group_transform_ns[g];
    return cpu;
  }

  const std::string& name() const { return name_; }
  double decodes_per_sample() const { return double(decodes_) / double(std::max<int64_t>(1, samples_)); }
  double decode_ms_per_sample() const { return 1e-6 * double(decode_ns_) / double(std::max<int64_t>(1, samples_)); }
  double group_ms_per_sample(size_t g) const { return 1e-6 * double(group_ns_[g]) / double(std::max<int64_t>(1, samples_)); }

 private:
  std::string name_;
  std::unique_ptr<pipeline::Pipeline> pipeline_;
  std::vector<std::vector<uint8_t>> images_;
  std::vector<pipeline::GroupTarget> groups_;
  std::vector<int64_t> labels_, idx_;
  int64_t samples_ = 0, decodes_ = 0, decode_ns_ = 0;
  std::vector<int64_t> group_ns_;
};

// The decodes alone of a leader of `views` (no resize, no output pass): per sample the header,
// each view's box and DCT scale as the pipeline draws them, PlanDecodes, and each step's crop
// (or whole) decode, as PipelineImpl::ProcessStored runs them.
class DecodesOnly {
 public:
  DecodesOnly(std::shared_ptr<data::DatasetReader> reader, const std::vector<core::View>& views,
              uint64_t seed, bool dct_scaling)
      : reader_(std::move(reader)), dct_scaling_(dct_scaling) {
    for (const core::View& v : views) {
      auto p = pipeline::PrepareView(v, reader_->info(), 3, seed);
      if (!p.ok()) Fail(p.status().ToString());
      views_.push_back(std::move(*p));
    }
    auto d = pipeline::ImageDecoder::Create();
    auto c = pipeline::JpegCropDecoder::Create();
    if (!d.ok() || !c.ok()) Fail("cannot create the decoders");
    decoder_.emplace(std::move(*d));
    crop_.emplace(std::move(*c));
  }

  double Slice(uint64_t epoch, int64_t first, int64_t count) {
    const double c0 = ProcessCpuSeconds();
    for (int64_t i = first; i < first + count; ++i) Sample(epoch, i);
    return ProcessCpuSeconds() - c0;
  }

 private:
  void Sample(uint64_t epoch, int64_t index) {
    if (!reader_->ReadSample(index, &bytes_).ok()) Fail("cannot read a sample");
    auto header = decoder_->ReadHeader(bytes_, int64_t(1) << 40);
    if (!header.ok()) Fail(header.status().ToString());
    const int w = header->width, h = header->height;
    std::vector<pipeline::GroupDraw> draws(views_.size());
    for (size_t g = 0; g < views_.size(); ++g) {
      const int size = views_[g].spec.layout.width;
      draws[g].box = pipeline::ViewCropBox(views_[g], w, h, index, epoch);
      draws[g].scale_num = dct_scaling_ ? pipeline::ChooseScaleNum(draws[g].box.width,
                                                                   draws[g].box.height, size, size)
                                        : pipeline::kScaleDenom;
    }
    std::vector<pipeline::DecodeStep> steps(draws.size());
    const int n = pipeline::PlanDecodes(draws, w, h, steps);
    for (int k = 0; k < n; ++k) {
      const int scale = steps[size_t(k)].scale_num;
      const auto whole =
          pipeline::FullBox(pipeline::ScaledDim(w, scale), pipeline::ScaledDim(h, scale));
      pipeline::CropBox in;
      const Status st = steps[size_t(k)].region == whole
                            ? decoder_->Decode(bytes_, *header, scale, 3, &decoded_)
                            : crop_->Decode(bytes_, *header, scale, 3, steps[size_t(k)].region,
                                            &decoded_, &in);
      if (!st.ok()) Fail(st.ToString());
    }
  }

  std::shared_ptr<data::DatasetReader> reader_;
  bool dct_scaling_;
  std::vector<pipeline::PreparedView> views_;
  std::optional<pipeline::ImageDecoder> decoder_;
  std::optional<pipeline::JpegCropDecoder> crop_;
  std::vector<uint8_t> bytes_;
  pipeline::DecodedImage decoded_;
};

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) Fail(k + " needs a value");
    const std::string v = argv[++i];
    if (k == "--set") a.set = v;
    else if (k == "--images") a.images = std::stoi(v);
    else if (k == "--reps") a.reps = std::stoi(v);
    else if (k == "--slice") a.slice = std::max(1, std::stoi(v));
    else if (k == "--profile") a.profile = std::stoi(v);
    else {
      std::fprintf(stderr, "usage: bench_views --set DIR [--images N] [--reps R] [--slice N] "
                           "[--profile CHAIN]\n");
      std::exit(2);
    }
  }
  return a;
}

std::vector<double> Ratios(const std::vector<double>& num, const std::vector<double>& den) {
  std::vector<double> r;
  for (size_t i = 0; i < num.size() && i < den.size(); ++i) r.push_back(num[i] / den[i]);
  return r;
}

int Main(int argc, char** argv) {
  const Args a = ParseArgs(argc, argv);
  auto set = LoadJpegSet(a.set, size_t(a.images));
  if (set.size() < 16)
    Fail(fmt::format("need a --set directory with at least 16 JPEGs ({} in '{}'; run.sh builds "
                     "it with bench_decode --make-set)", set.size(), a.set));
  const std::string load_start = LoadAverage();
  auto reader = testing::MemoryReader::Encoded(std::move(set), "views_set");
  reader->StoreChecksums();  // as converted files have them: verify=sample (default) checks
  const int64_t n = reader->info().num_samples;
  Options o;
  o.threads = 1;
  o.image_size = 224;
  o.crop = "random";
  o.flip = true;
  o.normalize = true;
  auto leader = core::ViewFromOptions(o);
  if (!leader.ok()) Fail(leader.status().ToString());
  // The groups: the leader's own view at 224 (draw=leader) and views at 160 and 192 with
  // draws of their own; or all three on one named draw.
  const core::View v160 = ViewOf("view(size=160)", *leader), v192 = ViewOf("view(size=192)", *leader);
  const core::View s224 = ViewOf("view(size=224,draw=1)", *leader);
  const core::View s160 = ViewOf("view(size=160,draw=1)", *leader);
  const core::View s192 = ViewOf("view(size=192,draw=1)", *leader);
  // A one-view leader drawing what view v draws.
  auto alone = [&](const core::View& v) {
    Options x = o;
    x.image_size = v.image_size;
    x.seed = core::ViewDrawSeed(o.seed, v);
    return x;
  };
  std::vector<Chain> chains;
  chains.emplace_back("224 alone", o, reader, std::vector<core::View>{}, a.slice);
  chains.emplace_back("160 alone", alone(v160), reader, std::vector<core::View>{}, a.slice);
  chains.emplace_back("192 alone", alone(v192), reader, std::vector<core::View>{}, a.slice);
  chains.emplace_back("three views (224, 160, 192), one decode", o, reader,
                      std::vector<core::View>{*leader, v160, v192}, a.slice);
  chains.emplace_back("three views, one shared draw", o, reader,
                      std::vector<core::View>{s224, s160, s192}, a.slice);
  Options full = o;
  full.dct_scaling = false;
  chains.emplace_back("three views, dct_scaling=0", full, reader,
                      std::vector<core::View>{*leader, v160, v192}, a.slice);
  chains.emplace_back("three views, one shared draw, dct_scaling=0", full, reader,
                      std::vector<core::View>{s224, s160, s192}, a.slice);
  const core::View vit = ViewOf("view(mean=0.5,std=0.5,draw=leader)", *leader);
  chains.emplace_back("224 twice: two normalisations, one draw", o, reader,
                      std::vector<core::View>{*leader, vit}, a.slice);
  // The decodes of "224 alone", "three views" and "three views, dct_scaling=0", alone.
  std::vector<DecodesOnly> decodes;
  decodes.emplace_back(reader, std::vector<core::View>{*leader}, o.seed, true);
  decodes.emplace_back(reader, std::vector<core::View>{*leader, v160, v192}, o.seed, true);
  decodes.emplace_back(reader, std::vector<core::View>{*leader, v160, v192}, o.seed, false);
  if (a.profile >= 0) {  // one chain alone, `reps` epochs (perf record -g bench_views ...)
    Chain& c = chains.at(size_t(a.profile));
    double cpu = 0;
    for (int rep = 0; rep < a.reps; ++rep)
      for (int64_t f = 0; f < n; f += a.slice) cpu += c.Slice(uint64_t(rep), f, std::min<int64_t>(a.slice, n - f));
    std::printf("%s: %.4f CPU-ms per sample\n", c.name().c_str(), 1e3 * cpu / double(n * a.reps));
    return 0;
  }
  PairedCpu paired;
  for (auto& c : chains)
    paired.Add([&c](uint64_t e, int64_t f, int64_t k) { return c.Slice(e, f, k); });
  for (auto& d : decodes)
    paired.Add([&d](uint64_t e, int64_t f, int64_t k) { return d.Slice(e, f, k); });
  paired.Epoch(0, n, a.slice);  // warm-up: caches, allocations, page faults
  PairedCpu measured;
  for (auto& c : chains)
    measured.Add([&c](uint64_t e, int64_t f, int64_t k) { return c.Slice(e, f, k); });
  for (auto& d : decodes)
    measured.Add([&d](uint64_t e, int64_t f, int64_t k) { return d.Slice(e, f, k); });
  for (int rep = 0; rep < a.reps; ++rep) measured.Epoch(1 + uint64_t(rep), n, a.slice);
  const std::string load_end = LoadAverage();

  // CPU-seconds per sample of chain c, per repetition.
  auto cost = [&](size_t c) {
    std::vector<double> v;
    for (double rate : measured.cpu_rates(c)) v.push_back(1.0 / rate);
    return v;
  };
  const auto c224 = cost(0), c160 = cost(1), c192 = cost(2), three = cost(3), shared = cost(4);
  const auto three_full = cost(5), shared_full = cost(6), two_norms = cost(7);
  const size_t d0 = chains.size();  // the decodes-only turns follow the chains
  const auto dec224 = cost(d0), dec_three = cost(d0 + 1), dec_three_full = cost(d0 + 2);
  const auto decode_ratio = Ratios(dec_three, dec224);
  std::vector<double> separate;
  for (size_t i = 0; i < c224.size(); ++i) separate.push_back(c224[i] + c160[i] + c192[i]);
  const auto three_ratio = Ratios(three, c224), separate_ratio = Ratios(separate, c224);
  const auto shared_ratio = Ratios(shared, c224), saving = Ratios(three, separate);
  auto ms = [](std::vector<double> v) {
    for (double& x : v) x *= 1e3;
    return v;
  };

  Table t(fmt::format("views: {} JPEGs of {}, RandomResizedCrop + flip + normalize float32 CHW, "
                      "1 thread, {} transform kernels, {} reps, turns of {} samples; load average "
                      "{} at the start, {} at the end", n, a.set,
                      pipeline::KernelIsaName(pipeline::BestKernelIsa()), a.reps, a.slice,
                      load_start, load_end));
  for (size_t c = 0; c < chains.size(); ++c)
    t.Add(chains[c].name() + " CPU-ms/sample", Summarize(ms(cost(c))), "ms");
  t.Add("three_views_cpu_ratio (three views / 224 alone)", Summarize(three_ratio), "target <= 1.35");
  t.Add("separate_leaders_cpu_ratio ((224+160+192 alone) / 224)", Summarize(separate_ratio), "");
  t.Add("shared_draw_cpu_ratio (shared draw / 224 alone)", Summarize(shared_ratio), "");
  t.Add("three views / separate leaders", Summarize(saving), "CPU kept");
  t.Add("three views, dct_scaling=0 / 224 alone", Summarize(Ratios(three_full, c224)), "1 decode");
  t.Add("shared draw, dct_scaling=0 / 224 alone", Summarize(Ratios(shared_full, c224)),
        "1 decode + 3 transforms");
  t.Add("224 twice, two normalisations / 224 alone", Summarize(Ratios(two_norms, c224)),
        "1 decode + 1 resize + 2 outputs");
  t.Add("decodes only: 224 alone CPU-ms/sample", Summarize(ms(dec224)), "ms");
  t.Add("decodes only: three views CPU-ms/sample", Summarize(ms(dec_three)), "ms");
  t.Add("decodes only: three views, dct_scaling=0 CPU-ms/sample", Summarize(ms(dec_three_full)),
        "ms");
  t.Add("three_views_decode_ratio (decodes: three views / 224 alone)", Summarize(decode_ratio),
        "floor of three_views_cpu_ratio");
  t.Add("decodes: three views, dct_scaling=0 / 224 alone",
        Summarize(Ratios(dec_three_full, dec224)), "the union alone");
  const Chain& tv = chains[3];
  const Chain& sd = chains[4];
  auto one = [](double x) { return Stats{x, x, x}; };
  t.Add("three views: decodes per sample", one(tv.decodes_per_sample()), "");
  t.Add("shared draw: decodes per sample", one(sd.decodes_per_sample()), "");
  t.Add("three views: decode ms/sample (wall, shared)", one(tv.decode_ms_per_sample()), "ms");
  const char* sizes[] = {"224", "160", "192"};
  for (size_t g = 0; g < 3; ++g)
    t.Add(fmt::format("three views: transform ms/sample, group {}", sizes[g]),
          one(tv.group_ms_per_sample(g)), "ms");
  t.Print();

  JsonLine j;
  j.Add("benchmark", std::string("views"));
  j.Add("images", n);
  j.Add("reps", a.reps);
  j.Add("cpu_pair_slice", a.slice);
  j.Add("three_views_cpu_ratio", Summarize(three_ratio).median);
  j.Add("three_views_cpu_ratio_min", Summarize(three_ratio).min);
  j.Add("three_views_cpu_ratio_max", Summarize(three_ratio).max);
  j.Add("separate_leaders_cpu_ratio", Summarize(separate_ratio).median);
  j.Add("separate_leaders_cpu_ratio_min", Summarize(separate_ratio).min);
  j.Add("separate_leaders_cpu_ratio_max", Summarize(separate_ratio).max);
  j.Add("shared_draw_cpu_ratio", Summarize(shared_ratio).median);
  j.Add("three_views_over_separate", Summarize(saving).median);
  j.Add("three_views_full_scale_cpu_ratio", Summarize(Ratios(three_full, c224)).median);
  j.Add("shared_draw_full_scale_cpu_ratio", Summarize(Ratios(shared_full, c224)).median);
  j.Add("two_normalisations_cpu_ratio", Summarize(Ratios(two_norms, c224)).median);
  j.Add("three_views_decode_ratio", Summarize(decode_ratio).median);
  j.Add("three_views_decode_ratio_min", Summarize(decode_ratio).min);
  j.Add("three_views_decode_ratio_max", Summarize(decode_ratio).max);
  j.Add("three_views_full_scale_decode_ratio", Summarize(Ratios(dec_three_full, dec224)).median);
  j.Add("decode_ms_per_sample_224_alone", Summarize(ms(dec224)).median);
  j.Add("decode_ms_per_sample_three_views", Summarize(ms(dec_three)).median);
  j.Add("kernels", std::string(pipeline::KernelIsaName(pipeline::BestKernelIsa())));
  j.Add("decodes_per_sample", tv.decodes_per_sample());
  j.Add("shared_draw_decodes_per_sample", sd.decodes_per_sample());
  j.Add("cpu_ms_per_sample_224_alone", Summarize(ms(c224)).median);
  j.Add("cpu_ms_per_sample_three_views", Summarize(ms(three)).median);
  j.Add("loadavg_start", load_start);
  j.Add("loadavg_end", load_end);
  j.Print();
  return 0;
}

}  // namespace
}  // namespace batchcast::bench

int main(int argc, char** argv) { return batchcast::bench::Main(argc, argv); }
