// The data path of ONE endpoint, run on ONE thread.
//
// Owns: the endpoint (and through it every fid), the eventfd that wakes the
// worker, the queue of submitted write jobs, the op slots of writes in flight
// and the peer table (address, fi_addr, advertised regions, failed flag).
//
// Lifecycle: start() takes the endpoint and starts the worker thread;
// add_peer()/submit() from any thread; stop() (or the destructor) fails every
// queued job with lserr::cancelled and every job with writes posted with
// lserr::writes_in_flight through the callback, joins the thread; the fids
// close (endpoint order) in the destructor. Registered memory must outlive
// the engine.
//
// Threading: every libfabric call on the endpoint happens under
// `fabric_mutex_`, which the worker holds while posting and reading the CQ
// and releases while it sleeps, so the domain needs no libfabric
// thread-safety level (FI_THREAD_DOMAIN). The completion callback runs on the
// worker thread: it must be cheap and thread-safe (the transport actor's
// only sends a message).
//
// Two roles: `initiator` posts the jobs; `target` (decode side) takes no jobs
// and only drives progress until stopped. A target MUST run: without
// progress at the target, tcp/net senders stall after ~4 MiB and shm's first
// contact never completes.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <rdma/fi_rma.h>
#include <sys/uio.h>

#include "common/error.hpp"
#include "transport/fabric/endpoint.hpp"
#include "transport/fabric/fault_injection.hpp"
#include "transport/transfer_plan.hpp"

namespace layerstream::fabric {

/// One region a peer registered for remote writes and advertised.
struct remote_range {
  uint64_t base = 0;
  uint64_t length = 0;
  uint64_t key = 0;
  friend bool operator==(const remote_range& a, const remote_range& b) {
    return a.base == b.base && a.length == b.length && a.key == b.key;
  }
};

/// Index into the engine's peer table.
using peer_index = uint32_t;

/// How one job ended: ok with every byte delivery-complete, or an error.
struct job_result {
  uint64_t id = 0;
  caf::error status;
  /// Bytes delivery-complete at the target (all of them when status is ok).
  uint64_t bytes = 0;
  /// Steady-clock ns when the engine read the job's last write
  /// delivery-complete from the CQ (ok jobs with writes only; 0 otherwise):
  /// when its bytes were known to be at the target, before any actor hop.
  int64_t delivered_ns = 0;
};

/// Called once per accepted job, on the worker thread.
using completion_fn = std::function<void(job_result)>;

/// Counters for tests and benchmarks (read any time, relaxed).
struct engine_stats {
  /// fi_writemsg calls accepted (one op; it may carry several ranges).
  std::atomic<uint64_t> writes_posted{0};
  /// Ranges those writes carried (blocks, and pieces of blocks split at max_msg_size).
  std::atomic<uint64_t> ranges_posted{0};
  std::atomic<uint64_t> writes_completed{0};
  std::atomic<uint64_t> eagain_retries{0};
  std::atomic<uint64_t> max_in_flight{0};
  /// Error completions that failed only their job (peer kept healthy).
  std::atomic<uint64_t> op_errors{0};
  /// Error completions that marked their peer failed.
  std::atomic<uint64_t> peer_errors{0};
  /// Completions turned into errors by the fault injector.
  std::atomic<uint64_t> injected_errors{0};
};

class engine {
 public:
  enum class role { initiator, target };

  /// Starts the worker on `ep`. `write_timeout` bounds each job from its
  /// submission to its last completion (never forever: after a peer dies tcp
  /// answers -FI_EAGAIN forever).
  /// `faults` (optional, tests and `bench soak`) turns chosen successful
  /// completions into error completions (transport/fabric/fault_injection.hpp).
  static caf::expected<std::unique_ptr<engine>>
  start(std::unique_ptr<endpoint> ep, role r, completion_fn on_done,
        std::chrono::milliseconds write_timeout, std::shared_ptr<fault_injector> faults = nullptr);

  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;
  ~engine();

  /// Fails what is queued (lserr::cancelled) or has writes posted
  /// (lserr::writes_in_flight) and joins the worker; the endpoint closes in
  /// the destructor. Idempotent.
  void stop();

  // Immutable facts of the endpoint (valid until destruction).
  const std::vector<uint8_t>& name() const { return name_; }
  const std::string& provider() const { return provider_; }
  uint64_t max_msg_size() const { return max_msg_size_; }
  uint64_t tx_depth() const { return tx_depth_; }
  uint64_t write_iov_limit() const { return write_iov_limit_; }
  bool virt_addr() const { return virt_addr_; }

