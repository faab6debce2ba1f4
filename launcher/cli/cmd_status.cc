// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// `batchcast status`: asks a running leader (normally `batchcast serve`) for its
// membership table over the control socket: attached consumers, their positions, rates
// and waits, and where the stream is (docs/service.md).
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "node/front_door.h"
#include "transport/shm/control.h"
#include "transport/shm/segment.h"

namespace batchcast::cli {
namespace {

const char* StreamName(uint32_t s) {
  switch (static_cast<shm::StreamState>(s)) {
    case shm::StreamState::kRunning: return "running";
    case shm::StreamState::kEnded: return "ended";
    default: return "failed";
  }
}

// A member's state as shown: catch-up (receiving an epoch of its own after joining late) and
// deferred (waiting for the next epoch because late_join_catch_ups were catching up) beside
// the membership states.
std::string DisplayState(const shm::StatusReply& r, const shm::MemberStatus& m) {
  const uint64_t bit = m.id < 64 ? 1ULL << m.id : 0;
  const auto state = static_cast<shm::MemberState>(m.state);
  if (state == shm::MemberState::kActive && (r.stream.catching_up & bit) != 0) return "catch-up";
  if ((r.stream.catch_up_deferred & bit) != 0) return "deferred";  // joining until then
  return shm::MemberDisplayState(state, m.start_seq, r.published);
}

nlohmann::json ToJson(const std::string& socket, const shm::StatusReply& r) {
  nlohmann::json j;
  j["address"] = shm::DisplayAddress(socket);
  j["leader_pid"] = r.leader_pid;
  j["stream"] = StreamName(r.stream_state);
  j["published"] = r.published;
  j["slots"] = r.num_slots;
  j["occupied_slots"] = r.occupied_slots;
  j["heartbeat_ms"] = r.heartbeat_ms;
  j["epoch"] = r.stream.epoch;
  j["batch_in_epoch"] = r.stream.batch_in_epoch;
  j["batches_in_epoch"] = r.stream.batches_in_epoch;
  j["producer_batches"] = r.stream.producer_batches;
  j["replayed_batches"] = r.stream.replayed_batches;
  j["resume_replays"] = r.stream.resume_replays;
  j["resume_replayed_batches"] = r.stream.resume_replayed_batches;
  // Late joiners after the window (option late_join_catch_ups): caught up so far, the limit,
  // and those deferred to the next epoch by it; the consumers are marked below.
  j["catch_ups"] = r.stream.catch_ups;
  j["catch_up_limit"] = r.stream.catch_up_limit;
  j["catch_up_deferrals"] = r.stream.catch_up_deferrals;
  j["idle"] = r.stream.idle != 0;
  // View groups (docs/pipeline.md "Views through the Producer"): each with its members.
  std::map<uint32_t, std::string> views;
  std::map<uint32_t, int> members;
  for (uint32_t i = 0; i < r.count && i < shm::kMaxConsumers; ++i) members[r.members[i].group] += 1;
  j["views_max"] = r.stream.views_max;
  j["view_room_bytes"] = r.stream.view_room_bytes;
  j["view_room_used_bytes"] = r.stream.view_room_used_bytes;
  j["view_groups"] = nlohmann::json::array();
  for (uint32_t i = 0; i < r.stream.view_groups && i < shm::kMaxStatusGroups; ++i) {
    const shm::GroupStatus& g = r.stream.groups[i];
    views[g.group] = std::string(g.view, strnlen(g.view, sizeof(g.view)));
    nlohmann::json e;
    e["group"] = g.group;
    e["view"] = views[g.group];
    e["view_key"] = fmt::format("{:016x}", g.view_key);
    e["members"] = members[g.group];
    e["slot_bytes"] = g.slot_bytes;
    e["image_size"] = g.image_size;  // now (a view's schedule changes it by epoch); 0: leader's
    j["view_groups"].push_back(e);
  }
  j["consumers"] = nlohmann::json::array();
  for (uint32_t i = 0; i < r.count && i < shm::kMaxConsumers; ++i) {
    const shm::MemberStatus& m = r.members[i];
    const double secs = m.attached_ns > 0 ? double(m.attached_ns) / 1e9 : 0.0;
    nlohmann::json c;
    c["id"] = m.id;
    c["name"] = std::string(m.name, strnlen(m.name, sizeof(m.name)));
    c["pid"] = m.pid;
    c["rank"] = m.rank;
    c["state"] = DisplayState(r, m);
    c["batch_size"] = m.batch_size;
    c["buffer_depth"] = m.buffer_depth;
    c["start_position"] = m.start_seq == shm::kNoSeq ? nlohmann::json() : nlohmann::json(m.start_seq);
    c["position"] = m.position == shm::kNoSeq ? nlohmann::json() : nlohmann::json(m.position);
    c["batches"] = m.batches;
    c["batches_per_s"] = secs > 0 ? double(m.batches) / secs : 0.0;
    c["wait_s"] = double(m.wait_ns) / 1e9;
    c["wait_fraction"] = secs > 0 ? double(m.wait_ns) / 1e9 / secs : 0.0;
    c["attached_s"] = secs;
    c["silent_ms"] = m.silent_ns / 1000000;
    c["group"] = m.group;
    c["view"] = views.count(m.group) != 0 ? nlohmann::json(views[m.group]) : nlohmann::json();
    j["consumers"].push_back(c);
  }
  return j;
}

void PrintTable(const nlohmann::json& j) {
  std::printf("service %s (pid %d): stream %s, epoch %llu batch %llu/%llu, %llu producer batches "
              "(%llu replayed to late joiners, %llu to %u resuming), %u/%u slots held%s\n",
              j["address"].get<std::string>().c_str(), j["leader_pid"].get<int>(),
              j["stream"].get<std::string>().c_str(), j["epoch"].get<unsigned long long>(),
              j["batch_in_epoch"].get<unsigned long long>(),
              j["batches_in_epoch"].get<unsigned long long>(),
              j["producer_batches"].get<unsigned long long>(),
              j["replayed_batches"].get<unsigned long long>(),
              j["resume_replayed_batches"].get<unsigned long long>(),
              j["resume_replays"].get<unsigned>(), j["occupied_slots"].get<unsigned>(),
              j["slots"].get<unsigned>(), j["idle"].get<bool>() ? ", idle (nobody attached)" : "");
  int catching = 0, deferred = 0;
  for (const auto& c : j["consumers"]) {
    catching += c["state"] == "catch-up" ? 1 : 0;
    deferred += c["state"] == "deferred" ? 1 : 0;
  }
  std::printf("late joiners after the window: %u caught up with an epoch of their own (%d now, "
              "at most %u at once: late_join_catch_ups), %llu deferred to the next epoch (%d "
              "now)\n", j["catch_ups"].get<unsigned>(), catching, j["catch_up_limit"].get<unsigned>(),
              j["catch_up_deferrals"].get<unsigned long long>(), deferred);
  if (j["views_max"].get<unsigned>() > 1) {
    std::printf("view groups: %zu of views_max=%u, view room %llu of %llu bytes per slot held\n",
                j["view_groups"].size(), j["views_max"].get<unsigned>(),
                j["view_room_used_bytes"].get<unsigned long long>(),
                j["view_room_bytes"].get<unsigned long long>());
    for (const auto& g : j["view_groups"]) {
      const unsigned size = g["image_size"].get<unsigned>();
      std::printf("  group %u: %d consumer%s, %llu bytes per slot, %s%s\n",
                  g["group"].get<unsigned>(), g["members"].get<int>(),
                  g["members"].get<int>() == 1 ? "" : "s",
                  g["slot_bytes"].get<unsigned long long>(), g["view"].get<std::string>().c_str(),
                  size > 0 ? fmt::format(", {} px now", size).c_str() : "");
    }
  }
  std::printf("%-4s %-20s %-8s %-8s %5s %6s %10s %9s %8s %7s %9s\n", "id", "name", "pid", "state",
              "group", "batch", "position", "batches", "batch/s", "wait%", "attached");
  for (const auto& c : j["consumers"]) {
    std::string pos = c["position"].is_null() ? "-" : std::to_string(c["position"].get<uint64_t>());
    std::printf("%-4u %-20s %-8d %-8s %5u %6u %10s %9llu %8.1f %6.1f%% %8.1fs\n", c["id"].get<unsigned>(),
                c["name"].get<std::string>().c_str(), c["pid"].get<int>(),
                c["state"].get<std::string>().c_str(), c["group"].get<unsigned>(),
                c["batch_size"].get<unsigned>(), pos.c_str(),
                c["batches"].get<unsigned long long>(), c["batches_per_s"].get<double>(),
                100.0 * c["wait_fraction"].get<double>(), c["attached_s"].get<double>());
  }
  if (j["consumers"].empty()) std::printf("(no consumers attached)\n");
}

}  // namespace

void RegisterStatus(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("status", "show a running service's consumers, positions, "
                                 "rates and waits (docs/service.md)");
  auto socket = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto timeout = std::make_shared<int64_t>(5000);
  cmd->add_option("--socket", *socket, "control socket name (default batchcast-<uid>-service)");
  cmd->add_flag("--json", *json, "print one JSON object");
  cmd->add_option("--timeout-ms", *timeout, "how long to wait for the answer [5000]");
  cmd->callback([=] {
    const std::string name = socket->empty() ? node::DefaultServiceSocket() : *socket;
    auto reply = shm::QueryStatus(name, *timeout);
    if (!reply.ok()) {
      std::fprintf(stderr, "batchcast status: %s\n", reply.status().ToString().c_str());
      *exit_code = 1;
      return;
    }
    nlohmann::json j = ToJson(name, *reply);
    if (*json) std::printf("%s\n", j.dump().c_str());
    else PrintTable(j);
  });
}

}  // namespace batchcast::cli
