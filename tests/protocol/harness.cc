// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "tests/protocol/harness.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace batchcast::protocol_test {
namespace {

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

struct Spawned {
  pid_t pid = -1;
  int in = -1, out = -1;
};

// Starts args[0] with stdout on a pipe, stdin on a pipe (if wanted), stderr to err_path.
Spawned Spawn(const std::vector<std::string>& args, bool want_stdin, const std::string& err_path) {
  int out[2], in[2] = {-1, -1};
  if (pipe2(out, O_CLOEXEC) != 0) return {};
  if (want_stdin && pipe2(in, O_CLOEXEC) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a failed driver leaves no process behind
    dup2(out[1], 1);
    if (want_stdin) dup2(in[0], 0);
    else {
      int null = open("/dev/null", O_RDONLY);
      dup2(null, 0);
    }
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (err >= 0) dup2(err, 2);
    std::vector<char*> av;
    for (const auto& a : args) av.push_back(const_cast<char*>(a.c_str()));
    av.push_back(nullptr);
    execv(av[0], av.data());
    _exit(127);
  }
  close(out[1]);
  if (want_stdin) close(in[0]);
  Spawned s;
  s.pid = pid;
  s.out = out[0];
  s.in = in[1];
  return s;
}

std::string Join(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += (s.empty() ? "" : " ") + ("'" + a + "'");
  return s;
}

// Appends what is readable on fd to partial and moves complete lines out. False on EOF.
bool ReadLines(int fd, std::string* partial, std::vector<std::string>* lines) {
  char buf[65536];
  ssize_t n = read(fd, buf, sizeof(buf));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) return false;
  partial->append(buf, size_t(n));
  size_t pos;
  while ((pos = partial->find('\n')) != std::string::npos) {
    lines->push_back(partial->substr(0, pos));
    partial->erase(0, pos + 1);
  }
  return true;
}

bool StartsWith(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

}  // namespace

const char* ExpectName(Expect e) {
  switch (e) {
    case Expect::kComplete: return "complete";
    case Expect::kEarlyEnd: return "early-end";
    case Expect::kEvicted: return "evicted";
    case Expect::kLeaderLost: return "leader-lost";
    case Expect::kKilled: return "killed";
    case Expect::kWriteFaults: return "write-faults";
    case Expect::kAttachRefused: return "attach-refused";
    case Expect::kAttachError: return "attach-error";
    case Expect::kCompleteOrError: return "complete-or-error";
  }
  return "?";
}

std::string ProgramDir(const char* argv0) {
  std::string p = argv0;
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) p.assign(buf, size_t(n));
  auto slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

Engine::Engine(Scenario s, std::string bin_dir, std::string tag)
    : s_(std::move(s)), bin_(std::move(bin_dir)), tag_(std::move(tag)) {
  dir_ = "/tmp/bc-protocol-" + std::to_string(getpid()) + "-" + tag_;
  mkdir(dir_.c_str(), 0755);
  if (s_.producer.socket.empty())
    s_.producer.socket = "bc-proto-" + std::to_string(getpid()) + "-" + tag_;
  runs_.resize(s_.consumers.size());
  signal(SIGPIPE, SIG_IGN);
}

Engine::~Engine() {
  for (auto& r : runs_) {
    if (r.started && !r.exited) {
      kill(r.pid, SIGKILL);
      waitpid(r.pid, nullptr, 0);
    }
    if (r.in_fd >= 0) close(r.in_fd);
    if (r.out_fd >= 0) close(r.out_fd);
  }
  if (leader_pid_ > 0 && !leader_exited_) {
    kill(leader_pid_, SIGKILL);
    waitpid(leader_pid_, nullptr, 0);
  }
  if (impostor_pid_ > 0) {
    kill(impostor_pid_, SIGKILL);
    waitpid(impostor_pid_, nullptr, 0);
  }
  if (leader_out_ >= 0) close(leader_out_);
  if (violations_.empty() && std::getenv("BC_PROTOCOL_KEEP") == nullptr)
    (void)std::system(("rm -rf '" + dir_ + "'").c_str());
}

