// One libfabric RDM endpoint and everything it needs, with one owner each.
//
// Owns: the fi_info it was opened from, and the fabric, domain, address
// vector, completion queue, endpoint and memory registrations opened from it.
// Order (written down once, here): open() creates them in this order
//   fi_getinfo -> fabric -> domain -> av -> cq -> ep (bind av + cq, enable)
// and register_memory() adds MRs after the ep (FI_MR_ENDPOINT binds them to it).
// The members are declared in that same order, so destruction closes them in
// reverse: MRs, ep, cq, av, domain, fabric, fi_info. Nothing is closed twice and
// a partial open() closes exactly what it opened.
//
// Lifecycle: open() -> register_memory()/insert_peer() -> data path (engine) ->
// destroy. Registered memory must outlive the endpoint.
//
// Threading: NOT thread-safe. The domain is opened with FI_THREAD_DOMAIN: the
// caller serializes every call on one endpoint (the engine does, with its lock).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include "common/error.hpp"

namespace layerstream::fabric {

/// Whether a peer's `address` has the shape an endpoint of address format
/// `format` reads; `local_size` is the length of that endpoint's own name
/// (what a fixed-size format takes). fi_av_insert takes no length: it reads
/// as many bytes as the format says, so a shorter name (from a peer's
/// transfer_info) would be read past its end, and an IP name padded to
/// another size would slip past the net guard's check.
caf::error check_address_shape(uint32_t format, const std::vector<uint8_t>& address,
                               size_t local_size);

/// The libfabric API version asked for, pinned once: Debian's libfabric is
/// 1.17 and answers a newer request with -FI_ENOSYS.
constexpr uint32_t api_version = FI_VERSION(1, 17);

/// Providers tried in this order when the config names none (fastest first).
constexpr const char* auto_providers[] = {"efa", "verbs;ofi_rxm", "tcp;ofi_rxm"};

struct fabric_config {
  /// "tcp;ofi_rxm", "net", "shm", "sockets", "verbs;ofi_rxm", "efa", ...;
  /// empty = the first of auto_providers that fi_getinfo offers.
  std::string provider;
  /// Source address for IP providers (tests: loopback; cluster tests: the
  /// namespace host's address). Ignored by shm, which takes no node.
  std::string bind_address = "127.0.0.1";
  /// Port for IP providers; 0 = any free one (the kernel's pick). Tests set
  /// it to reopen an endpoint at the address a closed one had.
  uint16_t port = 0;
  /// Largest single fi_write posted; 0 = the provider's max_msg_size. Larger
  /// ranges are split (tests set it small to exercise the split).
  uint64_t max_write_size = 0;
  /// Most writes in flight, all peers together; 0 = the provider's TX queue
  /// depth. One peer holds at most half of them (engine::may_take_slot).
  uint64_t max_in_flight = 0;
  /// Most ranges one fi_writemsg carries (local iov and rma_iov pairs); 0 =
  /// the provider's limit (min of tx iov_limit and rma_iov_limit), 1 = one
  /// range per write. Small blocks of one job share a write: fewer ops per
  /// layer where a provider's cost is per op, not per byte. shm is always 1
  /// (endpoint.cpp says why).
  uint64_t max_write_iov = 0;
  /// Ask for FI_HMEM (caps) and FI_MR_HMEM (mr_mode): needed to register
  /// device memory (memory_iface::cuda). A provider that does not offer it
  /// is refused at open(), with the reason; it never falls back silently.
  bool hmem = false;
};

/// Where a registered range lives (fi_mr_attr.iface).
enum class memory_iface {
  host, ///< FI_HMEM_SYSTEM
  cuda, ///< FI_HMEM_CUDA, device memory of CUDA device `device`
};

/// What the data path needs about one local registration.
struct local_registration {
  uint64_t base = 0;
  uint64_t length = 0;
  /// fi_mr_key: what a remote writer puts into fi_rma_iov.key.
  uint64_t key = 0;
  /// fi_mr_desc, passed with local buffers (required under FI_MR_LOCAL).
  void* desc = nullptr;
};

template <class T>
struct fid_closer {
  void operator()(T* p) const noexcept { fi_close(&p->fid); }
};

/// The one owner of a libfabric object.
template <class T>
using fid_ptr = std::unique_ptr<T, fid_closer<T>>;

struct info_deleter {
  void operator()(fi_info* p) const noexcept { fi_freeinfo(p); }
};

class endpoint {
 public:
  /// Sets FI_TCP_IFACE / FI_NET_IFACE / FI_SOCKETS_IFACE to `iface` unless
  /// already set. Call before the first fi_getinfo of the process (tests: "lo").
  static void pin_interface(const char* iface);

