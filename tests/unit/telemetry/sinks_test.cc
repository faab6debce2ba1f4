// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Sinks: any subset works; the HDF5 file round-trips through h5py; the trace is valid
// Chrome JSON; `batchcast_report.py` renders PNG/SVG of the expected size and an HTML page.
#include "telemetry/sinks.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/sanitizers.h"
#include "telemetry/collector.h"

namespace batchcast::telemetry {
namespace {

namespace fs = std::filesystem;

class SinksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/bc_telem_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  // Rank 0 a leader that produced 6 batches, rank 1 a consumer that received 5, each with
  // several rows (Snapshot() adds a row without waiting for the interval).
  static std::vector<RankData> TwoRanks() {
    std::vector<RankData> out;
    for (int rank = 0; rank < 2; ++rank) {
      Tags tags{"exp", "wl", "run-a", "", rank, rank, rank == 0 ? Role::kLeader : Role::kConsumer};
      CollectorOptions o;
      o.interval_ms = 60000;
      o.gpu = false;
      auto c = std::move(Collector::Create(tags, o)).value();
      RankData d;
      int batches = rank == 0 ? 6 : 5;
      for (int b = 0; b < batches; ++b) {
        int64_t t = NowNs();
        if (rank == 0) {
          c->SetGauge(Gauge::kWorkerThreads, 2);
          c->AddTime(Timer::kDecode, 3000000);
          c->Add(Counter::kBatchesProduced, 1);
          c->Add(Counter::kSamplesProduced, 64);
          c->Span(SpanKind::kPublish, b, t, t + 1000);
        } else {
          c->AddTime(Timer::kDataWait, 1000000);
          c->AddTime(Timer::kStep, 2000000);
          c->Add(Counter::kBatchesReceived, 1);
          c->Add(Counter::kSamplesReceived, 64);
          c->Span(SpanKind::kStep, b, t + 2000, t + 5000);
          // A train-many model's named series: the report tables and plots them per model.
          EXPECT_TRUE(c->Record("model/mlp/loss", 2.0 / (b + 1)).ok());
          EXPECT_TRUE(c->Record("model/mlp/samples_per_s", 1000 + b).ok());
          if (b % 2 == 1) {
            EXPECT_TRUE(c->Record("model/mlp/epoch_loss", 1.0 / b).ok());
            EXPECT_TRUE(c->Record("model/mlp/epoch_accuracy", 0.125 * b).ok());
          }
        }
        d = c->Snapshot();
      }
      out.push_back(std::move(d));
    }
    return out;
  }