int64_t Engine::ElapsedMs() const { return (NowNs() - start_ns_) / 1000000; }

Result<LeaderView> Engine::Query() { return QueryLeader(s_.producer.socket, 2000); }

bool Engine::Evicted(int i) {
  auto v = Query();
  // A leader that has finished the stream without it and exited cannot be asked; it got
  // there only by no longer waiting for the stopped consumer.
  if (!v.ok()) {
    if (leader_exited_) runs_[size_t(i)].stop_outlived_leader = true;
    return leader_exited_;
  }
  for (const auto& m : v->members)
    if (m.pid == runs_[size_t(i)].pid && m.addressed) return false;
  return true;
}

void Engine::Go(int i) {
  ConsumerRun& r = runs_[size_t(i)];
  r.parked.clear();
  if (r.in_fd >= 0 && write(r.in_fd, "go\n", 3) != 3) { /* it exited meanwhile */ }
}

void Engine::Signal(int i, int sig) {
  if (runs_[size_t(i)].started && !runs_[size_t(i)].exited) kill(runs_[size_t(i)].pid, sig);
}

void Engine::SignalLeader(int sig) {
  // The leader process itself (under mpirun the rank, whose pid its ready line gives).
  if (leader_pid_ > 0 && !leader_exited_) kill(leader_proc_pid_ > 0 ? leader_proc_pid_ : leader_pid_, sig);
}

std::vector<int64_t> Engine::RecvCounts() const {
  std::vector<int64_t> v;
  for (const auto& r : runs_) v.push_back(r.recv);
  return v;
}

bool Engine::OthersProgressed(int i, const std::vector<int64_t>& since, int64_t more) const {
  for (int j = 0; j < consumers(); ++j) {
    if (j == i) continue;
    const ConsumerRun& r = runs_[size_t(j)];
    if (!r.started || r.exited || r.out_fd < 0 || !r.parked.empty()) continue;
    // Enough batches that the ring has wrapped past every slot the stopped one held.
    const int64_t p = s_.producer.producer_batch;
    const int64_t carves = (p + s_.consumers[size_t(j)].b - 1) / s_.consumers[size_t(j)].b;
    const int64_t need = more * carves;
    if (r.recv - since[size_t(j)] < need) return false;
  }
  return true;
}

bool Engine::StartLeader(bool expect_refused, std::string* out_line) {
  const ProducerSpec& p = s_.producer;
  std::vector<std::string> args = {
      bin_ + "/protocol_leader", std::string("producer=") + ProducerName(p.kind),
      "socket=" + p.socket, "samples=" + std::to_string(p.samples),
      "p=" + std::to_string(p.producer_batch), "max_b=" + std::to_string(p.max_batch),
      "slots=" + std::to_string(p.ring_slots), "depth=" + std::to_string(p.buffer_depth),
      "hb=" + std::to_string(p.heartbeat_ms), "epochs=" + std::to_string(p.epochs),
      "expect=" + std::to_string(p.expect), "seed=" + std::to_string(p.seed),
      "window=" + std::to_string(p.late_join_window),
      "end_when_empty=" + std::to_string(p.end_when_empty ? 1 : 0),
      "views_max=" + std::to_string(p.views_max)};
  if (p.kind == ProducerKind::kMultinode) {
    const char* mpirun = std::getenv("BC_PROTOCOL_MPIRUN");
    std::vector<std::string> mpi = {mpirun ? mpirun : "/usr/bin/mpirun", "-n", "1",
                                    "--oversubscribe"};
    args.insert(args.begin(), mpi.begin(), mpi.end());
  }
  Spawned sp = Spawn(args, false, dir_ + (expect_refused ? "/leader-refused.err" : "/leader.err"));
  std::vector<std::string> lines;
  std::string partial;
  bool ok = false;
  for (;;) {
    pollfd pfd{sp.out, POLLIN, 0};
    int left = int(s_.deadline_ms - ElapsedMs());
    if (left <= 0 || poll(&pfd, 1, left) <= 0) break;
    if (!ReadLines(sp.out, &partial, &lines)) break;
    bool seen = false;
    for (const auto& l : lines)
      if (StartsWith(l, "ready") || StartsWith(l, "create-error")) {
        *out_line = l;
        ok = StartsWith(l, "ready");
        seen = true;
      }
    if (seen) break;
  }
  if (expect_refused) {  // the leader must exit: its name is taken
    close(sp.out);
    if (ok) {
      kill(sp.pid, SIGKILL);
    }
    int st = 0;
    waitpid(sp.pid, &st, 0);
    if (out_line->empty()) *out_line = ReadFile(dir_ + "/leader-refused.err");
    return ok;
  }
  leader_pid_ = sp.pid;
  const size_t at = out_line->rfind(" pid=");
  if (ok && at != std::string::npos) leader_proc_pid_ = std::atoi(out_line->c_str() + at + 5);
  leader_out_ = sp.out;
  leader_lines_ = lines;
  if (!ok) {
    Fail("leader did not start: " + (out_line->empty() ? ReadFile(dir_ + "/leader.err") : *out_line));
    return false;
  }
  fcntl(leader_out_, F_SETFL, O_NONBLOCK);
  return true;
}

