// Fault injection around the real fabric engine: chosen write completions
// that the provider reported as successful are turned into CQ error
// completions (as if fi_cq_readerr had returned them), so tests and
// `bench soak` exercise the engine's real error path on real writes.
//
// An injected error is a per-op failure: it fails the job (the room's
// submit) that owns the write, with a reason naming the injection, and
// leaves the peer healthy, exactly like a provider's per-op error (e.g.
// EACCES for a bad key on `sockets`). The bytes of an injected write did
// land; the job still fails, so decode never sees that room complete.
//
// Threading: fail_completion() is called on the engine's worker thread only.
#pragma once

#include <cstdint>
#include <mutex>
#include <random>
#include <set>

namespace layerstream::fabric {

class fault_injector {
 public:
  virtual ~fault_injector() = default;
  /// One successful completion of a write of job `job_id`: true turns it
  /// into an error completion.
  virtual bool fail_completion(uint64_t job_id) = 0;
  /// The same completion, when fail_completion said no: how many error
  /// completions WITHOUT an op_context it becomes (0: none), as shm reports
  /// every write to a peer that died (TOOLCHAIN.md). The engine cannot tell
  /// which write failed, and the write keeps its slot until the engine works
  /// it out. More than one breaks libfabric's one completion per operation,
  /// which the engine must survive too.
  virtual unsigned errors_without_context(uint64_t /*job_id*/) { return 0; }
};

/// What job_faults does to the completions of its chosen jobs.
enum class job_fault {
  /// The first completion of each job is a per-op error.
  per_op_once,
  /// Every completion is an error without op_context (a dead shm peer).
  without_context,
  /// Every completion is two errors without op_context: more failures
  /// than writes posted.
  without_context_twice,
};

/// Fails the completions of the chosen jobs, as `kind` says.
class job_faults final : public fault_injector {
 public:
  explicit job_faults(std::set<uint64_t> jobs, job_fault kind = job_fault::per_op_once)
      : jobs_(std::move(jobs)), kind_(kind) {}
  bool fail_completion(uint64_t job_id) override {
    if (kind_ != job_fault::per_op_once)
      return false;
    std::lock_guard<std::mutex> guard{mutex_};
    return jobs_.erase(job_id) > 0;
  }
  unsigned errors_without_context(uint64_t job_id) override {
    if (kind_ == job_fault::per_op_once)
      return 0;
    std::lock_guard<std::mutex> guard{mutex_};
    if (jobs_.count(job_id) == 0)
      return 0;
    return kind_ == job_fault::without_context ? 1 : 2;
  }

 private:
  std::mutex mutex_;
  std::set<uint64_t> jobs_;
  job_fault kind_;
};

/// Fails each completion with probability `rate` (seeded, reproducible per
/// completion order).
class random_faults final : public fault_injector {
 public:
  random_faults(double rate, uint64_t seed) : rng_(seed), dist_(rate) {}
  bool fail_completion(uint64_t) override {
    std::lock_guard<std::mutex> guard{mutex_};
    return dist_(rng_);
  }

 private:
  std::mutex mutex_;
  std::mt19937_64 rng_;
  std::bernoulli_distribution dist_;
};

} // namespace layerstream::fabric
