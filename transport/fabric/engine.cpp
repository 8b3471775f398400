#include "transport/fabric/engine.hpp"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <utility>

#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "common/log.hpp"
#include "common/trace.hpp"
#include "transport/fabric/fabric_check.hpp"

namespace layerstream::fabric {

namespace {

using clock_type = std::chrono::steady_clock;

// Idle rounds spent yielding before the worker sleeps in poll() while writes
// are in flight: a completion usually arrives within microseconds.
constexpr uint32_t spin_rounds = 200;
// Longest sleep while jobs are active (deadline checks stay timely).
constexpr int active_poll_ms = 5;
// Longest sleep while idle (stop() wakes the worker through the eventfd).
constexpr int idle_poll_ms = 100;
// Without a CQ wait fd (shm, udp) a target sleeps this long between progress
// calls: shm's segmented writes need the target to move data along.
constexpr long no_fd_target_poll_ns = 20'000;
// CQ entries read per fi_cq_read call.
constexpr size_t cq_batch = 64;

std::string cq_error_text(fid_cq* cq, const fi_cq_err_entry& err) {
  // shm reports NEGATIVE err values: normalize before asking for the text.
  const int code = err.err < 0 ? -err.err : err.err;
  std::string text = fi_strerror(code);
  text += " (err " + std::to_string(err.err);
  if (err.prov_errno != 0) {
    char buf[256] = {};
    const char* prov = fi_cq_strerror(cq, err.prov_errno, err.err_data, buf, sizeof(buf));
    text += ", prov_errno " + std::to_string(err.prov_errno);
    if (prov != nullptr && *prov != '\0')
      text += ": " + std::string{prov};
  }
  return text + ")";
}

// Which error completions are the op's own fault (the job fails, the peer
// stays usable) and which mean the peer or connection is broken. Per-op: a
// key, range or protection error a provider attributes to that one write
// (`sockets` reports a bad key as EACCES and keeps working). Everything
// else marks the peer failed, ECANCELED included: tcp/net report both a bad
// key and a dead target as ECANCELED and drop the connection after a bad key
// (TOOLCHAIN.md), so failing closed is the only safe reading there.
bool per_op_error(int err) {
  const int code = err < 0 ? -err : err;
  switch (code) {
  case FI_EACCES:
  case FI_EPERM:
  case FI_EINVAL:
  case FI_EFAULT:
  case FI_EMSGSIZE:
  case FI_EKEYREJECTED:
    return true;
  default:
    return false;
  }
}

} // namespace

struct engine::peer_state {
  std::vector<uint8_t> address;
  std::vector<remote_range> regions;
  fi_addr_t addr = FI_ADDR_UNSPEC;
  // Written once by the worker (reason first, then the flag with release),
  // read by submit() with acquire.
  std::atomic<bool> failed{false};
  std::string reason;
  // The post round in which the provider last answered -FI_EAGAIN for this
  // peer (worker only): its other jobs wait for the next round, other
  // peers' jobs still post in this one.
  uint64_t eagain_round = 0;
  // Write slots its writes hold now (worker only).
  uint64_t in_flight = 0;
};

// One range of a job, already translated to what fi_writemsg takes.
struct pending_write {
  uint64_t src = 0;
  void* desc = nullptr;
  uint64_t remote_addr = 0;
  uint64_t key = 0;
  uint64_t len = 0;
};

struct engine::job {
  uint64_t id = 0;
  peer_index peer_idx = 0;
  peer_state* peer = nullptr;
  std::vector<pending_write> writes;
  // Posting cursor: writes[next] from byte `offset` on is not posted yet.
  size_t next = 0;
  uint64_t offset = 0;
  uint64_t bytes_total = 0;
  uint64_t bytes_done = 0;
  uint64_t in_flight = 0;
  // Steady ns of the CQ read that brought its latest completion: after its
  // last one, when its bytes were known to be at the target.
  int64_t delivered_ns = 0;
  caf::error status;
  bool reported = false;
  // The provider answered -FI_EAGAIN to one of its writes.
  bool saw_eagain = false;
  clock_type::time_point submitted;
  clock_type::time_point deadline;
  bool fully_posted() const { return next == writes.size(); }
  /// Nothing of it is in flight and nothing more will be posted (it is
  /// delivered, or failed with no write out): finish_jobs reports it.
  bool settled() const { return in_flight == 0 && (status || fully_posted()); }
};

// One write in flight. `ctx` comes first: the CQ hands back &ctx, which is
// the op's address (FI_CONTEXT/FI_CONTEXT2 let the provider use that space).
struct engine::op {
  fi_context2 ctx;
  job* owner = nullptr;
  uint64_t len = 0;
};

engine::engine() = default;

caf::expected<std::unique_ptr<engine>> engine::start(std::unique_ptr<endpoint> ep, role r,
                                                     completion_fn on_done,
                                                     std::chrono::milliseconds write_timeout,
                                                     std::shared_ptr<fault_injector> faults) {
  static_assert(offsetof(op, ctx) == 0, "the CQ's op_context must be the op's address");
  if (!ep)
    return make_error(lserr::bad_input, "engine::start: no endpoint");
  std::unique_ptr<engine> self{new engine};
  self->provider_ = ep->provider();
  self->name_ = ep->name();
  self->max_msg_size_ = ep->max_msg_size();
  self->tx_depth_ = ep->tx_depth();
  self->write_iov_limit_ = ep->write_iov_limit();
  self->gather_iov_.resize(self->write_iov_limit_);
  self->gather_desc_.resize(self->write_iov_limit_);
  self->gather_rma_.resize(self->write_iov_limit_);
  self->virt_addr_ = ep->virt_addr();
  self->role_ = r;
  self->on_done_ = std::move(on_done);
  self->faults_ = std::move(faults);
  self->write_timeout_ = write_timeout;
  self->event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (self->event_fd_ < 0)
    return make_error(lserr::fabric_error, std::string{"eventfd: "} + std::strerror(errno));
  self->ops_.resize(self->tx_depth_);
  for (auto& o : self->ops_)
    self->free_ops_.push_back(&o);
  self->ep_ = std::move(ep);
  self->worker_ = std::thread{[p = self.get()] { p->run(); }};
  return self;
}

engine::~engine() {
  stop();
  // Close the fids before the op slots and jobs their contexts point to go.
  ep_.reset();
  if (event_fd_ >= 0)
    ::close(event_fd_);
}

void engine::stop() {
  std::lock_guard<std::mutex> guard{stop_mutex_};
  if (!worker_.joinable())
    return;
  stop_requested_.store(true);
  const uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(event_fd_, &one, sizeof(one));
  worker_.join();
}

caf::expected<local_registration> engine::register_memory(void* ptr, uint64_t len,
                                                          uint64_t access) {
  std::lock_guard<std::mutex> fab{fabric_mutex_};
  std::lock_guard<std::mutex> tables{tables_mutex_};
  if (!ep_)
    return make_error(lserr::cancelled, "register_memory: engine stopped");
  return ep_->register_memory(ptr, len, access);
}

caf::expected<peer_index> engine::add_peer(const std::vector<uint8_t>& address,
                                           std::vector<remote_range> regions) {
  std::lock_guard<std::mutex> fab{fabric_mutex_};
  std::lock_guard<std::mutex> tables{tables_mutex_};
  if (!ep_)
    return make_error(lserr::cancelled, "add_peer: engine stopped");
  fi_addr_t addr = FI_ADDR_UNSPEC;
  for (size_t i = 0; i < peers_.size(); ++i) {
    if (peers_[i]->address != address)
      continue;
    if (peers_[i]->regions == regions)
      return static_cast<peer_index>(i);
    addr = peers_[i]->addr; // same endpoint, other regions: reuse its AV entry
  }
  if (addr == FI_ADDR_UNSPEC) {
    auto inserted = ep_->insert_peer(address);
    if (!inserted)
      return std::move(inserted.error());
    addr = *inserted;
  }
  auto p = std::make_unique<peer_state>();
  p->address = address;
  p->regions = std::move(regions);
  p->addr = addr;
  peers_.push_back(std::move(p));
  return static_cast<peer_index>(peers_.size() - 1);
}

std::string engine::peer_failure(peer_index peer) const {
  std::lock_guard<std::mutex> tables{tables_mutex_};
  if (peer >= peers_.size() || !peers_[peer]->failed.load(std::memory_order_acquire))
    return {};
  return peers_[peer]->reason;
}

caf::error engine::submit(uint64_t id, peer_index peer, block_span blocks) {
  if (role_ != role::initiator)
    return make_error(lserr::bad_input, "submit on a target-progress engine");
  auto j = std::make_unique<job>();
  {
    std::lock_guard<std::mutex> tables{tables_mutex_};
    if (!ep_ || stop_requested_.load())
      return make_error(lserr::cancelled, "submit: engine stopped");
    if (peer >= peers_.size())
      return make_error(lserr::bad_input, "submit: unknown peer " + std::to_string(peer));
    peer_state& p = *peers_[peer];
    if (p.failed.load(std::memory_order_acquire))
      return make_error(lserr::peer_lost, "peer " + std::to_string(peer) +
                                              " failed earlier, writes refused: " + p.reason);
    j->writes.reserve(blocks.size());
    for (size_t i = 0; i < blocks.size(); ++i) {
      const block& b = blocks[i];
      if (b.len == 0)
        continue;
      auto range_text = [&](uint64_t addr) {
        return "block " + std::to_string(i) + " [" + std::to_string(addr) + ", +" +
               std::to_string(b.len) + ")";
      };
      const remote_range* dst = nullptr;
      for (const auto& r : p.regions)
        if (range_contains(r.base, r.length, b.dst, b.len)) {
          dst = &r;
          break;
        }
      if (dst == nullptr)
        return make_error(lserr::out_of_region, range_text(b.dst) +
                                                    " dst lies outside every "
                                                    "region peer " +
                                                    std::to_string(peer) +
                                                    " advertised; nothing of the job was posted");
      const local_registration* src = ep_->find_registration(b.src, b.len);
      if (src == nullptr)
        return make_error(lserr::out_of_region, range_text(b.src) +
                                                    " src lies outside every "
                                                    "local registration; nothing of the job "
                                                    "was posted");
      pending_write w;
      w.src = b.src;
      w.desc = src->desc;
      // FI_MR_VIRT_ADDR: the target's virtual address; otherwise the offset
      // from the start of its registration.
      w.remote_addr = virt_addr_ ? b.dst : b.dst - dst->base;
      w.key = dst->key;
      w.len = b.len;
      j->writes.push_back(w);
      j->bytes_total += b.len;
    }
    j->peer = &p;
  }
  j->id = id;
  j->peer_idx = peer;
  j->submitted = clock_type::now();
  j->deadline = j->submitted + write_timeout_;
  {
    std::lock_guard<std::mutex> queue{queue_mutex_};
    if (!accepting_) // the worker already took its last look at the queue
      return make_error(lserr::cancelled, "submit: engine stopped");
    incoming_.push_back(std::move(j));
  }
  const uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(event_fd_, &one, sizeof(one));
  return {};
}

// --- worker thread ---------------------------------------------------------

void engine::run() {
  while (!stop_requested_.load()) {
    take_incoming();
    int completed = 0;
    int posted = 0;
    {
      std::lock_guard<std::mutex> fab{fabric_mutex_};
      completed = read_cq();
    }
    for (auto& report : reports_under_lock_)
      if (on_done_)
        on_done_(std::move(report));
    reports_under_lock_.clear();
    // Deadlines before posting: a job whose deadline passed while it waited
    // for a write slot fails as never posted, its peer not blamed, instead
    // of getting writes posted now and failing with them in flight.
    check_deadlines(clock_type::now());
    {
      std::lock_guard<std::mutex> fab{fabric_mutex_};
      posted = post_ready();
    }
    finish_jobs();
    if (completed > 0 || posted > 0) {
      idle_rounds_ = 0;
      continue;
    }
    ++idle_rounds_;
    // -FI_EAGAIN: drive progress and retry at once (bounded by job deadlines).
    if (eagain_ || (in_flight_ > 0 && idle_rounds_ < spin_rounds)) {
      sched_yield();
      continue;
    }
    wait_for_work();
  }
  // Shutdown: nothing more is posted or read. Every job still here is
  // reported as cancelled (writes_in_flight if some of its writes were
  // posted: closing the endpoint does not recall what the kernel already
  // holds); fids close in ~engine after the join.
  {
    std::lock_guard<std::mutex> queue{queue_mutex_};
    accepting_ = false;
  }
  take_incoming();
  uint64_t outstanding = 0;
  for (auto& j : active_)
    if (!j->reported)
      outstanding += j->in_flight;
  for (auto& j : active_) {
    if (j->reported)
      continue;
    fail_job(*j,
             make_error(j->in_flight > 0 ? lserr::writes_in_flight : lserr::cancelled,
                        "engine stopped with " + std::to_string(outstanding) +
                            " writes in flight; job had " + std::to_string(j->bytes_done) + " of " +
                            std::to_string(j->bytes_total) + " bytes complete"),
             false);
    j->reported = true;
    if (on_done_)
      on_done_(job_result{j->id, j->status, j->bytes_done});
  }
}

void engine::take_incoming() {
  uint64_t counter = 0;
  [[maybe_unused]] auto n = ::read(event_fd_, &counter, sizeof(counter));
  std::lock_guard<std::mutex> queue{queue_mutex_};
  while (!incoming_.empty()) {
    active_.push_back(std::move(incoming_.front()));
    incoming_.pop_front();
  }
}

int engine::read_cq() {
  fid_cq* cq = ep_->cq_fid();
  int completed = 0;
  fi_cq_entry entries[cq_batch];
  for (int batch = 0; batch < 16; ++batch) {
    const ssize_t n = fi_cq_read(cq, entries, cq_batch);
    if (n > 0) {
      const int64_t read_ns = steady_ns();
      for (ssize_t i = 0; i < n; ++i) {
        if (entries[i].op_context == nullptr)
          continue; // not ours (a target sees none for plain RMA writes)
        op* o = static_cast<op*>(entries[i].op_context);
        job* j = o->owner;
        if (j == nullptr) {
          LS_ERROR("fabric: {} completed a write that is not posted (ignored)", provider_);
          continue;
        }
        if (faults_ && role_ == role::initiator && faults_->fail_completion(j->id)) {
          stats_.injected_errors.fetch_add(1, std::memory_order_relaxed);
          op_failed(*o, "injected CQ error completion (fault injection, per-op)", false);
          continue;
        }
        if (auto lost = (faults_ && role_ == role::initiator)
                            ? faults_->errors_without_context(j->id)
                            : fault_injector::context_less_errors{};
            lost.count > 0) {
          for (unsigned k = 0; k < lost.count; ++k) {
            stats_.injected_errors.fetch_add(1, std::memory_order_relaxed);
            error_without_context(lost.completion_too
                                      ? "injected CQ error completion without its op_context "
                                        "(fault injection, as rxm reports an internal error)"
                                      : "injected CQ error completion without its op_context "
                                        "(fault injection, as shm reports a dead peer's writes)");
          }
          if (!lost.completion_too)
            continue;
        }
        j->in_flight -= 1;
        j->peer->in_flight -= 1;
        j->bytes_done += o->len;
        j->delivered_ns = read_ns;
        o->owner = nullptr;
        free_ops_.push_back(o);
        --in_flight_;
        stats_.writes_completed.fetch_add(1, std::memory_order_relaxed);
      }
      completed += static_cast<int>(n);
      continue;
    }
    if (n == -FI_EAGAIN)
      break;
    if (n != -FI_EAVAIL) {
      LS_ERROR("fabric: fi_cq_read on {}: {} ({})", provider_, strerror_text(n), n);
      break;
    }
    fi_cq_err_entry err{};
    const ssize_t rc = fi_cq_readerr(cq, &err, 0);
    if (rc < 0) {
      if (rc != -FI_EAGAIN)
        LS_ERROR("fabric: fi_cq_readerr on {}: {} ({})", provider_, strerror_text(rc), rc);
      break;
    }
    ++completed;
    const std::string text = cq_error_text(cq, err);
    if (err.op_context == nullptr && role_ == role::initiator) {
      error_without_context(text);
      continue;
    }
    if (role_ == role::target) {
      LS_WARN("fabric: target {} completion error: {}", provider_, text);
      continue;
    }
    auto& failed = *static_cast<op*>(err.op_context);
    if (failed.owner == nullptr) {
      LS_ERROR("fabric: {} failed a write that is not posted (ignored): {}", provider_, text);
      continue;
    }
    op_failed(failed, text, !per_op_error(err.err));
  }
  reclaim_unattributed();
  return completed;
}

// shm reports a failed write with a NULL op_context (TOOLCHAIN.md): which
// write failed, hence which job and peer, is unknown. libfabric gives each
// posted operation exactly one completion, and on shm this CQ carries our
// writes only, so each such entry is the completion of one posted write: the
// writes of healthy peers go on completing normally, and once every posted
// write has completed one way or the other, the writes still posted are
// exactly the failed ones (reclaim_unattributed). Only their jobs and peers
// fail, and their slots come back. Until then a failed write's job waits,
// bounded by its deadline; writes to other peers that never pause keep it
// waiting to that deadline (writes_in_flight), and its slots come back at
// the first moment nothing else is in flight.
//
// That count holds for shm only. Elsewhere an error without context
// cannot be matched to a write: rxm writes such errors for its own
// internal failures (one to the TX and one to the RX CQ, both bound here,
// when its core CQ read or its protocol state fails; one to the TX CQ when
// a credit message fails). Counted as failed writes, two of them would
// fail two healthy writes and free their slots while they are still
// posted, and a slot reused then could credit the old write's completion
// to a new job. So there every job with writes in flight fails at once
// (any of its writes may be lost), and the slots stay with those writes
// until their own completions come.
void engine::error_without_context(const std::string& text) {
  if (!is_shm(provider_)) {
    LS_ERROR("fabric: {} reported an error without context: {}; on this provider it is no "
             "write's completion, so any of the {} writes in flight may be lost",
             provider_, text, in_flight_);
    fail_jobs_in_flight(text);
    return;
  }
  ++unattributed_errors_;
  unattributed_text_ = text;
  LS_ERROR("fabric: {} write failed, completion without context: {} ({} of {} writes in flight "
           "failed, which ones is known once the others complete)",
           provider_, text, unattributed_errors_, in_flight_);
}

void engine::reclaim_unattributed() {
  if (unattributed_errors_ == 0 || unattributed_errors_ < in_flight_)
    return;
  if (unattributed_errors_ > in_flight_) {
    // More failures than writes posted: the one-completion-per-write rule
    // does not hold here, so no write can be matched and no slot is freed
    // on this count.
    LS_ERROR("fabric: {} reported {} failed writes without context, but only {} were in flight; "
             "failing every job with writes in flight",
             provider_, unattributed_errors_, in_flight_);
    fail_jobs_in_flight(unattributed_text_);
    unattributed_errors_ = 0;
    return;
  }
  for (auto& o : ops_)
    if (o.owner != nullptr)
      op_failed(o, unattributed_text_, true);
  unattributed_errors_ = 0;
}

// Every job with writes in flight fails, and its peer with it; its writes
// keep their slots and may still land (writes_in_flight). A completion that
// comes for one of them later is counted for its job, which is already
// answered, and gives the slot back. Called from read_cq only: under the
// fabric lock, so the reports go out through reports_under_lock_.
void engine::fail_jobs_in_flight(const std::string& text) {
  for (auto& j : active_)
    if (!j->reported && j->in_flight > 0) {
      fail_job(*j,
               make_error(lserr::writes_in_flight,
                          std::to_string(j->in_flight) + " writes to peer " +
                              std::to_string(j->peer_idx) + " in flight when " + provider_ +
                              " reported an error without context: " + text),
               true);
      j->reported = true;
      reports_under_lock_.push_back(job_result{j->id, j->status, j->bytes_done});
    }
}

void engine::op_failed(op& o, const std::string& text, bool peer_level) {
  job* j = o.owner;
  j->in_flight -= 1;
  j->peer->in_flight -= 1;
  o.owner = nullptr;
  free_ops_.push_back(&o);
  --in_flight_;
  (peer_level ? stats_.peer_errors : stats_.op_errors).fetch_add(1, std::memory_order_relaxed);
  fail_job(*j,
           make_error(lserr::transfer_failed,
                      "write to peer " + std::to_string(j->peer_idx) + " failed (" + provider_ +
                          ", " + (peer_level ? "peer failure" : "per-op failure") + "): " + text),
           peer_level);
}

int engine::post_ready() {
  eagain_ = false;
  ++post_round_;
  int posted = 0;
  fid_ep* ep = ep_->ep_fid();
  for (auto& jp : active_) {
    job& j = *jp;
    if (j.reported || j.status || j.fully_posted())
      continue;
    if (j.peer->eagain_round == post_round_)
      continue; // its peer's connection is full this round; others may not be
    if (j.peer->failed.load(std::memory_order_acquire)) {
      fail_job(j,
               make_error(lserr::peer_lost,
                          "peer " + std::to_string(j.peer_idx) + " failed: " + j.peer->reason),
               false);
      continue;
    }
    while (!j.fully_posted() && may_take_slot(*j.peer)) {
      // Gather the job's next ranges into one write: up to write_iov_limit_
      // (local iov, rma_iov) pairs, at most max_msg_size_ bytes in all. They
      // all belong to this job (one room, one peer), so a failed write fails
      // only the job that owned every byte of it. The cursor moves only once
      // the provider took the write.
      iovec* iov = gather_iov_.data();
      void** desc = gather_desc_.data();
      fi_rma_iov* rma = gather_rma_.data();
      size_t count = 0;
      size_t next = j.next;
      uint64_t offset = j.offset;
      uint64_t total = 0;
      while (count < write_iov_limit_ && next < j.writes.size() && total < max_msg_size_) {
        const pending_write& w = j.writes[next];
        const uint64_t len = std::min(w.len - offset, max_msg_size_ - total);
        iov[count] = iovec{reinterpret_cast<void*>(w.src + offset), len};
        desc[count] = w.desc;
        rma[count] = fi_rma_iov{w.remote_addr + offset, len, w.key};
        ++count;
        total += len;
        offset += len;
        if (offset == w.len) {
          ++next;
          offset = 0;
        }
      }
      op* o = free_ops_.back();
      fi_msg_rma msg{};
      msg.msg_iov = iov;
      msg.desc = desc;
      msg.iov_count = count;
      msg.addr = j.peer->addr;
      msg.rma_iov = rma;
      msg.rma_iov_count = count;
      msg.context = &o->ctx;
      // FI_DELIVERY_COMPLETE on EVERY op: on tcp/net a plain completion only
      // means "left the initiator" and, after an error on the connection, a
      // later write can be lost while reporting success. With delivery
      // complete each write's own completion says its bytes are in target
      // memory, so a job succeeds only on its own evidence, whatever failed
      // before it on that peer. (Hint op_flags are ignored by `net`.)
      const ssize_t rc = fi_writemsg(ep, &msg, FI_DELIVERY_COMPLETE | FI_COMPLETION);
      if (rc == -FI_EAGAIN) {
        // Only this peer waits: on rxm/tcp a full (or dead) connection
        // answers EAGAIN for itself, and returning here would hold every
        // other peer's jobs behind it until their deadlines.
        eagain_ = true;
        j.saw_eagain = true;
        j.peer->eagain_round = post_round_;
        stats_.eagain_retries.fetch_add(1, std::memory_order_relaxed);
        log_eagain();
        break;
      }
      if (rc != 0) {
        fail_job(j, call_error("fi_writemsg(FI_DELIVERY_COMPLETE)", rc, __FILE__, __LINE__), true);
        break;
      }
      free_ops_.pop_back();
      o->owner = &j;
      o->len = total;
      ++j.in_flight;
      ++j.peer->in_flight;
      ++in_flight_;
      ++posted;
      j.next = next;
      j.offset = offset;
      stats_.ranges_posted.fetch_add(count, std::memory_order_relaxed);
      stats_.writes_posted.fetch_add(1, std::memory_order_relaxed);
      if (in_flight_ > stats_.max_in_flight.load(std::memory_order_relaxed))
        stats_.max_in_flight.store(in_flight_, std::memory_order_relaxed);
    }
    if (free_ops_.empty())
      break;
  }
  return posted;
}

// A peer may hold at most as many write slots as stay free after it takes
// one, and may always take one while it holds none. The slots are shared by
// every peer of the endpoint, and a stalled (not dead) peer's writes hold
// theirs until it makes progress again: without a cap one such peer takes
// them all, and every other peer's jobs time out with "no write slot free".
// With it, one stalled peer holds at most about half, a second a quarter,
// and so on; a peer alone still gets half the TX depth in flight.
bool engine::may_take_slot(const peer_state& p) const {
  const uint64_t free = free_ops_.size();
  return free > 0 && (p.in_flight == 0 || free >= p.in_flight + 2);
}

void engine::check_deadlines(clock_type::time_point now) {
  for (auto& jp : active_) {
    job& j = *jp;
    if (j.reported || now < j.deadline)
      continue;
    // Its last completion (or its failure) came in this round's CQ read:
    // finish_jobs reports it as it is; the deadline passing since is no
    // failure, and must not blame its peer for an EAGAIN seen earlier.
    if (j.settled())
      continue;
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - j.submitted).count();
    // The peer is to blame only if its own writes stalled (in flight, or
    // refused with EAGAIN). A job that never got a write slot (others held
    // them, or its peer had its share) fails, but leaves its peer usable.
    const bool peer_stalled = j.in_flight > 0 || j.saw_eagain;
    // Writes still posted are not revoked: they may land later.
    fail_job(j,
             make_error(
                 j.in_flight > 0 ? lserr::writes_in_flight : lserr::timeout,
                 "write job to peer " + std::to_string(j.peer_idx) + " (" + provider_ +
                     ") not delivery-complete after " + std::to_string(ms) +
                     " ms: " + std::to_string(j.bytes_done) + " of " +
                     std::to_string(j.bytes_total) + " bytes done, " + std::to_string(j.in_flight) +
                     " writes in flight" + (j.saw_eagain ? ", provider answering -FI_EAGAIN" : "") +
                     (peer_stalled ? ""
                                   : ", no write slot free for it (its peer holds " +
                                         std::to_string(j.peer->in_flight) + ", other peers " +
                                         std::to_string(in_flight_ - j.peer->in_flight) + " of " +
                                         std::to_string(tx_depth_) + ")")),
             peer_stalled);
    // Report now; the job object stays (its in-flight ops point to it) until
    // those ops complete or the engine closes.
    j.reported = true;
    if (on_done_)
      on_done_(job_result{j.id, j.status, j.bytes_done});
  }
}