// Case 8: an impostor of another uid listens on the address first. The real leader must
// refuse to start saying who holds the name; a consumer must refuse the impostor, naming
// its uid and pid. Then the impostor goes and the scenario runs normally.
bool Engine::StartImpostorPhase() {
  Spawned imp = Spawn({bin_ + "/protocol_impostor", s_.producer.socket, "65534"}, false,
                      dir_ + "/impostor.err");
  impostor_pid_ = imp.pid;
  std::string partial;
  std::vector<std::string> lines;
  while (lines.empty()) {
    pollfd pfd{imp.out, POLLIN, 0};
    if (poll(&pfd, 1, 10000) <= 0 || !ReadLines(imp.out, &partial, &lines)) break;
  }
  close(imp.out);
  if (lines.empty() || !StartsWith(lines[0], "ready")) {
    Fail("impostor did not start: " + ReadFile(dir_ + "/impostor.err"));
    return false;
  }
  impostor_info_ = lines[0];
  const std::string pid = std::to_string(imp.pid);
  std::string leader_line;
  if (StartLeader(true, &leader_line))
    Fail("leader started although an impostor (uid 65534, pid " + pid + ") holds its name");
  else if (leader_line.find(pid) == std::string::npos &&
           leader_line.find("65534") == std::string::npos)
    Fail("leader refused to start but does not say who holds its name (impostor uid 65534, "
         "pid " + pid + "): " + leader_line);
  for (int i = 0; i < consumers(); ++i)
    if (s_.consumers[size_t(i)].expect == Expect::kAttachRefused) {
      StartConsumer(i);
      while (runs_[size_t(i)].out_fd >= 0 && ElapsedMs() < s_.deadline_ms) Pump(100);
      ReapExits();
    }
  kill(impostor_pid_, SIGKILL);
  waitpid(impostor_pid_, nullptr, 0);
  impostor_pid_ = -1;
  return true;
}

void Engine::StartConsumer(int i) {
  const ConsumerPlan& c = s_.consumers[size_t(i)];
  ConsumerRun& r = runs_[size_t(i)];
  std::vector<std::string> args = {
      bin_ + "/protocol_consumer", s_.producer.socket, "b=" + std::to_string(c.b),
      "depth=" + std::to_string(c.depth), "epochs=" + std::to_string(c.epochs),
      "hb=" + std::to_string(c.hb_ms > 0 ? c.hb_ms : s_.producer.heartbeat_ms),
      "rank=" + std::to_string(i), "samples=" + std::to_string(s_.producer.samples),
      "seed=" + std::to_string(c.seed), "offset=" + std::to_string(c.offset ? 1 : 0),
      "shuffle=" + std::to_string(c.shuffle ? 1 : 0), "hold=" + std::to_string(c.hold),
      "tail=" + c.tail, "name=" + (c.name.empty() ? "c" + std::to_string(i) : c.name),
      "view=" + std::to_string(c.view), "resize=" + c.resize, "script=" + c.script};
  r.err_path = dir_ + "/c" + std::to_string(i) + ".err";
  r.cmd = Join(args);
  Spawned sp = Spawn(args, true, r.err_path);
  r.pid = sp.pid;
  r.in_fd = sp.in;
  r.out_fd = sp.out;
  r.started = true;
  fcntl(r.out_fd, F_SETFL, O_NONBLOCK);
}

