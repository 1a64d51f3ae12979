// run_jobs: one campaign in several forked processes (hla/fuzz/campaign.hpp),
// for `hla fuzz --jobs` and hla_oracle.fuzz(jobs=).
#include "hla/fuzz/campaign.hpp"
#include "hla/fuzz/merge.hpp"
#include "hla/fuzz/signals.hpp"

#include "hla/io/atomic_file.hpp"
#include "hla/io/printable.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace hla::fuzz {
namespace {

namespace fs = std::filesystem;

// Each job's progress, in memory shared with the parent (mapped before the fork).
struct JobProgress {
  std::atomic<uint64_t> cases{0}, findings{0};
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// Why a job failed, for the parent: dir/error.txt.
void leave_error(const fs::path& dir, const std::string& message) {
  try {
    io::write_file_atomically(dir / "error.txt", message);
  } catch (...) {  // the parent then says that the job failed, without why
  }
}

// One job, in the forked child: a campaign into `dir` (its summary.json),
// its progress in `slot`. Exits 0 clean, 1 findings, 2 input error, 3 other.
[[noreturn]] void run_job(const Jobs& jobs, CampaignOptions o, const fs::path& dir, unsigned j, JobProgress* slot) {
  int rc = 3;
  std::string error;
  try {
    StopSignals signals;
    fs::create_directories(dir);
    o.findings_dir = dir.string();
    if (o.on_note) o.on_note = [j, note = o.on_note](const std::string& m) { note("job " + std::to_string(j) + ": " + m); };
    o.on_progress = [slot](const Progress& p) { slot->cases = p.cases, slot->findings = p.findings; };
    Summary sum;
    {
      auto adapter = jobs.make_adapter();
      sum = run_campaign(*adapter, o);
    }  // the adapter's processes and folders end here
    if (signals.received()) {
      if (jobs.before_exit) jobs.before_exit();
      std::fflush(nullptr);
      signals.reraise();
    }
    rc = sum.findings.empty() ? 0 : 1;
  } catch (const InputError& e) {
    error = e.what(), rc = 2;
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "the campaign was stopped by an exception";
  }
  if (!error.empty()) leave_error(dir, error);
  try {
    if (jobs.before_exit) jobs.before_exit();
  } catch (...) {
  }
  std::fflush(nullptr);
  _exit(rc);
}

// The running jobs: their pids (-1 once reaped) and wait statuses (-1 for a job with no cases).
struct Running {
  std::vector<pid_t> pids;
  std::vector<int> status;
  size_t count() const {
    return static_cast<size_t>(std::count_if(pids.begin(), pids.end(), [](pid_t p) { return p > 0; }));
  }
  void reap(bool block) {
    for (size_t j = 0; j < pids.size(); ++j)
      if (pids[j] > 0 && waitpid(pids[j], &status[j], block ? 0 : WNOHANG) == pids[j]) unforward_stop_signal(pids[j]), pids[j] = -1;
  }
};

// Forks the jobs (stop signals blocked meanwhile, so that none is lost or
// reaches a job before it can stop cleanly).
Running fork_jobs(const Jobs& jobs, const CampaignOptions& o, const std::vector<fs::path>& dirs, JobProgress* slots) {
  const size_t s = o.shard, S = o.shards, J = jobs.count, M = o.max_cases;
  sigset_t stop, old;
  sigemptyset(&stop), sigaddset(&stop, SIGTERM), sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, &old);
  std::fflush(nullptr);
  Running r{std::vector<pid_t>(J, -1), std::vector<int>(J, -1)};
  for (size_t j = 0; j < J; ++j) {
    CampaignOptions job = o;
    job.shard = s + S * j, job.shards = S * J;
    job.max_cases = M / J + (j < M % J);
    if (job.max_cases == 0) continue;
    const pid_t pid = jobs.fork ? jobs.fork() : ::fork();
    if (pid < 0) {
      const std::string why = std::strerror(errno);
      for (pid_t p : r.pids)
        if (p > 0) kill(-p, SIGTERM);
      r.reap(true);
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
      throw std::runtime_error("fork: " + why);
    }
    if (pid == 0) {
      signal(SIGTERM, SIG_DFL), signal(SIGINT, SIG_DFL);
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGTERM);  // a parent killed outright (Python on SIGTERM) leaves no job running
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
      run_job(jobs, std::move(job), dirs[j], static_cast<unsigned>(j), &slots[j]);
    }
    setpgid(pid, pid);
    r.pids[j] = pid;
    forward_stop_signal(pid);  // a StopSignals of the caller passes a stop signal on to the job
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return r;
}

// Waits for the jobs, reporting their progress added up and calling poll;
// when poll throws, ends them (SIGTERM to each job's process group) and rethrows.
void wait_jobs(const Jobs& jobs, const CampaignOptions& o, Running& r, const JobProgress* slots) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    while (r.reap(false), r.count() > 0) {
      if (jobs.poll) jobs.poll();
      if (o.on_progress) {
        Progress p;
        p.max_cases = o.max_cases, p.jobs = jobs.count;
        p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        for (size_t j = 0; j < jobs.count; ++j) p.cases += slots[j].cases, p.findings += slots[j].findings;
        o.on_progress(p);
      }
      usleep(50000);
    }
  } catch (...) {
    for (pid_t pid : r.pids)
      if (pid > 0) kill(-pid, SIGTERM);
    r.reap(true);
    throw;
  }
}

