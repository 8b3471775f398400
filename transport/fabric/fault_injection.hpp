// Fault injection around the real fabric engine: chosen write completions
// that the provider reported as successful are turned into CQ error
// completions (as if fi_cq_readerr had returned them), so tests and
// `bench soak` exercise the engine's real error path on real writes.
//
// A per-op error (fail_completion) fails the job (the room's submit) that
// owns the write, with a reason naming the injection, and leaves the peer
// healthy, exactly like a provider's per-op error (e.g. EACCES for a bad
// key on `sockets`). An error without op_context (errors_without_context)
// fails the job and its peer, as the engine treats such errors. The bytes
// of an injected write did land; the job still fails, so decode never sees
// that room complete.
//
// Threading: both hooks are called on the engine's worker thread only.
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
  /// completions WITHOUT an op_context the engine reads in its place (as
  /// shm reports every write to a peer that died, TOOLCHAIN.md), or, with
  /// `completion_too`, just before it (as rxm reports an internal error,
  /// once to the TX and once to the RX CQ, while the writes go on). The
  /// engine cannot tell which write, if any, failed. More than one in place
  /// of a completion breaks libfabric's one completion per operation, which
  /// the engine must survive too.
  struct context_less_errors {
    unsigned count = 0;
    bool completion_too = false;
  };
  virtual context_less_errors errors_without_context(uint64_t /*job_id*/) { return {}; }
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
  /// The first completion comes after two errors without op_context that
  /// are no write's (an rxm internal error, on its TX and its RX CQ); the
  /// completion itself arrives. Off shm only: shm would count them as
  /// failed writes.
  without_context_beside,
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
  context_less_errors errors_without_context(uint64_t job_id) override {
    if (kind_ == job_fault::per_op_once)
      return {};
    std::lock_guard<std::mutex> guard{mutex_};
    if (kind_ == job_fault::without_context_beside)
      return jobs_.erase(job_id) > 0 ? context_less_errors{2, true} : context_less_errors{};
    if (jobs_.count(job_id) == 0)
      return {};
    return {kind_ == job_fault::without_context ? 1u : 2u, false};
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