  std::string dir_;
};

// Exit status of a command, or -1 if it could not run.
int RunCommand(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return rc == -1 || !WIFEXITED(rc) ? -1 : WEXITSTATUS(rc);
}

// The report tests render with launcher/report/batchcast_report.py: uninstrumented Python, so
// under a sanitizer they check nothing a sanitizer could (WriteHdf5 runs in the other cases).
constexpr const char* kRendersWithPython = "renders with Python, which a sanitizer does not see";

bool PythonHas(const char* modules) {
  return RunCommand(std::string("/usr/bin/python3 -c 'import ") + modules + "' >/dev/null 2>&1") == 0;
}

TEST_F(SinksTest, AnySubsetOfSinksWritesExactlyThoseFiles) {
  for (int mask = 0; mask < 16; ++mask) {
    CollectorOptions o;
    o.gpu = false;
    auto c = std::move(Collector::Create(Tags{"e", "w", "r"}, o)).value();
    c->Add(Counter::kBatchesReceived, 3);
    c->Span(SpanKind::kStep, 1, 0, 10);
    std::string sub = Path("m" + std::to_string(mask));
    fs::create_directory(sub);
    Sinks s;
    s.print_summary = mask % 2 == 0;
    std::FILE* sink_out = std::fopen((sub + "/summary.txt").c_str(), "w");
    s.summary_to = sink_out;
    if (mask & 1) s.hdf5 = sub + "/run.h5";
    if (mask & 2) s.csv = sub + "/run.csv";
    if (mask & 4) s.json = sub + "/run.json";
    if (mask & 8) s.trace = sub + "/run.trace.json";
    ASSERT_TRUE(c->Finish(s).ok()) << "mask " << mask;
    std::fclose(sink_out);
    EXPECT_EQ(fs::exists(sub + "/run.h5"), (mask & 1) != 0) << mask;
    EXPECT_EQ(fs::exists(sub + "/run.csv"), (mask & 2) != 0) << mask;
    EXPECT_EQ(fs::exists(sub + "/run.json"), (mask & 4) != 0) << mask;
    EXPECT_EQ(fs::exists(sub + "/run.trace.json"), (mask & 8) != 0) << mask;
    EXPECT_EQ(fs::file_size(sub + "/summary.txt") > 0, s.print_summary) << mask;
  }
}

TEST_F(SinksTest, UnwritablePathIsAnErrorNamingThePath) {
  CollectorOptions o;
  o.gpu = false;
  auto c = std::move(Collector::Create(Tags{}, o)).value();
  Sinks s;
  s.print_summary = false;
  s.csv = "/nonexistent-dir/x.csv";
  s.hdf5 = "/nonexistent-dir/x.h5";
  Status st = c->Finish(s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/nonexistent-dir/x."), std::string::npos) << st.ToString();
}

TEST_F(SinksTest, Hdf5RoundTripsThroughH5py) {
  if (!PythonHas("h5py, numpy")) GTEST_SKIP() << "/usr/bin/python3 has no h5py";
  auto ranks = TwoRanks();
  JobSummary j = Summarize(ranks);
  Diagnosis d = Diagnose(j);
  ASSERT_TRUE(WriteHdf5(Path("run.h5"), ranks, j, d, FormatSummary(j, d)).ok());
  ASSERT_TRUE(WriteCsv(Path("run.csv"), ranks).ok());
  ASSERT_TRUE(WriteJson(Path("run.json"), ranks, j, d).ok());
  std::string cmd = "/usr/bin/python3 " BATCHCAST_SOURCE_DIR
                    "/tests/unit/telemetry/check_telemetry_h5.py " +
                    Path("run.h5") +
                    " --ranks 2 --roles leader,consumer --batches 6,5 --experiment exp"
                    " --workload wl --run run-a --csv " +
                    Path("run.csv") + " --json " + Path("run.json");
  EXPECT_EQ(RunCommand(cmd), 0) << cmd;
  // Values, not just structure: the consumer's wait share is 1/(1+2).
  std::string value_cmd =
      "/usr/bin/python3 -c \"import h5py,sys; f=h5py.File('" + Path("run.h5") +
      "'); a=f['rank_00001'].attrs; s=f['rank_00001/series'];"
      " sys.exit(0 if abs(a['data_wait_pct']-100/3)<1e-6 and s['samples_received'][-1]==320"
      " and len(f['rank_00000/spans/seq'])==6 else 1)\"";
  EXPECT_EQ(RunCommand(value_cmd), 0) << value_cmd;
}

TEST_F(SinksTest, TraceIsChromeJsonWithSpansAndFlows) {
  auto ranks = TwoRanks();
  ASSERT_TRUE(WriteTrace(Path("t.json"), ranks).ok());
  std::ifstream in(Path("t.json"));
  nlohmann::json doc = nlohmann::json::parse(in);
  int complete = 0, flow_start = 0, flow_end = 0, meta = 0;
  for (const auto& e : doc.at("traceEvents")) {
    std::string ph = e.at("ph");
    if (ph == "X") {
      ++complete;
      EXPECT_GE(e.at("dur").get<double>(), 0.0);
    }
    flow_start += ph == "s";
    flow_end += ph == "f";
    meta += ph == "M";
  }
  EXPECT_EQ(complete, 11);    // 6 publishes + 5 steps
  EXPECT_EQ(flow_start, 5);   // every step has a published origin
  EXPECT_EQ(flow_end, 5);
  EXPECT_EQ(meta, 4);         // name + sort index per rank
}

// Named series (Collector::Record) written by every sink and read back: HDF5 through h5py
// (named/<name> as (n, 2) rows), the CSV's long-form sibling, the JSON document and the
// trace's counter events; the values and times are the recorded ones in each.
TEST_F(SinksTest, NamedSeriesRoundTripInEveryFormat) {
  std::vector<RankData> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    CollectorOptions o;
    o.interval_ms = 60000;
    o.gpu = false;
    auto c = std::move(Collector::Create(Tags{"e", "w", "r", "", rank, rank}, o)).value();
    for (int step = 0; step < 3 + rank; ++step) {
      ASSERT_TRUE(c->Record(fmt::format("model/m{}/loss", rank), 1.0 / (step + 1)).ok());
      ASSERT_TRUE(c->Record(fmt::format("model/m{}/accuracy", rank), 0.25 * step).ok());
    }
    ranks.push_back(c->Snapshot());
  }
  JobSummary j = Summarize(ranks);
  Diagnosis d = Diagnose(j);
  ASSERT_TRUE(WriteHdf5(Path("run.h5"), ranks, j, d, FormatSummary(j, d)).ok());
  ASSERT_TRUE(WriteCsv(Path("run.csv"), ranks).ok());
  ASSERT_TRUE(WriteJson(Path("run.json"), ranks, j, d).ok());
  ASSERT_TRUE(WriteTrace(Path("run.trace.json"), ranks).ok());
  const NamedSeries& loss1 = *ranks[1].Named("model/m1/loss");
  // CSV: a row per point, with the recorded time.
  ASSERT_EQ(NamedCsvPath(Path("run.csv")), Path("run.series.csv"));
  std::ifstream csv(Path("run.series.csv"));
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line, "rank,local_rank,host,role,series,time_s,value");
  int rows = 0, m1_loss = 0;
  while (std::getline(csv, line)) {
    ++rows;
    if (line.find(",model/m1/loss,") == std::string::npos) continue;
    double t = std::stod(line.substr(line.find(",model/m1/loss,") + 15));
    EXPECT_NEAR(t, loss1.time_s[m1_loss], 1e-6) << line;
    ++m1_loss;
  }
  EXPECT_EQ(rows, 2 * 3 + 2 * 4);
  EXPECT_EQ(m1_loss, 4);
  // No named series anywhere: no side file (csv=/dev/stdout must not need a sibling).
  std::vector<RankData> plain = ranks;
  for (auto& r : plain) r.named.clear();
  ASSERT_TRUE(WriteCsv(Path("plain.csv"), plain).ok());
  EXPECT_TRUE(std::filesystem::exists(Path("plain.csv")));
  EXPECT_FALSE(std::filesystem::exists(Path("plain.series.csv")));
  // JSON: per rank "named" {name: {time_s, value, stride}}.
  std::ifstream js(Path("run.json"));
  nlohmann::json doc = nlohmann::json::parse(js);
  const auto& named = doc.at("ranks").at(1).at("named").at("model/m1/loss");
  EXPECT_EQ(named.at("value").get<std::vector<double>>(), loss1.value);
  EXPECT_EQ(named.at("stride").get<int>(), 1);
  EXPECT_EQ(doc.at("ranks").at(0).at("named").size(), 2u);
  // Trace: a counter event per point, on the rank's process.
  std::ifstream tr(Path("run.trace.json"));
  nlohmann::json trace = nlohmann::json::parse(tr);
  int counters = 0;
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "C" && e.at("name") == "model/m1/accuracy" && e.at("pid") == 1) ++counters;
  EXPECT_EQ(counters, 4);
  // HDF5: rank_00001/named/model/m1/loss is (4, 2) of (time_s, value).
  if (!PythonHas("h5py, numpy")) GTEST_SKIP() << "/usr/bin/python3 has no h5py";
  std::string cmd = fmt::format(
      "/usr/bin/python3 -c \"import h5py,sys; f=h5py.File('{}'); "
      "ds=f['rank_00001/named/model/m1/loss']; v=ds[()]; c=ds.attrs['columns']; "
      "c=c.decode() if isinstance(c, bytes) else c; ok=v.shape==(4,2) and abs(v[3,1]-0.25)<1e-12 "
      "and abs(v[2,0]-{:.9f})<1e-6 and c=='time_s,value' and "
      "len(f['rank_00000/named/model/m0'])==2; sys.exit(0 if ok else 1)\"",
      Path("run.h5"), loss1.time_s[2]);
  EXPECT_EQ(RunCommand(cmd), 0) << cmd;
}