// The folders of the jobs that ended with a summary; InputError or
// runtime_error for one that failed, unless a stop signal ended them.
std::vector<std::string> finished(const Running& r, const std::vector<fs::path>& dirs) {
  std::vector<std::string> done;
  for (size_t j = 0; j < dirs.size(); ++j) {
    if (r.status[j] == -1) continue;
    const int code = WIFEXITED(r.status[j]) ? WEXITSTATUS(r.status[j]) : 3;
    if (code <= 1 || stop_signal()) {
      if (fs::exists(dirs[j] / "summary.json")) done.push_back(dirs[j].string());
      continue;
    }
    std::string why;
    try {
      why = io::read_file_bytes(dirs[j] / "error.txt");
    } catch (...) {
      why = WIFSIGNALED(r.status[j]) ? "ended by signal " + std::to_string(WTERMSIG(r.status[j])) : "failed without a message";
    }
    const std::string m = "job " + std::to_string(j) + ": " + why;
    if (code == 2) throw InputError(m);
    throw std::runtime_error(m);
  }
  return done;
}

}  // namespace

Summary run_jobs(const Jobs& jobs, const CampaignOptions& o) {
  if (jobs.count < 1 || jobs.count > 64) throw InputError("jobs must be 1 to 64 (a stop signal is passed on to 64 processes at most)");
  if (o.shards == 0 || o.shard >= o.shards) throw InputError("--shard i/N needs 0 <= i < N");
  const fs::path out = o.findings_dir;
  fs::create_directories(out);
  std::string templ = (out / ".jobs-XXXXXX").string();
  if (!::mkdtemp(templ.data())) throw InputError("--findings " + io::printable(out.string()) + ": cannot make a folder for the jobs in it");
  const fs::path work = templ;
  std::vector<fs::path> dirs;
  for (unsigned j = 0; j < jobs.count; ++j) dirs.push_back(work / ("job-" + std::to_string(j)));
  void* shared = mmap(nullptr, sizeof(JobProgress) * jobs.count, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) throw std::runtime_error(std::string("mmap: ") + std::strerror(errno));
  auto* slots = new (shared) JobProgress[jobs.count];
  Summary sum;
  try {
    Running r = fork_jobs(jobs, o, dirs, slots);
    wait_jobs(jobs, o, r, slots);
    const std::vector<std::string> done = finished(r, dirs);
    // Into --findings as one campaign's would go (its summary.json replaced).
    fs::remove(out / "summary.json");
    if (!done.empty()) sum = merge_findings(done, out.string(), o.examples_per_group);
  } catch (...) {
    munmap(shared, sizeof(JobProgress) * jobs.count);
    fs::remove_all(work);
    throw;
  }
  munmap(shared, sizeof(JobProgress) * jobs.count);
  fs::remove_all(work);
  sum.signal = stop_signal();
  return sum;
}

}  // namespace hla::fuzz