void Engine::Pump(int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<int> who;  // consumer index, -1: leader
  if (leader_out_ >= 0) {
    fds.push_back({leader_out_, POLLIN, 0});
    who.push_back(-1);
  }
  for (int i = 0; i < consumers(); ++i)
    if (runs_[size_t(i)].out_fd >= 0) {
      fds.push_back({runs_[size_t(i)].out_fd, POLLIN, 0});
      who.push_back(i);
    }
  if (fds.empty()) {
    usleep(1000);  // only waiting for exits to be reaped
    return;
  }
  if (poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
  for (size_t k = 0; k < fds.size(); ++k) {
    if (fds[k].revents == 0) continue;
    if (who[k] < 0) {
      if (!ReadLines(leader_out_, &leader_partial_, &leader_lines_)) {
        close(leader_out_);
        leader_out_ = -1;
      }
      continue;
    }
    ConsumerRun& r = runs_[size_t(who[k])];
    std::vector<std::string> lines;
    bool open = ReadLines(r.out_fd, &r.partial, &lines);
    for (const auto& l : lines) OnLine(who[k], l);
    if (!open) {
      close(r.out_fd);
      r.out_fd = -1;
    }
  }
}

void Engine::OnLine(int i, const std::string& line) {
  ConsumerRun& r = runs_[size_t(i)];
  r.lines.push_back(line);
  if (StartsWith(line, "recv ")) r.recv += 1;
  if (StartsWith(line, "sync ")) OnSync(i, line.substr(5));
}

void Engine::OnSync(int i, const std::string& name) {
  runs_[size_t(i)].parked = name;
  if (s_.on_sync && s_.on_sync(*this, i, name)) return;
  if (name == "late") {
    // Not before every initial consumer has attached: a late joiner could otherwise be one
    // of the `expect` joins the leader waits for and start the stream without an initial
    // consumer, whose process (slow to start on a loaded machine) then found the stream
    // ended and no listener (seed 26, producer external, once in a ctest run).
    if (InitialSettled()) StartLateJoiners(i);
    else late_parked_.insert(i);
  } else if (name == "cstop") {
    Signal(i, SIGSTOP);
    cstop_ = i;
    cstop_phase_ = 1;
  } else if (name == "lstop") {
    SignalLeader(SIGSTOP);
    leader_stopped_ = true;
    lstop_by_ = i;
    Go(i);
  } else if (name == "kill") {
    Signal(i, SIGKILL);
  } else if (name == "others" || name == "keep") {
    // answered in Tick once everyone else is done
  } else {
    Go(i);
  }
}

bool Engine::InitialSettled() const {
  for (int j = 0; j < consumers(); ++j) {
    const ConsumerPlan& c = s_.consumers[size_t(j)];
    if (c.late_after != -1 || c.expect == Expect::kAttachRefused) continue;
    const ConsumerRun& r = runs_[size_t(j)];
    bool settled = !r.started || r.out_fd < 0;
    for (const auto& l : r.lines)
      if (StartsWith(l, "attached") || StartsWith(l, "attach-error")) settled = true;
    if (!settled) return false;
  }
  return true;
}

void Engine::StartLateJoiners(int i) {
  std::set<int> joiners;
  for (int j = 0; j < consumers(); ++j)
    if (s_.consumers[size_t(j)].late_after == i && !runs_[size_t(j)].started) {
      StartConsumer(j);
      joiners.insert(j);
    }
  late_waiting_[i] = joiners;
}

void Engine::ReapExits() {
  for (auto& r : runs_) {
    if (!r.started || r.exited) continue;
    if (waitpid(r.pid, &r.wait_status, WNOHANG) == r.pid) r.exited = true;
  }
  if (leader_pid_ > 0 && !leader_exited_ &&
      waitpid(leader_pid_, &leader_status_, WNOHANG) == leader_pid_)
    leader_exited_ = true;
}

void Engine::Tick() {
  ReapExits();
  if (!late_parked_.empty() && InitialSettled()) {
    for (int i : late_parked_) StartLateJoiners(i);
    late_parked_.clear();
  }
  // Late joiners: the trigger goes on once each has attached (or failed to).
  for (auto it = late_waiting_.begin(); it != late_waiting_.end();) {
    std::set<int>& js = it->second;
    for (auto j = js.begin(); j != js.end();) {
      const ConsumerRun& r = runs_[size_t(*j)];
      bool settled = r.out_fd < 0;
      for (const auto& l : r.lines)
        if (StartsWith(l, "attached") || StartsWith(l, "attach-error")) settled = true;
      j = settled ? js.erase(j) : std::next(j);
    }
    if (js.empty()) {
      Go(it->first);
      it = late_waiting_.erase(it);
    } else {
      ++it;
    }
  }
  // A late joiner whose trigger ended without reaching its sync starts now.
  for (int j = 0; j < consumers(); ++j) {
    const int t = s_.consumers[size_t(j)].late_after;
    if (t >= 0 && !runs_[size_t(j)].started && runs_[size_t(t)].started &&
        runs_[size_t(t)].out_fd < 0 && InitialSettled())
      StartConsumer(j);
  }
  // A consumer stopped past the heartbeat: wait until the leader evicted it and the others
  // went on far enough to have reused every slot, then let it resume.
  if (cstop_ >= 0) {
    if (cstop_phase_ == 1 && Evicted(cstop_)) {
      cstop_phase_ = 2;
      cstop_since_ = RecvCounts();
    }
    const int64_t slots = s_.producer.ring_slots > 0 ? s_.producer.ring_slots
                                                     : s_.producer.buffer_depth + 3;
    if (cstop_phase_ == 2 && OthersProgressed(cstop_, cstop_since_, slots + 1)) {
      Signal(cstop_, SIGCONT);
      Go(cstop_);
      cstop_ = -1;
      cstop_phase_ = 0;
    }
  }
  // Parked until everyone else is done ("others": detached while holding; "keep": finished
  // but keeps its last batch).
  bool all_parked_or_done = true;
  std::vector<int> parked;
  for (int j = 0; j < consumers(); ++j) {
    const ConsumerRun& r = runs_[size_t(j)];
    if (r.parked == "others" || r.parked == "keep") {
      parked.push_back(j);
      continue;
    }
    const bool pending = !r.started && s_.consumers[size_t(j)].expect != Expect::kAttachRefused;
    if (pending || (r.started && r.out_fd >= 0)) all_parked_or_done = false;
  }
  if (all_parked_or_done)
    for (int j : parked) Go(j);
  // The leader stopped past the heartbeat: it resumes once every consumer has ended.
  if (leader_stopped_ && lstop_by_ >= 0 && AllDone()) {
    SignalLeader(SIGCONT);
    leader_stopped_ = false;
  }
  if (s_.on_tick) s_.on_tick(*this);
}

bool Engine::AllDone() const {
  for (size_t j = 0; j < runs_.size(); ++j) {
    const ConsumerRun& r = runs_[j];
    if (!r.started && s_.consumers[j].expect != Expect::kAttachRefused) return false;
    if (r.started && (!r.exited || r.out_fd >= 0)) return false;
  }
  return true;
}

std::vector<std::string> Engine::Run() {
  start_ns_ = NowNs();
  if (s_.impostor) {
    if (geteuid() != 0) {
      for (auto& c : s_.consumers)
        if (c.expect == Expect::kAttachRefused) c.expect = Expect::kKilled;  // not run
      s_.impostor = false;
    } else if (!StartImpostorPhase()) {
      return violations_;
    }
  }
  std::string ready;
  if (!StartLeader(false, &ready)) return violations_;
  for (int i = 0; i < consumers(); ++i)
    if (s_.consumers[size_t(i)].late_after == -1 &&
        s_.consumers[size_t(i)].expect != Expect::kAttachRefused)
      StartConsumer(i);
  bool expired = false;
  while (!AllDone()) {
    if (ElapsedMs() > s_.deadline_ms) {
      expired = true;
      break;
    }
    Pump(20);
    Tick();
  }
  if (expired) {
    Fail("deadline: the run did not finish within " + std::to_string(s_.deadline_ms) +
         " ms (a consumer or the leader waits forever?)\n" + Dump());
    for (auto& r : runs_)
      if (r.started && !r.exited) {
        kill(r.pid, SIGCONT);
        kill(r.pid, SIGKILL);
      }
    for (int k = 0; k < 50 && !AllDone(); ++k) {
      Pump(20);
      ReapExits();
    }
  }
  Finish();
  if (!expired) Check();
  return violations_;
}

void Engine::Finish() {
  if (leader_pid_ <= 0) return;
  if (!leader_exited_) {
    SignalLeader(SIGCONT);
    SignalLeader(SIGTERM);
    leader_termed_ = true;
  }
  const int64_t until = ElapsedMs() + 20000;
  while (!leader_exited_ && ElapsedMs() < until) {
    Pump(20);
    ReapExits();
  }
  if (!leader_exited_) {
    Fail("the leader did not stop within 20 s of SIGTERM\n" + Dump());
    kill(leader_pid_, SIGKILL);
    waitpid(leader_pid_, &leader_status_, 0);
    leader_exited_ = true;
  }
  while (leader_out_ >= 0) Pump(20);
}

std::string Engine::Dump() const {
  std::ostringstream o;
  o << "  scenario dir: " << dir_ << " (stderr of every process; kept on failure)\n";
  o << "  leader pid " << leader_pid_ << (leader_exited_ ? " exited (" + DescribeExit(leader_status_) + ")" : " running")
    << (leader_stopped_ ? " SIGSTOPPED" : "") << "\n";
  for (size_t k = leader_lines_.size() > 3 ? leader_lines_.size() - 3 : 0; k < leader_lines_.size(); ++k)
    o << "    | " << leader_lines_[k] << "\n";
  for (size_t i = 0; i < runs_.size(); ++i) {
    const ConsumerRun& r = runs_[i];
    const ConsumerPlan& c = s_.consumers[i];
    o << "  consumer " << i << " (b=" << c.b << " depth=" << c.depth << " epochs=" << c.epochs
      << " hold=" << c.hold << " expect=" << ExpectName(c.expect)
      << (c.late_after >= 0 ? " late after c" + std::to_string(c.late_after) : "") << "): ";
    if (!r.started) {
      o << "not started\n";
      continue;
    }
    o << "pid " << r.pid << (r.exited ? " exited (" + DescribeExit(r.wait_status) + ")" : " running")
      << (r.parked.empty() ? "" : " parked at sync " + r.parked) << ", " << r.recv
      << " batches received\n";
    for (size_t k = r.lines.size() > 4 ? r.lines.size() - 4 : 0; k < r.lines.size(); ++k)
      o << "    | " << r.lines[k].substr(0, 160) << "\n";
  }
  return o.str();
}

void Engine::Check() {
  for (int i = 0; i < consumers(); ++i) CheckConsumer(i);
  if (!leader_termed_ && lstop_by_ < 0 && !(WIFEXITED(leader_status_) && WEXITSTATUS(leader_status_) == 0))
    Fail("leader ended by itself with " + DescribeExit(leader_status_) + ": " +
         (leader_lines_.empty() ? "" : leader_lines_.back()) + " (see " + dir_ + "/leader.err)");
}

}  // namespace batchcast::protocol_test