  /// Opens everything for `cfg` (see the order above).
  static caf::expected<std::unique_ptr<endpoint>> open(const fabric_config& cfg);

  endpoint(const endpoint&) = delete;
  endpoint& operator=(const endpoint&) = delete;
  ~endpoint();

  /// This endpoint's address (fi_getname bytes), to advertise to peers.
  const std::vector<uint8_t>& name() const { return name_; }
  /// Provider name as fi_getinfo reports it, e.g. "tcp;ofi_rxm".
  const std::string& provider() const { return provider_; }
  /// Largest single write this endpoint posts (config cap applied).
  uint64_t max_msg_size() const { return max_msg_size_; }
  /// Most writes in flight (provider TX size, config cap applied).
  uint64_t tx_depth() const { return tx_depth_; }
  /// Most ranges one write carries (provider iov limits, config cap applied; >= 1).
  uint64_t write_iov_limit() const { return write_iov_limit_; }
  /// The mr_mode bits the provider returned (and that we honour).
  uint64_t mr_mode() const { return mr_mode_; }
  /// FI_MR_VIRT_ADDR: a remote address is a virtual address; otherwise it is
  /// the offset from the start of the target registration.
  bool virt_addr() const { return (mr_mode_ & FI_MR_VIRT_ADDR) != 0; }

  /// FI_HMEM was asked for and granted (fabric_config::hmem).
  bool hmem() const { return hmem_; }

  /// Registers [ptr, ptr + len) with `access` (FI_WRITE for sources,
  /// FI_REMOTE_WRITE for targets) through fi_mr_regattr with `iface`. CUDA
  /// memory needs an endpoint opened with fabric_config::hmem. The endpoint
  /// owns the MR until it closes.
  caf::expected<local_registration> register_memory(void* ptr, uint64_t len, uint64_t access,
                                                    memory_iface iface = memory_iface::host,
                                                    int device = 0);

  /// Inserts a peer's address into the AV.
  caf::expected<fi_addr_t> insert_peer(const std::vector<uint8_t>& address);

  /// The registration containing [addr, addr + len), if any.
  const local_registration* find_registration(uint64_t addr, uint64_t len) const;

  // Raw handles for the engine (the only data-path user).
  fid_fabric* fabric_fid() const { return fabric_.get(); }
  fid_ep* ep_fid() const { return ep_.get(); }
  fid_cq* cq_fid() const { return cq_.get(); }
  /// The CQ's wait fd, or -1 when the provider has none (shm, udp): poll then.
  int cq_wait_fd() const { return cq_wait_fd_; }

 private:
  endpoint() = default;

  // Declaration order = open order; destruction closes in reverse, except
  // that ~endpoint closes ep_ before mrs_ (endpoint.cpp says why).
  std::unique_ptr<fi_info, info_deleter> info_;
  fid_ptr<fid_fabric> fabric_;
  fid_ptr<fid_domain> domain_;
  fid_ptr<fid_av> av_;
  fid_ptr<fid_cq> cq_;
  fid_ptr<fid_ep> ep_;
  std::vector<fid_ptr<fid_mr>> mrs_;

  std::vector<local_registration> registrations_;
  std::vector<uint8_t> name_;
  std::string provider_;
  uint64_t max_msg_size_ = 0;
  uint64_t tx_depth_ = 0;
  uint64_t write_iov_limit_ = 1;
  uint64_t mr_mode_ = 0;
  uint64_t next_key_ = 1;
  int cq_wait_fd_ = -1;
  bool hmem_ = false;
};

/// A short description for logs: provider, mr_mode, depth, max message size.
std::string summary(const endpoint& ep);

/// The shared-memory provider: no node to bind, and a dead peer's writes
/// fail with no op_context (TOOLCHAIN.md).
bool is_shm(const std::string& provider);

/// Whether `cfg`'s provider registers CUDA memory: opens an endpoint with
/// FI_HMEM and registers [ptr, ptr + len) of CUDA device `device` as a write
/// source, then closes both. Asking fi_getinfo is not enough: shm in
/// Debian's libfabric (built without CUDA) advertises FI_HMEM and then
/// cannot register CUDA memory. Returns the reason on failure.
caf::error probe_cuda_registration(fabric_config cfg, void* ptr, uint64_t len, int device);

} // namespace layerstream::fabric
