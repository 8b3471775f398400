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
  /// The same completion, when fail_completion said no: true turns it into
  /// an error completion WITHOUT its op_context, as shm reports every write
  /// to a peer that died (TOOLCHAIN.md): the engine cannot tell which write
  /// failed, and the write keeps its slot until the engine works it out.
  virtual bool lose_context(uint64_t /*job_id*/) { return false; }
};

/// Fails the first completion of each chosen job.
class job_faults final : public fault_injector {
 public:
  explicit job_faults(std::set<uint64_t> jobs) : jobs_(std::move(jobs)) {}
  bool fail_completion(uint64_t job_id) override {
    std::lock_guard<std::mutex> guard{mutex_};
    return jobs_.erase(job_id) > 0;
  }

 private:
  std::mutex mutex_;
  std::set<uint64_t> jobs_;
};

/// Turns every completion of each chosen job into an error completion with
/// no op_context (the writes of a dead shm peer).
class job_faults_without_context final : public fault_injector {
 public:
  explicit job_faults_without_context(std::set<uint64_t> jobs) : jobs_(std::move(jobs)) {}
  bool fail_completion(uint64_t) override { return false; }
  bool lose_context(uint64_t job_id) override {
    std::lock_guard<std::mutex> guard{mutex_};
    return jobs_.count(job_id) > 0;
  }

 private:
  std::mutex mutex_;
  std::set<uint64_t> jobs_;
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
