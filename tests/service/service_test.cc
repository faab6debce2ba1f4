// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// The per-node service (docs/service.md): late join, stop/kill/restart, hostile control
// messages, other-uid refusal and `batchcast status`. The service runs as a separate
// process (service_server); consumers here are in-process unless a test needs a process.
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "batchcast/consumer.h"
#include "tests/service/service_test_util.h"
#include "tests/unit/node/synthetic_source.h"
#include "transport/shm/control.h"
#include "transport/shm/segment.h"

namespace batchcast {
namespace {

using service_test::Child;
using service_test::EpochLine;
using service_test::WaitStatus;

Options ConsumerOptions(int b, int epochs) {
  Options o;
  o.batch_size = b;
  o.epochs = epochs;
  o.buffer_depth = 2;
  o.heartbeat_ms = 1000;
  return o;
}

// Reads a consumer's batches into one EpochLine per completed epoch; Read() can stop after
// a number of batches (releasing them all) and go on later.
struct EpochReader {
  EpochReader(int64_t n, std::vector<EpochLine>* out)
      : n(n), seen(static_cast<size_t>(n), 0), out(out) {}
  // Until the end of the consumer's epochs, or after max_batches batches (>= 0).
  Status Read(Consumer& c, int64_t max_batches = -1);
  int64_t n;
  std::vector<int> seen;
  EpochLine cur;
  std::vector<EpochLine>* out;
};

Status ReadEpochs(Consumer& c, int64_t n, std::vector<EpochLine>* out) {
  return EpochReader(n, out).Read(c);
}

Status EpochReader::Read(Consumer& c, int64_t max_batches) {
  Batch b;
  for (int64_t read = 0; max_batches < 0 || read < max_batches; ++read) {
    Status st = c.Next(&b);
    if (st.code() == StatusCode::kEndOfStream) return Status::Ok();
    if (!st.ok()) return st;
    const BatchInfo& info = b.info();
    if (static_cast<long long>(info.epoch) != cur.epoch) {
      cur = EpochLine();
      cur.epoch = static_cast<long long>(info.epoch);
      cur.first_batch = static_cast<long long>(info.producer_batch);
      std::fill(seen.begin(), seen.end(), 0);
    }
    const auto* img = static_cast<const uint8_t*>(b.images().data);
    const size_t sb = b.images().nbytes / b.images().shape[0];
    for (int64_t i = 0; i < b.images().shape[0]; ++i) {
      const int64_t id = b.sample_ids()[i];
      if (id < 0 || id >= n) { ++cur.bad; continue; }
      for (size_t k = 0; k < sb; ++k)
        if (img[i * sb + k] != node::SyntheticPixel(id, k)) { ++cur.bad; break; }
      if (i < b.images().shape[0] - info.repeats) seen[static_cast<size_t>(id)] += 1;
    }
    if (info.last_in_epoch) {
      for (int v : seen) {
        if (v == 0) ++cur.missing;
        else ++cur.samples;
        if (v > 1) cur.dups += v - 1;
      }
      out->push_back(cur);
    }
  }
  return Status::Ok();
}

void ExpectFullEpoch(const EpochLine& e, int64_t n) {
  EXPECT_EQ(e.first_batch, 0) << "epoch " << e.epoch;
  EXPECT_EQ(e.samples, n) << "epoch " << e.epoch;
  EXPECT_EQ(e.dups, 0) << "epoch " << e.epoch;
  EXPECT_EQ(e.missing, 0) << "epoch " << e.epoch;
  EXPECT_EQ(e.bad, 0) << "epoch " << e.epoch;
}

void StopServer(Child& server) {
  kill(server.pid, SIGTERM);
  service_test::Wait(server);
}

// A service of 320 samples in producer batches of 32 (10 per epoch) with a 4-slot ring (the
// late-join window of 0.1 is the ring's depth, 4) whose first trial A (batch 16) read
// producer batches 0..2 and holds: the service waits at batch 7 of epoch 0 with the ring
// full, so a trial attaching now joins after the window, at a known position. Read(): A reads
// the rest of its epochs on a thread (Join() waits for it).
struct HeldAtBatchSeven {
  HeldAtBatchSeven(const std::string& sock, int epochs, int a_epochs, int catch_ups = -1,
                   bool mid_epoch = false, const std::string& telemetry = "")
      : server(service_test::StartServer(sock, 320, 32, 16, 1000, 0.1, epochs, 4, 5000,
                                         mid_epoch, catch_ups, telemetry)) {
    auto c = Consumer::Attach(sock, ConsumerOptions(16, a_epochs), -1, "a");
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (!c.ok()) return;
    a = std::move(c).value();
    EXPECT_TRUE(ra.Read(*a, 6).ok());  // producer batches 0..2, released
    EXPECT_TRUE(WaitStatus(sock, [](const shm::StatusReply& r) { return r.published >= 7; }));
  }
  void Read() { reader = std::thread([this] { a_status = ra.Read(*a); }); }
  Status Join() {
    if (reader.joinable()) reader.join();
    return a_status;
  }
  // A reads the rest of its epochs beside `other`, which reads its own into *out: other's
  // status (A's: a_status).
  Status ReadBeside(Consumer& other, std::vector<EpochLine>* out) {
    Read();
    Status st = ReadEpochs(other, 320, out);
    Join().IgnoreError();  // kept in a_status
    return st;
  }
  Child server;
  std::unique_ptr<Consumer> a;
  std::vector<EpochLine> ea;
  EpochReader ra{320, &ea};
  std::thread reader;
  Status a_status;
};

// A joins; the service fills the ring (4 slots) and blocks; B joins at batch 4 of 10,
// inside a 0.6 window: B gets the start of the epoch replayed and both see all of it.
TEST(ServiceTest, LateJoinerWithinWindowGetsFullEpoch) {
  const std::string sock = service_test::UniqueSocket("late");
  Child server = service_test::StartServer(sock, 320, 32, 16, 1000, 0.6, 2, 4);
  ASSERT_GT(server.pid, 0);
  auto a = Consumer::Attach(sock, ConsumerOptions(16, 1), -1, "a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(WaitStatus(sock, [](const shm::StatusReply& r) { return r.published >= 4; }));
  auto b = Consumer::Attach(sock, ConsumerOptions(8, 1), -1, "b");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  std::vector<EpochLine> ea, eb;
  Status sa;
  std::thread ta([&] { sa = ReadEpochs(**a, 320, &ea); });
  Status sb = ReadEpochs(**b, 320, &eb);
  ta.join();
  ASSERT_TRUE(sa.ok()) << sa.ToString();
  ASSERT_TRUE(sb.ok()) << sb.ToString();
  ASSERT_EQ(ea.size(), 1u);
  ASSERT_EQ(eb.size(), 1u);
  ExpectFullEpoch(ea[0], 320);
  ExpectFullEpoch(eb[0], 320);
  EXPECT_EQ(ea[0].epoch, 0);
  EXPECT_EQ(eb[0].epoch, 0);  // caught up, not deferred to epoch 1
  auto st = shm::QueryStatus(sock, 2000);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_GT(st->stream.replayed_batches, 0u);
  StopServer(server);
}

// A 0.1 window of a 10-batch epoch is still the ring's 4 slots (never less: a trainer
// arriving while the first filled the ring is caught up). A reads 3 producer batches, so
// the service blocks at batch 7 with the ring full; B arriving then, outside the window,
// with no catch-up (late_join_catch_ups=0) waits for the next epoch and gets all of it.
TEST(ServiceTest, LateJoinerOutsideWindowStartsNextEpoch) {
  const std::string sock = service_test::UniqueSocket("next");
  HeldAtBatchSeven held(sock, 3, 2, /*catch_ups=*/0);
  auto b = Consumer::Attach(sock, ConsumerOptions(16, 1), -1, "b");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  std::vector<EpochLine> eb;
  Status sb = held.ReadBeside(**b, &eb);
  ASSERT_TRUE(held.a_status.ok()) << held.a_status.ToString();
  ASSERT_TRUE(sb.ok()) << sb.ToString();
  ASSERT_EQ(eb.size(), 1u);
  EXPECT_EQ(eb[0].epoch, 1);
  ExpectFullEpoch(eb[0], 320);
  for (const auto& e : held.ea) ExpectFullEpoch(e, 320);
  auto st = shm::QueryStatus(sock, 2000);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->stream.replayed_batches, 0u);
  StopServer(held.server);
}

// With join_mid_epoch a joiner after the window starts at once: its first (partial) epoch
// begins at the batch it joined at and holds exactly the rest of that epoch; the next one
// is full. (As above, A first reads 3 producer batches so that B arrives at batch 7.)
TEST(ServiceTest, JoinMidEpochStartsAtOnceWithTheRestOfTheEpoch) {
  const std::string sock = service_test::UniqueSocket("mid");
  HeldAtBatchSeven held(sock, 3, 3, -1, /*mid_epoch=*/true);
  auto b = Consumer::Attach(sock, ConsumerOptions(16, 2), -1, "b");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  std::vector<EpochLine> eb;
  Status sb = held.ReadBeside(**b, &eb);
  ASSERT_TRUE(held.a_status.ok()) << held.a_status.ToString();
  ASSERT_TRUE(sb.ok()) << sb.ToString();
  ASSERT_EQ(eb.size(), 2u);
  EXPECT_EQ(eb[0].epoch, 0);
  EXPECT_GE(eb[0].first_batch, 7);  // it joined with positions 0..6 already out
  EXPECT_EQ(eb[0].samples, 320 - 32 * eb[0].first_batch);
  EXPECT_EQ(eb[0].dups, 0);
  EXPECT_EQ(eb[0].bad, 0);
  EXPECT_EQ(eb[1].epoch, 1);
  ExpectFullEpoch(eb[1], 320);
  for (const auto& e : held.ea) ExpectFullEpoch(e, 320);
  StopServer(held.server);
}

// SIGTERM: attached consumers fail with "service stopped"; SIGKILL: with "is gone". Both
// end (no hang); then a new service binds the same socket name (abstract socket, memfd:
// nothing to sweep) and serves a full epoch.
TEST(ServiceTest, StoppedOrKilledServiceErrorsAndRestartWorks) {
  const auto shm_before = service_test::DevShmEntries();
  const std::string sock = service_test::UniqueSocket("restart");
  for (int sig : {SIGTERM, SIGKILL}) {
    Child server = service_test::StartServer(sock, 640, 32, 16, 1000, 0.02, 0, 4);
    ASSERT_GT(server.pid, 0);
    auto c = Consumer::Attach(sock, ConsumerOptions(16, 100), -1, "victim");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    Batch b;
    ASSERT_TRUE((*c)->Next(&b).ok());
    kill(server.pid, sig);
    int status = service_test::Wait(server);
    if (sig == SIGTERM) {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    Status st;
    int after = 0;
    for (; after < 1000; ++after) {
      st = (*c)->Next(&b);
      if (!st.ok()) break;
    }
    ASSERT_FALSE(st.ok()) << "consumer kept reading after the service went away";
    EXPECT_LE(after, 4 * 2) << "more batches than the ring held";  // slots x carves per slot
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
    if (sig == SIGTERM) {
      EXPECT_NE(st.message().find("service stopped: SIGTERM"), std::string::npos) << st.message();
    } else {
      EXPECT_NE(st.message().find("gone"), std::string::npos) << st.message();
    }
  }
  Child server = service_test::StartServer(sock, 320, 32, 16, 1000, 0.02, 0, 4);
  auto c = Consumer::Attach(sock, ConsumerOptions(16, 1), -1, "after-restart");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::vector<EpochLine> e;
  ASSERT_TRUE(ReadEpochs(**c, 320, &e).ok());
  ASSERT_EQ(e.size(), 1u);
  ExpectFullEpoch(e[0], 320);
  StopServer(server);
  EXPECT_EQ(service_test::DevShmEntries(), shm_before);
}

int Connect(const std::string& sock) {
  auto fd = shm::ConnectAbstract(sock);
  return fd.ok() ? *fd : -1;
}

// Reads until EOF or a reply; returns the reply code, or -1 on EOF/timeout.
int ReplyCode(int fd, std::string* message = nullptr) {
  shm::JoinReply r{};
  Status st = shm::RecvMessage(fd, &r, sizeof(r), nullptr, 10000);
  close(fd);
  if (!st.ok()) return -1;
  if (message) *message = std::string(r.message, strnlen(r.message, sizeof(r.message)));
  return r.code;
}

shm::JoinRequest ValidJoin() {
  shm::JoinRequest j{};
  j.magic = shm::kControlMagic;
  j.version = shm::kProtocolVersion;
  j.type = static_cast<uint32_t>(shm::MessageType::kJoin);
  j.pid = getpid();
  j.rank = -1;
  j.batch_size = 8;
  j.buffer_depth = 1;
  return j;
}

// Hostile control traffic is refused or closed while a real consumer reads 3 full epochs.
TEST(ServiceTest, HostileControlMessagesAreRejectedWithoutDisturbingOthers) {
  const std::string sock = service_test::UniqueSocket("hostile");
  Child server = service_test::StartServer(sock, 320, 32, 16, 1000, 0.02, 0, 4, 300);
  auto good = Consumer::Attach(sock, ConsumerOptions(16, 3), -1, "good");
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  std::vector<EpochLine> epochs;
  Status sg;
  std::thread reader([&] { sg = ReadEpochs(**good, 320, &epochs); });

  auto send_join = [&](shm::JoinRequest j, std::string* msg = nullptr) {
    int fd = Connect(sock);
    EXPECT_GE(fd, 0);
    EXPECT_TRUE(shm::SendMessage(fd, &j, sizeof(j)).ok());
    return ReplyCode(fd, msg);
  };
  const int kInvalid = static_cast<int>(StatusCode::kInvalidArgument);
  shm::JoinRequest j = ValidJoin();
  j.magic = 0xdeadbeef;
  EXPECT_EQ(send_join(j), kInvalid);
  std::string msg;
  // Another protocol version is refused by version, whatever its size: protocol 2's join
  // was 72 bytes (no resume point).
  const int kOtherVersion = static_cast<int>(StatusCode::kFailedPrecondition);
  j = ValidJoin(), j.version = 99;
  EXPECT_EQ(send_join(j, &msg), kOtherVersion);
  const std::string ours = std::to_string(shm::kProtocolVersion);
  EXPECT_NE(msg.find("consumer speaks control protocol 99, this leader protocol " + ours),
            std::string::npos) << msg;
  {
    j = ValidJoin(), j.version = 2;
    const int fd = Connect(sock);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(shm::SendMessage(fd, &j, 72).ok());
    EXPECT_EQ(ReplyCode(fd, &msg), kOtherVersion);
    EXPECT_NE(msg.find("consumer speaks control protocol 2, this leader protocol " + ours),
              std::string::npos) << msg;
  }
  j = ValidJoin(), j.resumes = 2;
  EXPECT_EQ(send_join(j, &msg), kInvalid);
  EXPECT_NE(msg.find("'resumes' is 2"), std::string::npos) << msg;
  j = ValidJoin(), j.type = 77;
  EXPECT_EQ(send_join(j), kInvalid);
  j = ValidJoin(), j.batch_size = 0;
  EXPECT_EQ(send_join(j, &msg), kInvalid);
  EXPECT_NE(msg.find("batch size 0"), std::string::npos) << msg;
  j = ValidJoin(), j.batch_size = 1u << 30;
  EXPECT_EQ(send_join(j), kInvalid);
  j = ValidJoin(), j.buffer_depth = 0;
  EXPECT_EQ(send_join(j), kInvalid);
  j = ValidJoin(), j.buffer_depth = 1000;
  EXPECT_EQ(send_join(j), kInvalid);
  j = ValidJoin(), j.flags = 0x80;
  EXPECT_EQ(send_join(j), kInvalid);
  {  // garbage bytes
    int fd = Connect(sock);
    std::vector<uint8_t> junk(300);
    for (size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<uint8_t>(i * 37 + 11);
    ASSERT_EQ(send(fd, junk.data(), junk.size(), MSG_NOSIGNAL), 300);
    EXPECT_NE(ReplyCode(fd), 0);
  }
  {  // a short message that never completes: closed at once, the control thread not held
    int fd = Connect(sock);
    ASSERT_EQ(send(fd, "BCC1", 4, MSG_NOSIGNAL), 4);
    EXPECT_EQ(ReplyCode(fd), -1);
  }
  {  // a connection that never sends a join: closed after the handshake timeout
    int fd = Connect(sock);
    EXPECT_EQ(ReplyCode(fd), -1);  // EOF (within the 10 s read limit), not a hang
  }
  {  // an unterminated name is bounded: accepted, stored as at most 31 characters
    j = ValidJoin();
    std::memset(j.name, 'N', sizeof(j.name));
    int fd = Connect(sock);
    ASSERT_TRUE(shm::SendMessage(fd, &j, sizeof(j)).ok());
    shm::JoinReply r{};
    int memfd = -1;
    ASSERT_TRUE(shm::RecvMessage(fd, &r, sizeof(r), &memfd, 10000).ok());
    EXPECT_EQ(r.code, 0);
    if (memfd >= 0) close(memfd);
    auto st = shm::QueryStatus(sock, 2000);
    ASSERT_TRUE(st.ok());
    bool found = false;
    for (uint32_t i = 0; i < st->count; ++i)
      if (st->members[i].name[0] == 'N') {
        found = true;
        EXPECT_EQ(strnlen(st->members[i].name, 32), 31u);
      }
    EXPECT_TRUE(found);
    // A member that sends anything but a leave is detached.
    ASSERT_EQ(send(fd, "garbage-garbage!", 16, MSG_NOSIGNAL), 16);
    EXPECT_TRUE(WaitStatus(sock, [](const shm::StatusReply& s) {
      for (uint32_t i = 0; i < s.count; ++i)
        if (s.members[i].name[0] == 'N') return false;
      return true;
    }));
    close(fd);
  }
  reader.join();
  ASSERT_TRUE(sg.ok()) << sg.ToString();
  ASSERT_EQ(epochs.size(), 3u);
  for (const auto& e : epochs) ExpectFullEpoch(e, 320);
  StopServer(server);
}

// A consumer of another uid (a child that setuid()s to nobody) is refused, and so is its
// status query; the owner's consumers are unaffected.
// A consumer of this protocol against a leader of the previous one (protocol 2 refused our
// longer join with its own version in the reply): the error names both versions.
TEST(ServiceTest, ConsumerNamesBothVersionsForALeaderOfAnotherProtocol) {
  const std::string sock = service_test::UniqueSocket("oldleader");
  auto listen_fd = shm::ListenAbstract(sock);
  ASSERT_TRUE(listen_fd.ok()) << listen_fd.status().ToString();
  std::thread old_leader([fd = *listen_fd] {
    auto conn = shm::AcceptConnection(fd);
    if (!conn.ok()) return;
    char buf[72];  // protocol 2's join size
    EXPECT_TRUE(shm::RecvMessage(*conn, buf, sizeof(buf), nullptr, 10000).ok());
    shm::JoinReply r{};
    r.magic = shm::kControlMagic;
    r.version = 2;
    r.type = static_cast<uint32_t>(shm::MessageType::kJoinReply);
    r.code = static_cast<int32_t>(StatusCode::kInvalidArgument);
    std::snprintf(r.message, sizeof(r.message), "not a Batchcast join request of protocol 2");
    EXPECT_TRUE(shm::SendMessage(*conn, &r, sizeof(r)).ok());
    close(*conn);
  });
  Options o = ConsumerOptions(8, 1);
  o.connect_timeout = 0;
  auto c = Consumer::Attach(sock, o, -1, "new");
  old_leader.join();
  close(*listen_fd);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("leader speaks control protocol 2, this consumer "
                                      "protocol " + std::to_string(shm::kProtocolVersion)),
            std::string::npos) << c.status().ToString();
}

TEST(ServiceTest, OtherUidIsRefused) {
  if (getuid() != 0) GTEST_SKIP() << "needs root to setuid() a child to another user";
  const passwd* nobody = getpwnam("nobody");
  const uid_t uid = nobody ? nobody->pw_uid : 65534;
  const gid_t gid = nobody ? nobody->pw_gid : 65534;
  const std::string sock = service_test::UniqueSocket("uid");
  Child server = service_test::StartServer(sock, 320, 32, 16, 1000, 0.02, 0, 4);
  pid_t pid = fork();
  if (pid == 0) {
    if (setgid(gid) != 0 || setuid(uid) != 0) _exit(10);
    // The intruder trusts root's leader explicitly, so that the leader's own check is
    // what refuses it (without that, the consumer refuses a leader of another uid first).
    Options o = ConsumerOptions(16, 1);
    o.allowed_leader_uid = 0;
    auto c = Consumer::Attach(sock, o, -1, "intruder");
    if (c.ok()) _exit(11);
    if (c.status().code() != StatusCode::kPermissionDenied) _exit(12);
    if (c.status().message().find("may not attach") == std::string::npos) _exit(13);
    auto s = shm::QueryStatus(sock, 2000);
    if (s.ok() || s.status().code() != StatusCode::kPermissionDenied) _exit(14);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10 setuid, 11 attached, 12 wrong code, 13 message, 14 status";
  auto c = Consumer::Attach(sock, ConsumerOptions(16, 1), -1, "owner");
  ASSERT_TRUE(c.ok());
  std::vector<EpochLine> e;
  ASSERT_TRUE(ReadEpochs(**c, 320, &e).ok());
  ASSERT_EQ(e.size(), 1u);
  ExpectFullEpoch(e[0], 320);
  StopServer(server);
}

std::string RunCli(const std::string& args) {
  std::string out;
  FILE* p = popen((std::string(BATCHCAST_CLI) + " " + args + " 2>&1").c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  pclose(p);
  return out;
}

// `batchcast status` lists attached consumers with positions, rates and waits; the idle
// service reports that it is paused and decodes nothing.
TEST(ServiceTest, StatusShowsConsumersAndIdle) {
  const std::string sock = service_test::UniqueSocket("status");
  Child server = service_test::StartServer(sock, 320, 32, 16, 1000, 0.02, 0, 4);
  ASSERT_TRUE(WaitStatus(sock, [](const shm::StatusReply& r) { return r.stream.idle != 0; }));
  auto idle = nlohmann::json::parse(RunCli("status --json --socket " + sock));
  EXPECT_TRUE(idle["idle"].get<bool>());
  EXPECT_EQ(idle["producer_batches"].get<int>(), 0);
  EXPECT_TRUE(idle["consumers"].empty());
  // Two trials train (a 2 ms "step" per batch) in threads while the status is taken.
  std::atomic<bool> done{false};
  auto train = [&](const char* name, int b) {
    auto c = Consumer::Attach(sock, ConsumerOptions(b, 1000), -1, name);
    if (!c.ok()) return c.status();
    Batch batch;
    while (!done.load()) {
      Status st = (*c)->Next(&batch);
      if (!st.ok()) return st;
      usleep(2000);
    }
    return Status::Ok();
  };
  Status sa, sb;
  std::thread ta([&] { sa = train("trial-a", 16); });
  std::thread tb([&] { sb = train("trial-b", 8); });
  ASSERT_TRUE(WaitStatus(sock, [](const shm::StatusReply& r) {
    return r.count == 2 && r.members[0].batches > 0 && r.members[1].batches > 0;
  }));
  auto j = nlohmann::json::parse(RunCli("status --json --socket " + sock));
  ASSERT_EQ(j["consumers"].size(), 2u);
  std::set<std::string> names;
  for (const auto& c : j["consumers"]) {
    names.insert(c["name"].get<std::string>());
    // The second may have joined after the late-join window: then it catches up.
    EXPECT_TRUE(c["state"] == "active" || c["state"] == "catch-up") << j.dump();
    EXPECT_FALSE(c["position"].is_null());
    EXPECT_GE(c["batches"].get<int>(), 1);
    EXPECT_TRUE(c.contains("batches_per_s"));
    EXPECT_TRUE(c.contains("wait_s"));
  }
  EXPECT_EQ(names, (std::set<std::string>{"trial-a", "trial-b"}));
  EXPECT_FALSE(j["idle"].get<bool>());
  std::string table = RunCli("status --socket " + sock);
  EXPECT_NE(table.find("trial-a"), std::string::npos) << table;
  EXPECT_NE(table.find("batch/s"), std::string::npos) << table;
  std::string none = RunCli("status --socket " + sock + "-absent");
  EXPECT_NE(none.find("no Batchcast leader listens"), std::string::npos) << none;
  done.store(true);
  ta.join();
  tb.join();
  EXPECT_TRUE(sa.ok()) << sa.ToString();
  EXPECT_TRUE(sb.ok()) << sb.ToString();
  EXPECT_TRUE(WaitStatus(sock, [](const shm::StatusReply& r) { return r.stream.idle != 0; }));
  StopServer(server);
}

// A trial that joined after the late-join window, with no catch-up (late_join_catch_ups=0),
// is admitted at once but receives nothing until the next epoch starts: `batchcast status`
// shows it as "waiting" (it showed "active", issue 34), and as "active" once its first
// position is out. The test consumes trial a's batches itself, so where the stream stands is
// known: 20 producer batches per epoch, a window of 4 (the ring depth), a 4-slot ring ahead
// of a.
TEST(ServiceTest, StatusShowsATrialWaitingForTheNextEpochAsWaiting) {
  const std::string sock = service_test::UniqueSocket("waiting");
  Child server = service_test::StartServer(sock, 640, 32, 32, 1000, 0.02, 0, 4, 5000, false, 0);
  auto a = Consumer::Attach(sock, ConsumerOptions(32, 1000), -1, "trial-a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  Batch b;
  for (int i = 0; i < 8; ++i) ASSERT_TRUE((*a)->Next(&b).ok());
  ASSERT_EQ(b.info().epoch, 0u);
  ASSERT_EQ(b.info().index, 7u);
  auto late = Consumer::Attach(sock, ConsumerOptions(32, 1000), -1, "late");
  ASSERT_TRUE(late.ok()) << late.status().ToString();
  // The leader settles the late trial's membership when it publishes its next producer
  // batch, which needs a free slot: a reads (and frees) until it is settled. One read was
  // not always enough (under TSan the join arrived after the publish that read freed, the
  // ring stayed full and the wait never ended).
  auto late_settled = [&sock] {
    auto r = shm::QueryStatus(sock, 2000);
    if (!r.ok()) return false;
    for (uint32_t i = 0; i < r->count; ++i)
      if (std::string(r->members[i].name) == "late") return r->members[i].start_seq != shm::kNoSeq;
    return false;
  };
  do {
    ASSERT_TRUE((*a)->Next(&b).ok());
    ASSERT_EQ(b.info().epoch, 0u) << "epoch 0 ended before the late trial's membership settled";
  } while (!late_settled());
  auto j = nlohmann::json::parse(RunCli("status --json --socket " + sock));
  ASSERT_EQ(j["consumers"].size(), 2u) << j.dump();
  for (const auto& c : j["consumers"]) {
    if (c["name"] == "late") {
      EXPECT_EQ(c["state"], "waiting") << j.dump();
      EXPECT_EQ(c["start_position"].get<uint64_t>(), 20u) << j.dump();  // epoch 1's start
    } else {
      EXPECT_EQ(c["state"], "active") << j.dump();
    }
  }
  std::string table = RunCli("status --socket " + sock);
  EXPECT_NE(table.find("waiting"), std::string::npos) << table;
  // a reaches the next epoch; the late trial's first batch is epoch 1's first.
  while (b.info().epoch == 0) ASSERT_TRUE((*a)->Next(&b).ok());
  Batch first;
  ASSERT_TRUE((*late)->Next(&first).ok());
  EXPECT_EQ(first.info().epoch, 1u);
  EXPECT_EQ(first.info().index, 0u);
  auto after = nlohmann::json::parse(RunCli("status --json --socket " + sock));
  for (const auto& c : after["consumers"]) EXPECT_EQ(c["state"], "active") << after.dump();
  first.Release();
  b.Release();
  late->reset();
  a->reset();
  StopServer(server);
}

// A trial killed while attached is counted as lost (stats and the kConsumersDetached
// telemetry counter); one that finishes and detaches is counted as detached.
TEST(ServiceTest, KilledTrialIsCountedAsLostAndFinishedOneAsDetached) {
  const std::string sock = service_test::UniqueSocket("lost");
  Child server = service_test::StartServer(sock, 320, 32, 16, 1000, 0.02, 0, 4);
  const std::string log = ::testing::TempDir() + "/lost_trial_" + std::to_string(getpid()) + ".log";
  Child victim = service_test::Spawn({SERVICE_CONSUMER, sock, "16", "1000", "320", log, "2000",
                                      "1000"},
                                     false);
  ASSERT_GT(victim.pid, 0);
  const pid_t vpid = victim.pid;
  ASSERT_TRUE(WaitStatus(sock, [vpid](const shm::StatusReply& r) {
    return r.count == 1 && r.members[0].pid == vpid && r.members[0].batches > 0;
  }));
  kill(victim.pid, SIGKILL);
  service_test::Wait(victim);
  auto c = Consumer::Attach(sock, ConsumerOptions(16, 1), -1, "finisher");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::vector<EpochLine> e;
  ASSERT_TRUE(ReadEpochs(**c, 320, &e).ok());
  ASSERT_EQ(e.size(), 1u);
  ExpectFullEpoch(e[0], 320);
  c->reset();  // detaches
  ASSERT_TRUE(WaitStatus(sock, [](const shm::StatusReply& r) { return r.count == 0; }));
  kill(server.pid, SIGTERM);
  const std::string stats = service_test::ReadLineWith(server, "stats");
  service_test::Wait(server);
  EXPECT_NE(stats.find("\"lost\":1,"), std::string::npos) << stats;
  EXPECT_NE(stats.find("\"detached\":1,"), std::string::npos) << stats;
  std::remove(log.c_str());
}


// ------------------------------------------------------------------ catch-up (issue 34.5)

// The member bit of the consumer named `name` in a status reply (0: not there).
uint64_t MemberBitOf(const shm::StatusReply& r, const std::string& name) {
  for (uint32_t i = 0; i < r.count; ++i)
    if (std::string(r.members[i].name) == name) return 1ULL << r.members[i].id;
  return 0;
}

// A trial attaching after the late-join window starts at once with an epoch of its own: the
// stream's current epoch, replayed to it alone between the stream's batches (option
// late_join_catch_ups, default 2), then the stream's next epochs. B joins at batch 7 of 10
// (HeldAtBatchSeven) and is shown catching up; it gets the whole of epoch 0 (before: it
// waited for epoch 1), exactly once and byte for byte, and A is not disturbed.
TEST(ServiceCatchUpTest, LateJoinerAfterTheWindowStartsAtOnceWithAWholeEpoch) {
  const std::string sock = service_test::UniqueSocket("catchup");
  HeldAtBatchSeven held(sock, 3, 3);
  auto b = Consumer::Attach(sock, ConsumerOptions(16, 2), -1, "b");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_TRUE(WaitStatus(sock, [](const shm::StatusReply& r) {
    return (r.stream.catching_up & MemberBitOf(r, "b")) != 0;
  }));
  auto j = nlohmann::json::parse(RunCli("status --json --socket " + sock));
  for (const auto& c : j["consumers"])
    EXPECT_EQ(c["state"], c["name"] == "b" ? "catch-up" : "active") << j.dump();
  EXPECT_EQ(j["catch_ups"], 1) << j.dump();
  EXPECT_EQ(j["catch_up_limit"], 2) << j.dump();
  const std::string table = RunCli("status --socket " + sock);
  EXPECT_NE(table.find("catch-up"), std::string::npos) << table;
  EXPECT_NE(table.find("1 caught up with an epoch of their own (1 now, at most 2 at once"),
            std::string::npos) << table;
  std::vector<EpochLine> eb;
  Status sb = held.ReadBeside(**b, &eb);
  ASSERT_TRUE(held.a_status.ok()) << held.a_status.ToString();
  ASSERT_TRUE(sb.ok()) << sb.ToString();
  ASSERT_EQ(eb.size(), 2u);
  EXPECT_EQ(eb[0].epoch, 0);  // its own epoch: the one it joined in, not the next
  EXPECT_EQ(eb[1].epoch, 1);  // then the stream's
  for (const auto& e : eb) ExpectFullEpoch(e, 320);
  ASSERT_EQ(held.ea.size(), 3u);
  for (const auto& e : held.ea) ExpectFullEpoch(e, 320);
  kill(held.server.pid, SIGTERM);
  const std::string stats = service_test::ReadLineWith(held.server, "stats");
  service_test::Wait(held.server);
  EXPECT_NE(stats.find("\"catch_ups\":1,\"catch_up_replayed\":10,\"catch_up_deferrals\":0"),
            std::string::npos) << stats;
}

// The bound: with late_join_catch_ups=1, B catches up and C, joining while B does, is
// deferred to the next epoch (status: "deferred", counted), and gets that epoch whole. B's
// first replayed batches go out once A frees the ring (A reads its 4 published batches), then
// the service settles C while B's epoch is still being replayed, and waits for A again. The
// service's telemetry counts the catch-up, the deferral and the replayed batches.
TEST(ServiceCatchUpTest, JoinersBeyondTheCatchUpLimitWaitForTheNextEpoch) {
  const std::string sock = service_test::UniqueSocket("catchup-limit");
  const std::string json =
      ::testing::TempDir() + "/bc_catchup_" + std::to_string(getpid()) + ".json";
  std::remove(json.c_str());
  HeldAtBatchSeven held(sock, 3, 3, /*catch_ups=*/1, false,
                        "telemetry(json=" + json + ",summary=off)");
  auto b = Consumer::Attach(sock, ConsumerOptions(16, 1), -1, "b");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_TRUE(WaitStatus(sock, [](const shm::StatusReply& r) {
    return (r.stream.catching_up & MemberBitOf(r, "b")) != 0;
  }));
  auto c = Consumer::Attach(sock, ConsumerOptions(16, 1), -1, "c");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(held.ra.Read(*held.a, 8).ok());  // producer batches 3..6: B's first replays go out
  ASSERT_TRUE(WaitStatus(sock, [](const shm::StatusReply& r) {
    return (r.stream.catch_up_deferred & MemberBitOf(r, "c")) != 0;
  }));
  auto j = nlohmann::json::parse(RunCli("status --json --socket " + sock));
  for (const auto& m : j["consumers"]) {
    const std::string want = m["name"] == "b" ? "catch-up" : m["name"] == "c" ? "deferred"
                                                                             : "active";
    EXPECT_EQ(m["state"], want) << j.dump();
  }
  EXPECT_EQ(j["catch_up_deferrals"], 1) << j.dump();
  EXPECT_EQ(j["catch_up_limit"], 1) << j.dump();
  std::vector<EpochLine> eb, ec;
  Status sb;
  held.Read();
  std::thread tb([&] { sb = ReadEpochs(**b, 320, &eb); });
  Status sc = ReadEpochs(**c, 320, &ec);
  tb.join();
  ASSERT_TRUE(held.Join().ok()) << held.a_status.ToString();
  ASSERT_TRUE(sb.ok()) << sb.ToString();
  ASSERT_TRUE(sc.ok()) << sc.ToString();
  ASSERT_EQ(eb.size(), 1u);
  EXPECT_EQ(eb[0].epoch, 0);  // caught up
  ExpectFullEpoch(eb[0], 320);
  ASSERT_EQ(ec.size(), 1u);
  EXPECT_EQ(ec[0].epoch, 1);  // deferred: the next epoch, whole
  ExpectFullEpoch(ec[0], 320);
  for (const auto& e : held.ea) ExpectFullEpoch(e, 320);
  kill(held.server.pid, SIGTERM);
  const std::string stats = service_test::ReadLineWith(held.server, "stats");
  service_test::Wait(held.server);
  EXPECT_NE(stats.find("\"catch_ups\":1,\"catch_up_replayed\":10,\"catch_up_deferrals\":1"),
            std::string::npos) << stats;
  std::FILE* tf = std::fopen(json.c_str(), "r");
  ASSERT_NE(tf, nullptr) << "the service wrote no telemetry file";
  const nlohmann::json tj = nlohmann::json::parse(tf);
  std::fclose(tf);
  std::remove(json.c_str());
  ASSERT_EQ(tj["ranks"].size(), 1u);
  auto total = [&tj](const char* series) {
    int64_t sum = 0;
    for (const auto& v : tj["ranks"][0]["series"][series]) sum += v.get<int64_t>();
    return sum;
  };
  EXPECT_EQ(total("late_join_catch_ups"), 1) << tj["ranks"][0]["series"].dump();
  EXPECT_EQ(total("late_joins_deferred"), 1) << tj["ranks"][0]["series"].dump();
  EXPECT_GE(total("batches_replayed"), 10) << tj["ranks"][0]["series"].dump();
}

// A stream's last epoch: a trial joining after the window used to be admitted at the next
// epoch, which does not come, and failed ("the stream ended after this consumer completed 0
// of the 1 epochs"). Caught up, it trains that epoch whole; with late_join_catch_ups=0 the
// old refusal stays, naming the fix.
TEST(ServiceCatchUpTest, LateJoinerInTheLastEpochIsCaughtUpInsteadOfRefused) {
  for (int limit : {-1, 0}) {
    SCOPED_TRACE(limit < 0 ? "default late_join_catch_ups" : "late_join_catch_ups=0");
    const std::string sock = service_test::UniqueSocket("catchup-last" + std::to_string(limit));
    HeldAtBatchSeven held(sock, 1, 1, limit);
    auto b = Consumer::Attach(sock, ConsumerOptions(16, 1), -1, "b");
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    std::vector<EpochLine> eb;
    Status sb = held.ReadBeside(**b, &eb);
    ASSERT_TRUE(held.a_status.ok()) << held.a_status.ToString();
    ASSERT_EQ(held.ea.size(), 1u);
    ExpectFullEpoch(held.ea[0], 320);
    if (limit < 0) {
      ASSERT_TRUE(sb.ok()) << sb.ToString();
      ASSERT_EQ(eb.size(), 1u);
      EXPECT_EQ(eb[0].epoch, 0);
      ExpectFullEpoch(eb[0], 320);
    } else {
      EXPECT_EQ(sb.code(), StatusCode::kFailedPrecondition) << sb.ToString();
      EXPECT_NE(sb.message().find("completed 0 of the 1 epochs"), std::string::npos)
          << sb.message();
      EXPECT_TRUE(eb.empty());
    }
    b->reset();
    held.a.reset();
    StopServer(held.server);
  }
}

}  // namespace
}  // namespace batchcast