  /// Registers local memory (sources: FI_WRITE; targets: FI_REMOTE_WRITE).
  caf::expected<local_registration> register_memory(void* ptr, uint64_t len, uint64_t access);

  /// Makes a peer reachable. The same address and regions give the same
  /// index again (a failed peer stays failed). Other regions at a known
  /// address get a new index on the same AV entry: a decode restarted at the
  /// address of one that failed (a fixed port, or the kernel's pick again)
  /// advertises new regions, and tcp;ofi_rxm, net and sockets reach it on
  /// that entry (its first job lands in milliseconds): test
  /// FabricEngine.ATargetRestartedAtTheAddressOfAFailedOneIsANewHealthyPeer
  caf::expected<peer_index> add_peer(const std::vector<uint8_t>& address,
                                     std::vector<remote_range> regions);

  /// Validates and queues one job: every dst range must lie inside one of
  /// the peer's regions and every src range inside one local registration;
  /// otherwise (or for an unknown or failed peer) the error is returned, NOTHING
  /// is posted and no callback follows. Accepted jobs get exactly one callback.
  caf::error submit(uint64_t id, peer_index peer, block_span blocks);
  caf::error submit(uint64_t id, peer_index peer, const std::vector<block>& blocks) {
    return submit(id, peer, block_span{blocks});
  }

  /// Why `peer` was marked failed (empty while healthy).
  std::string peer_failure(peer_index peer) const;

  const engine_stats& stats() const { return stats_; }

 private:
  struct peer_state;
  struct job;
  struct op;

  engine();
  void run();
  void take_incoming();
  int read_cq();
  int post_ready();
  bool may_take_slot(const peer_state& p) const;
  void check_deadlines(std::chrono::steady_clock::time_point now);
  void finish_jobs();
  void wait_for_work();
  void fail_job(job& j, caf::error err, bool mark_peer);
  void op_failed(op& o, const std::string& text, bool peer_level);
  void error_without_context(const std::string& text);
  void reclaim_unattributed();
  void fail_jobs_in_flight(const std::string& text);
  void mark_failed(peer_state& p, const std::string& why);
  void log_eagain();

  // --- immutable after start ---
  std::string provider_;
  std::vector<uint8_t> name_;
  uint64_t max_msg_size_ = 0;
  uint64_t tx_depth_ = 0;
  uint64_t write_iov_limit_ = 1;
  bool virt_addr_ = false;
  role role_ = role::initiator;
  completion_fn on_done_;
  std::shared_ptr<fault_injector> faults_;
  std::chrono::milliseconds write_timeout_{0};
  int event_fd_ = -1;

  // --- shared: libfabric calls (fabric_mutex_), peer table (tables_mutex_) ---
  std::mutex fabric_mutex_; // lock order: fabric_mutex_ before tables_mutex_
  mutable std::mutex tables_mutex_;
  std::unique_ptr<endpoint> ep_;
  std::vector<std::unique_ptr<peer_state>> peers_; // never shrinks: pointers stay valid

  std::mutex queue_mutex_;
  std::deque<std::unique_ptr<job>> incoming_;
  bool accepting_ = true; // false once the worker drained the queue for the last time
  std::atomic<bool> stop_requested_{false};

  // --- worker thread only ---
  std::deque<std::unique_ptr<job>> active_;
  std::vector<op> ops_;
  std::vector<op*> free_ops_;
  // Scratch for the ranges of the write being posted (write_iov_limit_ each).
  std::vector<iovec> gather_iov_;
  std::vector<void*> gather_desc_;
  std::vector<fi_rma_iov> gather_rma_;
  uint64_t in_flight_ = 0;
  // Error completions with no op_context (shm) not yet matched to their writes.
  uint64_t unattributed_errors_ = 0;
  std::string unattributed_text_;
  bool eagain_ = false;
  uint64_t post_round_ = 0; // post_ready() calls (worker only)
  uint32_t idle_rounds_ = 0;
  uint64_t eagain_since_log_ = 0;
  std::chrono::steady_clock::time_point last_eagain_log_{};
  // Reports read_cq made under the fabric lock, delivered by run() once it
  // is released: on_done_ never runs under fabric_mutex_.
  std::vector<job_result> reports_under_lock_;

  engine_stats stats_;
  std::mutex stop_mutex_;
  std::thread worker_;
};

} // namespace layerstream::fabric