// Width and height from a PNG's IHDR chunk.
bool PngSize(const std::string& path, uint32_t* w, uint32_t* h) {
  std::ifstream in(path, std::ios::binary);
  unsigned char b[24];
  if (!in.read(reinterpret_cast<char*>(b), 24)) return false;
  if (b[0] != 0x89 || b[1] != 'P' || b[12] != 'I' || b[15] != 'R') return false;
  *w = (b[16] << 24) | (b[17] << 16) | (b[18] << 8) | b[19];
  *h = (b[20] << 24) | (b[21] << 16) | (b[22] << 8) | b[23];
  return true;
}

TEST_F(SinksTest, ReportRendersPlotsAndHtml) {
  if (BC_SANITIZED) GTEST_SKIP() << kRendersWithPython;
  if (!PythonHas("h5py, numpy, matplotlib")) GTEST_SKIP() << "/usr/bin/python3 lacks matplotlib";
  auto ranks = TwoRanks();
  JobSummary j = Summarize(ranks);
  Diagnosis d = Diagnose(j);
  ASSERT_TRUE(WriteHdf5(Path("run.h5"), ranks, j, d, FormatSummary(j, d)).ok());
  std::string cmd = "/usr/bin/python3 " BATCHCAST_SOURCE_DIR
                    "/launcher/report/batchcast_report.py " +
                    Path("run.h5") + " --out " + Path("report") + " > /dev/null";
  ASSERT_EQ(RunCommand(cmd), 0) << cmd;
  for (const char* plot : {"throughput", "data_wait", "cpu", "rss", "stages"}) {
    uint32_t w = 0, h = 0;
    ASSERT_TRUE(PngSize(Path("report/") + plot + ".png", &w, &h)) << plot;
    EXPECT_EQ(w, 1000u) << plot;
    EXPECT_EQ(h, 400u) << plot;
    EXPECT_GT(fs::file_size(Path("report/") + plot + ".svg"), 2000u) << plot;
  }
  EXPECT_FALSE(fs::exists(Path("report/gpu.png")));  // no rank had a GPU: no GPU plot
  EXPECT_TRUE(fs::exists(Path("report/models.png")));  // rank 1's model/mlp/... series
  std::ifstream html(Path("report/report.html"));
  std::stringstream ss;
  ss << html.rdbuf();
  std::string page = ss.str();
  EXPECT_GT(page.size(), 20000u);
  EXPECT_NE(page.find("data:image/png;base64,"), std::string::npos);
  EXPECT_NE(page.find("Bottleneck"), std::string::npos);
  EXPECT_NE(page.find("<td>consumer</td>"), std::string::npos);
  // The model table from the named series: 2 epochs, the last epoch's loss and accuracy (1/3,
  // 3/8), mean samples/s over the 5 steps (1002).
  EXPECT_NE(page.find("<td>mlp</td><td>2</td><td>0.3333</td><td>0.3750</td><td>1002.0</td>"),
            std::string::npos);
}