void engine::finish_jobs() {
  for (auto& jp : active_) {
    job& j = *jp;
    if (j.reported || !j.settled())
      continue;
    j.reported = true;
    if (on_done_)
      on_done_(job_result{j.id, j.status, j.bytes_done, j.status ? 0 : j.delivered_ns});
  }
  while (!active_.empty() && active_.front()->reported && active_.front()->in_flight == 0)
    active_.pop_front();
  // Reported jobs further back are dropped once their ops are done, too.
  active_.erase(std::remove_if(
                    active_.begin(), active_.end(),
                    [](const std::unique_ptr<job>& j) { return j->reported && j->in_flight == 0; }),
                active_.end());
}

void engine::wait_for_work() {
  const bool busy = !active_.empty();
  int timeout_ms = busy ? active_poll_ms : idle_poll_ms;
  const int cq_fd = ep_->cq_wait_fd();
  if (cq_fd >= 0) {
    {
      std::lock_guard<std::mutex> fab{fabric_mutex_};
      fid* fids[] = {&ep_->cq_fid()->fid};
      if (fi_trywait(ep_->fabric_fid(), fids, 1) != FI_SUCCESS)
        return; // something is ready: read the CQ again
    }
    pollfd fds[2] = {{cq_fd, POLLIN, 0}, {event_fd_, POLLIN, 0}};
    ::poll(fds, 2, timeout_ms);
    return;
  }
  // No wait fd (shm, udp): sleep briefly on the eventfd, then poll the CQ.
  pollfd fds[1] = {{event_fd_, POLLIN, 0}};
  if (role_ == role::target || busy) {
    timespec ts{0, no_fd_target_poll_ns};
    ::ppoll(fds, 1, &ts, nullptr);
  } else {
    ::poll(fds, 1, std::min(timeout_ms, 1));
  }
}

