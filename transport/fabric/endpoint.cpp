#include "transport/fabric/endpoint.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <netinet/in.h>
#include <sys/socket.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include "common/log.hpp"
#include "common/net_guard.hpp"
#include "transport/fabric/fabric_check.hpp"
#include "transport/transfer_plan.hpp"

namespace layerstream::fabric {

caf::error check_address_shape(uint32_t format, const std::vector<uint8_t>& address,
                               size_t local_size) {
  auto refuse = [&](const std::string& why) {
    return make_error(lserr::bad_input, "insert_peer: a fabric address of " +
                                            std::to_string(address.size()) + " bytes " + why);
  };
  switch (format) {
  case FI_SOCKADDR:
  case FI_SOCKADDR_IN:
  case FI_SOCKADDR_IN6: {
    if (address.size() < sizeof(sa_family_t))
      return refuse("is too short for a socket address");
    const int family = fabric_name_family(address);
    const bool v4 = family == AF_INET && format != FI_SOCKADDR_IN6;
    const bool v6 = family == AF_INET6 && format != FI_SOCKADDR_IN;
    if (!v4 && !v6)
      return refuse("has address family " + std::to_string(family) +
                    ", not one this provider's format takes");
    const size_t want = ip_name_size(family);
    if (address.size() != want)
      return refuse("is not a " + std::string{v4 ? "sockaddr_in" : "sockaddr_in6"} + " (" +
                    std::to_string(want) + " bytes)");
    return caf::none;
  }
  case FI_ADDR_STR:
    if (std::find(address.begin(), address.end(), uint8_t{0}) == address.end())
      return refuse("is not a terminated string (FI_ADDR_STR)");
    return caf::none;
  default:
    // A fixed-size format (FI_ADDR_EFA, FI_SOCKADDR_IB, FI_ADDR_PSMX, ...):
    // a peer's name has the size of this endpoint's own.
    if (address.size() != local_size)
      return refuse("is not an address of this provider's format " + std::to_string(format) + " (" +
                    std::to_string(local_size) + " bytes, as this endpoint's own name)");
    return caf::none;
  }
}

namespace {

// What we ask for; what comes back in info->domain_attr->mr_mode is honoured
// (see endpoint::virt_addr, register_memory and the engine's desc handling).
constexpr uint64_t requested_mr_mode =
    FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;

// fi_getinfo for one provider name; FI_MSG is added only if a provider
// refuses RMA alone. Returns the whole list (the caller picks an entry).
caf::expected<std::unique_ptr<fi_info, info_deleter>>
get_info(const std::string& provider, const std::string& bind_address, uint16_t port, bool hmem) {
  for (uint64_t extra_caps : {uint64_t{0}, uint64_t{FI_MSG}}) {
    std::unique_ptr<fi_info, info_deleter> hints{fi_allocinfo()};
    if (!hints)
      return make_error(lserr::fabric_error, "fi_allocinfo returned NULL");
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_RMA | FI_WRITE | FI_REMOTE_WRITE | extra_caps | (hmem ? FI_HMEM : 0);
    // Each op's context is a struct fi_context2 we own, so both modes are fine.
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->mr_mode =
        static_cast<int>(requested_mr_mode | (hmem ? uint64_t{FI_MR_HMEM} : 0));
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->fabric_attr->prov_name = strdup(provider.c_str()); // freed by fi_freeinfo
    const char* node = is_shm(provider) ? nullptr : bind_address.c_str();
    const uint64_t flags = is_shm(provider) ? 0 : FI_SOURCE;
    fi_info* raw = nullptr;
    const std::string service = std::to_string(port);
    const char* service_arg = (is_shm(provider) || port == 0) ? nullptr : service.c_str();
    const int rc = fi_getinfo(api_version, node, service_arg, flags, hints.get(), &raw);
    if (rc == 0)
      return std::unique_ptr<fi_info, info_deleter>{raw};
    if (rc == -FI_ENODATA && extra_caps != 0 && hmem) {
      // Is FI_HMEM what is missing, or the provider or its address itself?
      if (auto plain = get_info(provider, bind_address, port, false); !plain)
        return plain.error();
      return make_error(lserr::fabric_error,
                        "provider \"" + provider +
                            "\" offers no FI_HMEM (device-memory registration); use a provider "
                            "that does, or stage device memory through host memory");
    }
    if (rc != -FI_ENODATA || extra_caps != 0)
      return call_error(("fi_getinfo(provider \"" + provider + "\")").c_str(), rc, __FILE__,
                        __LINE__);
  }
  return make_error(lserr::fabric_error, "unreachable");
}

// The list entry whose provider name is exactly `provider` (fi_getinfo may
// also offer layered variants, e.g. "net;ofi_rxm" for "net"), else the first.
fi_info* pick(fi_info* list, const std::string& provider) {
  for (fi_info* p = list; p != nullptr; p = p->next)
    if (p->fabric_attr->prov_name != nullptr && provider == p->fabric_attr->prov_name)
      return p;
  return list;
}

} // namespace

void endpoint::pin_interface(const char* iface) {
  for (const char* var : {"FI_TCP_IFACE", "FI_NET_IFACE", "FI_SOCKETS_IFACE"})
    setenv(var, iface, /*overwrite=*/0);
}

// Close order as fabtests' ft_close_fids: the endpoint before its memory
// registrations (a provider may still touch an MR for work queued on the
// endpoint), except where MRs are bound to the endpoint (FI_MR_ENDPOINT),
// which close first. The remaining members then close in reverse
// declaration order.
endpoint::~endpoint() {
  if ((mr_mode_ & FI_MR_ENDPOINT) == 0)
    ep_.reset();
  mrs_.clear();
}

caf::expected<std::unique_ptr<endpoint>> endpoint::open(const fabric_config& cfg) {
  // Loopback binds stay on lo; must happen before the process's first fi_getinfo.
  if (cfg.bind_address.rfind("127.", 0) == 0)
    pin_interface("lo");
  std::unique_ptr<endpoint> self{new endpoint};
  // 1. fi_getinfo (the provider from config, or the first auto provider offered).
  std::string provider = cfg.provider;
  caf::expected<std::unique_ptr<fi_info, info_deleter>> list{caf::error{}};
  if (provider.empty()) {
    std::string tried;
    for (const char* candidate : auto_providers) {
      list = get_info(candidate, cfg.bind_address, cfg.port, cfg.hmem);
      if (list) {
        provider = candidate;
        LS_INFO("fabric: no provider configured, picked \"{}\" (tried in order: {}{})", provider,
                tried, candidate);
        break;
      }
      tried += std::string{candidate} + ", ";
    }
    if (!list)
      return make_error(lserr::fabric_error,
                        "no provider configured and fi_getinfo offers none of efa, "
                        "verbs;ofi_rxm, tcp;ofi_rxm: " +
                            layerstream::describe(list.error()));
  } else {
    list = get_info(provider, cfg.bind_address, cfg.port, cfg.hmem);
    if (!list)
      return std::move(list.error());
  }
  fi_info* chosen = pick(list->get(), provider);
  self->info_.reset(fi_dupinfo(chosen));
  if (!self->info_)
    return make_error(lserr::fabric_error, "fi_dupinfo returned NULL");
  fi_info* info = self->info_.get();
  self->provider_ = info->fabric_attr->prov_name;
  self->mr_mode_ = static_cast<uint64_t>(info->domain_attr->mr_mode);
  self->hmem_ = cfg.hmem && (info->caps & FI_HMEM) != 0; // asked for and granted
  if (cfg.hmem && !self->hmem_)
    return make_error(lserr::fabric_error,
                      "provider \"" + self->provider_ + "\" returned an fi_info without FI_HMEM");
  self->max_msg_size_ = info->ep_attr->max_msg_size;
  if (cfg.max_write_size != 0 && cfg.max_write_size < self->max_msg_size_)
    self->max_msg_size_ = cfg.max_write_size;
  self->tx_depth_ = info->tx_attr->size != 0 ? info->tx_attr->size : 64;
  if (cfg.max_in_flight != 0 && cfg.max_in_flight < self->tx_depth_)
    self->tx_depth_ = cfg.max_in_flight;
  // A provider reporting 0 for either limit gets one range per write.
  self->write_iov_limit_ = std::max<uint64_t>(
      1, std::min<uint64_t>(info->tx_attr->iov_limit, info->tx_attr->rma_iov_limit));
  // libfabric 1.17 shm offers 4, but a write of several ranges that goes by
  // its SAR protocol (bounce buffers: an FI_HMEM endpoint, or CMA off) hung
  // until the job's deadline and then crashed inside fi_cq_read, every time
  // under TSan (never in the plain build, even loaded). shm's choice of
  // protocol is invisible from here, so shm carries one range per write.
  if (is_shm(self->provider_))
    self->write_iov_limit_ = 1;
  if (cfg.max_write_iov != 0 && cfg.max_write_iov < self->write_iov_limit_)
    self->write_iov_limit_ = cfg.max_write_iov;

  // 2. fabric, 3. domain.
  fid_fabric* fabric = nullptr;
  FI_RETURN_IF_ERROR(fi_fabric(info->fabric_attr, &fabric, nullptr));
  self->fabric_.reset(fabric);
  fid_domain* domain = nullptr;
  FI_RETURN_IF_ERROR(fi_domain(fabric, info, &domain, nullptr));
  self->domain_.reset(domain);

  // 4. address vector.
  fi_av_attr av_attr{};
  av_attr.type =
      info->domain_attr->av_type != FI_AV_UNSPEC ? info->domain_attr->av_type : FI_AV_TABLE;
  fid_av* av = nullptr;
  FI_RETURN_IF_ERROR(fi_av_open(domain, &av_attr, &av, nullptr));
  self->av_.reset(av);

  // 5. completion queue: with a wait fd where the provider has one (shm
  // refuses FI_WAIT_FD with -FI_ENOSYS; the engine then polls).
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_CONTEXT;
  cq_attr.size = self->tx_depth_ + (info->rx_attr != nullptr ? info->rx_attr->size : 0);
  cq_attr.wait_obj = FI_WAIT_FD;
  fid_cq* cq = nullptr;
  if (fi_cq_open(domain, &cq_attr, &cq, nullptr) != 0) {
    cq_attr.wait_obj = FI_WAIT_NONE;
    FI_RETURN_IF_ERROR(fi_cq_open(domain, &cq_attr, &cq, nullptr));
  }
  self->cq_.reset(cq);
  if (cq_attr.wait_obj == FI_WAIT_FD) {
    int fd = -1;
    if (fi_control(&cq->fid, FI_GETWAIT, &fd) == 0)
      self->cq_wait_fd_ = fd;
  }

  // 6. endpoint: bind AV and CQ, enable, read its name.
  fid_ep* ep = nullptr;
  FI_RETURN_IF_ERROR(fi_endpoint(domain, info, &ep, nullptr));
  self->ep_.reset(ep);
  FI_RETURN_IF_ERROR(fi_ep_bind(ep, &av->fid, 0));
  FI_RETURN_IF_ERROR(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
  FI_RETURN_IF_ERROR(fi_enable(ep));
  size_t name_len = 0;
  std::vector<uint8_t> name(256);
  for (int attempt = 0; attempt < 2; ++attempt) {
    name_len = name.size();
    const int rc = fi_getname(&ep->fid, name.data(), &name_len);
    if (rc == -FI_ETOOSMALL) {
      name.resize(name_len);
      continue;
    }
    FI_RETURN_IF_ERROR(rc);
    break;
  }
  name.resize(name_len);
  self->name_ = std::move(name);
  LS_INFO("fabric: opened {}", summary(*self));
  return self;
}

caf::expected<local_registration> endpoint::register_memory(void* ptr, uint64_t len,
                                                            uint64_t access, memory_iface iface,
                                                            int device) {
  if (ptr == nullptr || len == 0)
    return make_error(lserr::bad_input, "register_memory: empty range");
  if (iface == memory_iface::cuda && !hmem_)
    return make_error(lserr::bad_input, "register_memory: " + std::to_string(len) +
                                            " B of CUDA device " + std::to_string(device) +
                                            " memory on an endpoint opened without FI_HMEM");
  iovec iov{ptr, static_cast<size_t>(len)};
  fi_mr_attr attr{};
  attr.mr_iov = &iov;
  attr.iov_count = 1;
  attr.access = access;
  // Without FI_MR_PROV_KEY the key is ours to choose: a per-endpoint counter.
  attr.requested_key = next_key_++;
  attr.iface = iface == memory_iface::cuda ? FI_HMEM_CUDA : FI_HMEM_SYSTEM;
  attr.device.cuda = device;
  fid_mr* raw = nullptr;
  const int rc = fi_mr_regattr(domain_.get(), &attr, 0, &raw);
  if (rc != 0 && iface == memory_iface::cuda)
    return make_error(lserr::fabric_error,
                      "fi_mr_regattr of " + std::to_string(len) + " B of CUDA device " +
                          std::to_string(device) + " memory (provider " + provider_ +
                          "): " + fi_strerror(-rc) + " (" + std::to_string(rc) + ")");
  FI_RETURN_IF_ERROR(rc);
  fid_ptr<fid_mr> mr{raw};
  if ((mr_mode_ & FI_MR_ENDPOINT) != 0) {
    FI_RETURN_IF_ERROR(fi_mr_bind(raw, &ep_->fid, 0));
    FI_RETURN_IF_ERROR(fi_mr_enable(raw));
  }
  local_registration reg;
  reg.base = reinterpret_cast<uint64_t>(ptr);
  reg.length = len;
  reg.key = fi_mr_key(raw);
  if (reg.key == FI_KEY_NOTAVAIL)
    return make_error(lserr::fabric_error, "fi_mr_key returned FI_KEY_NOTAVAIL");
  reg.desc = fi_mr_desc(raw);
  mrs_.push_back(std::move(mr));
  registrations_.push_back(reg);
  return reg;
}

caf::expected<fi_addr_t> endpoint::insert_peer(const std::vector<uint8_t>& address) {
  if (address.empty())
    return make_error(lserr::bad_input, "insert_peer: empty fabric address");
  if (auto err = check_address_shape(info_->addr_format, address, name_.size()))
    return err;
  fi_addr_t addr = FI_ADDR_UNSPEC;
  const int rc = fi_av_insert(av_.get(), address.data(), 1, &addr, 0, nullptr);
  FI_RETURN_IF_ERROR(rc);
  if (rc != 1 || addr == FI_ADDR_UNSPEC)
    return make_error(lserr::fabric_error,
                      "fi_av_insert inserted " + std::to_string(rc) + " of 1 addresses");
  return addr;
}

const local_registration* endpoint::find_registration(uint64_t addr, uint64_t len) const {
  for (const auto& reg : registrations_)
    if (range_contains(reg.base, reg.length, addr, len))
      return &reg;
  return nullptr;
}

std::string summary(const endpoint& ep) {
  std::string mr;
  const std::pair<uint64_t, const char*> bits[] = {
      {FI_MR_LOCAL, "LOCAL"},       {FI_MR_VIRT_ADDR, "VIRT_ADDR"}, {FI_MR_ALLOCATED, "ALLOCATED"},
      {FI_MR_PROV_KEY, "PROV_KEY"}, {FI_MR_ENDPOINT, "ENDPOINT"},   {FI_MR_HMEM, "HMEM"},
  };
  for (const auto& [bit, text] : bits)
    if ((ep.mr_mode() & bit) != 0)
      mr += (mr.empty() ? "" : "|") + std::string{text};
  return "provider=" + ep.provider() + " mr_mode=" + (mr.empty() ? "0" : mr) +
         " tx_depth=" + std::to_string(ep.tx_depth()) +
         " max_msg_size=" + std::to_string(ep.max_msg_size()) +
         " write_iov=" + std::to_string(ep.write_iov_limit()) +
         " cq_wait_fd=" + (ep.cq_wait_fd() >= 0 ? "yes" : "no") + (ep.hmem() ? " hmem=yes" : "");
}

caf::error probe_cuda_registration(fabric_config cfg, void* ptr, uint64_t len, int device) {
  cfg.hmem = true;
  auto ep = endpoint::open(cfg);
  if (!ep)
    return std::move(ep.error());
  auto reg = (*ep)->register_memory(ptr, len, FI_WRITE, memory_iface::cuda, device);
  if (!reg)
    return std::move(reg.error());
  return caf::error{};
}

bool is_shm(const std::string& provider) {
  return provider == "shm";
}

} // namespace layerstream::fabric