// A consumer under a resize schedule that reported evaluations: the report draws the
// resize gauges and accuracy over time and shows the annotations; two files are compared.
TEST_F(SinksTest, ReportDrawsResizeAndAccuracyAndComparesRuns) {
  if (BC_SANITIZED) GTEST_SKIP() << kRendersWithPython;
  if (!PythonHas("h5py, numpy, matplotlib")) GTEST_SKIP() << "/usr/bin/python3 lacks matplotlib";
  for (const char* run : {"base", "resize"}) {
    const bool resize = std::string(run) == "resize";
    Tags tags{"exp", "wl", run, "", 1, 1, Role::kConsumer};
    CollectorOptions o;
    o.interval_ms = 60000;
    o.gpu = false;
    auto c = std::move(Collector::Create(tags, o)).value();
    RankData d;
    for (int step = 0; step < 4; ++step) {
      c->AddTime(Timer::kStep, 2000000);
      c->Add(Counter::kBatchesReceived, 1);
      c->Add(Counter::kSamplesReceived, 64);
      if (resize) {
        c->SetGauge(Gauge::kImageSize, 16 + 8 * step);
        c->SetGauge(Gauge::kBatchSize, 256 / (step + 1));
        c->SetGauge(Gauge::kLrFactor, 4.0 / (step + 1));
      }
      c->SetGauge(Gauge::kEvalAccuracy, 0.5 + 0.1 * step);
      c->Annotate(fmt::format("eval: train_s={}.50 wall_s={}.75 epoch={} samples={} accuracy=0.{}{}",
                              step, step + 1, step, 64 * (step + 1), 5 + step,
                              resize ? fmt::format(" cpu_s={}.25", step) : ""));
      if (resize) c->Annotate(fmt::format("consumer b=64: epoch {}: 3 batches: @{} 3 x 256 lr x4;",
                                          step, 16 + 8 * step));
      d = c->Snapshot();
    }
    std::vector<RankData> ranks{d};
    JobSummary j = Summarize(ranks);
    Diagnosis diag = Diagnose(j);
    ASSERT_TRUE(WriteHdf5(Path(std::string(run) + ".h5"), ranks, j, diag,
                          FormatSummary(j, diag) + FormatAnnotations(ranks)).ok());
  }
  const std::string script = "/usr/bin/python3 " BATCHCAST_SOURCE_DIR
                             "/launcher/report/batchcast_report.py ";
  std::string cmd = script + Path("resize.h5") + " --out " + Path("one") + " > /dev/null";
  ASSERT_EQ(RunCommand(cmd), 0) << cmd;
  for (const char* plot : {"resize", "accuracy", "accuracy_wall"})
    EXPECT_TRUE(fs::exists(Path("one/") + plot + ".png")) << plot;
  std::ifstream one(Path("one/report.html"));
  std::stringstream ss;
  ss << one.rdbuf();
  EXPECT_NE(ss.str().find("consumer b=64: epoch 3: 3 batches: @40"), std::string::npos);
  cmd = script + Path("base.h5") + " " + Path("resize.h5") + " --labels base,resize --out " +
        Path("both") + " > /dev/null";
  ASSERT_EQ(RunCommand(cmd), 0) << cmd;
  for (const char* plot : {"accuracy", "accuracy_cpu", "compare_image_size", "compare_lr_factor",
                           "compare_throughput"})
    EXPECT_TRUE(fs::exists(Path("both/") + plot + ".png")) << plot;
  std::ifstream both(Path("both/report.html"));
  std::stringstream page;
  page << both.rdbuf();
  EXPECT_NE(page.str().find("2 runs compared"), std::string::npos);
  EXPECT_NE(page.str().find("<td>resize</td>"), std::string::npos);
  EXPECT_NE(page.str().find("<td>80.00</td>"), std::string::npos) << "final accuracy of a run";
  cmd = script + Path("base.h5") + " " + Path("resize.h5") + " --labels one --out " +
        Path("bad") + " 2> /dev/null";
  EXPECT_EQ(RunCommand(cmd), 2) << "one label for two files is refused";
}

}  // namespace
}  // namespace batchcast::telemetry