void engine::fail_job(job& j, caf::error err, bool mark_peer) {
  keep_failure(j.status, std::move(err)); // writes_in_flight wins over an earlier reason
  if (mark_peer)
    mark_failed(*j.peer, describe(j.status));
}

// A peer is marked failed after any write error or deadline: after a peer
// dies tcp answers -FI_EAGAIN forever, so without this every later job to it
// would burn its whole deadline; and a connection that saw an error may drop
// later writes. Its later jobs are refused at submit and its queued jobs fail.
void engine::mark_failed(peer_state& p, const std::string& why) {
  if (p.failed.load(std::memory_order_relaxed))
    return;
  {
    std::lock_guard<std::mutex> tables{tables_mutex_};
    p.reason = why;
  }
  p.failed.store(true, std::memory_order_release);
  LS_WARN("fabric: peer marked failed ({}): {}", provider_, why);
}

void engine::log_eagain() {
  ++eagain_since_log_;
  const auto now = clock_type::now();
  if (now - last_eagain_log_ < std::chrono::seconds{1})
    return;
  if (last_eagain_log_ != clock_type::time_point{})
    LS_DEBUG("fabric: fi_writemsg -FI_EAGAIN x{} on {} ({} writes in flight), driving progress",
             eagain_since_log_, provider_, in_flight_);
  last_eagain_log_ = now;
  eagain_since_log_ = 0;
}

} // namespace layerstream::fabric
