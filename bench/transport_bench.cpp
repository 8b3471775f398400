#include "bench/transport_bench.hpp"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <nlohmann/json.hpp>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "common/json_file.hpp"
#include "common/log.hpp"
#include "transport/fabric/endpoint.hpp"
#include "transport/fabric/fabric_check.hpp"
#include "transport/transport_actor.hpp"

namespace layerstream {

namespace {

using clock_type = std::chrono::steady_clock;
constexpr auto rep_timeout = std::chrono::seconds{60};

struct result_row {
  std::string provider;
  uint64_t size = 0;
  double raw_gbps = 0;
  double actor_gbps = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

double gbps(uint64_t bytes, clock_type::duration d) {
  return static_cast<double>(bytes) / std::chrono::duration<double>(d).count() / 1e9;
}

/// The plain loop: `count` writes of `size` bytes, at most `window` in
/// flight, each with FI_DELIVERY_COMPLETE, completions read by spinning.
caf::expected<clock_type::duration> raw_rep(fabric::endpoint& ep, fi_addr_t peer,
                                            const fabric::local_registration& src,
                                            const remote_region& dst, uint64_t size, uint64_t count,
                                            uint64_t window) {
  std::vector<fi_context2> ctx(window);
  uint64_t posted = 0, completed = 0;
  fi_cq_entry entries[64];
  const auto start = clock_type::now();
  const auto deadline = start + rep_timeout;
  while (completed < count) {
    while (posted < count && posted - completed < window) {
      iovec iov{reinterpret_cast<void*>(src.base + posted * size), size};
      void* desc = src.desc;
      const uint64_t dst_addr = dst.base + posted * size;
      fi_rma_iov rma{ep.virt_addr() ? dst_addr : dst_addr - dst.base, size, dst.key};
      fi_msg_rma msg{};
      msg.msg_iov = &iov;
      msg.desc = &desc;
      msg.iov_count = 1;
      msg.addr = peer;
      msg.rma_iov = &rma;
      msg.rma_iov_count = 1;
      msg.context = &ctx[posted % window];
      const ssize_t rc = fi_writemsg(ep.ep_fid(), &msg, FI_DELIVERY_COMPLETE | FI_COMPLETION);
      if (rc == -FI_EAGAIN)
        break;
      FI_RETURN_IF_ERROR(rc);
      ++posted;
    }
    const ssize_t n = fi_cq_read(ep.cq_fid(), entries, 64);
    if (n > 0) {
      completed += static_cast<uint64_t>(n);
    } else if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(ep.cq_fid(), &err, 0);
      return make_error(lserr::transfer_failed,
                        "raw write failed: " + fabric::strerror_text(err.err));
    } else if (n != -FI_EAGAIN) {
      FI_RETURN_IF_ERROR(n);
    } else {
      sched_yield(); // let the target's progress thread run (2 cores here), as the engine does
    }
    if (clock_type::now() > deadline)
      return make_error(lserr::timeout, "raw loop repetition timed out");
  }
  return clock_type::now() - start;
}

/// The actor path: `submits` concurrent submits splitting `count` writes.
caf::expected<clock_type::duration> actor_rep(caf::actor_system& sys, const transport_actor& t,
                                              peer_id peer, uint64_t src_base, uint64_t dst_base,
                                              uint64_t size, uint64_t count, uint64_t submits) {
  std::vector<submit> msgs(submits);
  for (uint64_t i = 0; i < count; ++i) {
    auto& m = msgs[i % submits];
    m.room = 1;
    m.layer = static_cast<uint32_t>(i % submits);
    m.peer = peer;
    m.blocks.push_back({src_base + i * size, dst_base + i * size, size});
  }
  caf::scoped_actor self{sys};
  caf::error failure;
  const auto start = clock_type::now();
  for (auto& m : msgs)
    self->send(t, std::move(m)); // answered with submit_done to `self`
  uint64_t answers = 0;
  self->receive_for(answers, submits)(
      [&](submit_done& d) {
        if (d.status && !failure)
          failure = std::move(d.status);
      },
      caf::after(std::chrono::duration_cast<std::chrono::milliseconds>(rep_timeout)) >>
          [&] {
            if (!failure)
              failure = make_error(lserr::timeout, "actor repetition timed out");
          });
  const auto took = clock_type::now() - start;
  if (failure)
    return failure;
  return took;
}

caf::error bench_provider(caf::actor_system& sys, const std::string& provider,
                          const transport_bench_options& opts, std::vector<result_row>& rows) {
  const uint64_t max_size = *std::max_element(opts.sizes.begin(), opts.sizes.end());
  const uint64_t pool = ((opts.bytes_per_rep + max_size - 1) / max_size) * max_size;
  std::vector<uint8_t> src(pool), dst(pool);
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = static_cast<uint8_t>(i * 131 + 7);

  fabric_target::config tcfg;
  tcfg.fabric.provider = provider;
  tcfg.regions = {{dst.data(), dst.size()}};
  auto target = fabric_target::open(tcfg);
  if (!target)
    return std::move(target.error());
  const remote_region& region = (*target)->peer().regions.front();

  fabric::fabric_config raw_cfg;
  raw_cfg.provider = provider;
  auto raw = fabric::endpoint::open(raw_cfg);
  if (!raw)
    return std::move(raw.error());
  auto raw_src = (*raw)->register_memory(src.data(), src.size(), FI_WRITE);
  if (!raw_src)
    return std::move(raw_src.error());
  auto raw_peer = (*raw)->insert_peer((*target)->peer().address);
  if (!raw_peer)
    return std::move(raw_peer.error());

  transport_config acfg;
  acfg.fabric.provider = provider;
  // The engine lets one peer hold at most half of its slots (the rest stay
  // for other peers: engine::may_take_slot), so twice the window gives this
  // one peer the raw loop's window (while 2 x window is within the
  // provider's TX depth, which caps max_in_flight).
  acfg.fabric.max_in_flight = 2 * opts.window;
  acfg.regions = {{src.data(), src.size()}};
  acfg.write_timeout = rep_timeout;
  auto actor = spawn_transport(sys, acfg);
  if (!actor)
    return std::move(actor.error());
  auto stop_actor = [&] { caf::anon_send_exit(*actor, caf::exit_reason::user_shutdown); };
  peer_id peer = 0;
  caf::error err;
  {
    caf::scoped_actor self{sys};
    self->request(*actor, std::chrono::seconds{10}, connect_peer{(*target)->peer()})
        .receive([&](peer_id id) { peer = id; }, [&](caf::error& e) { err = std::move(e); });
  }
  if (err) {
    stop_actor();
    return err;
  }

  const uint64_t src_base = reinterpret_cast<uint64_t>(src.data());
  const uint64_t dst_base = region.base;
  for (uint64_t size : opts.sizes) {
    const uint64_t count = std::max<uint64_t>(1, opts.bytes_per_rep / size);
    const uint64_t bytes = count * size;
    std::vector<double> raw_runs, actor_runs;
    // One warm-up of each path (connection set-up), kept out of the numbers.
    for (int rep = -1; rep < opts.repetitions; ++rep) {
      const bool check = opts.verify && rep == 0;
      if (check)
        std::memset(dst.data(), 0, bytes);
      auto r = raw_rep(**raw, *raw_peer, *raw_src, region, size, count, opts.window);
      if (!r) {
        stop_actor();
        return std::move(r.error());
      }
      if (check && std::memcmp(dst.data(), src.data(), bytes) != 0) {
        stop_actor();
        return make_error(lserr::transfer_failed, "raw loop: target memory differs");
      }
      if (check)
        std::memset(dst.data(), 0, bytes);
      auto a = actor_rep(sys, *actor, peer, src_base, dst_base, size, count,
                         std::min(opts.submits_per_rep, count));
      if (!a) {
        stop_actor();
        return std::move(a.error());
      }
      if (check && std::memcmp(dst.data(), src.data(), bytes) != 0) {
        stop_actor();
        return make_error(lserr::transfer_failed, "actor path: target memory differs");
      }
      if (rep >= 0) {
        raw_runs.push_back(gbps(bytes, *r));
        actor_runs.push_back(gbps(bytes, *a));
      }
    }
    rows.push_back({provider, size, median(raw_runs), median(actor_runs)});
    const auto& row = rows.back();
    std::printf("%-12s %10llu %10.2f %10.2f %7.1f%%\n", provider.c_str(),
                static_cast<unsigned long long>(size), row.raw_gbps, row.actor_gbps,
                row.raw_gbps > 0 ? 100.0 * row.actor_gbps / row.raw_gbps : 0.0);
    std::fflush(stdout);
  }
  stop_actor();
  return {};
}

} // namespace

int run_transport_bench(const transport_bench_options& opts) {
  if (opts.sizes.empty() || opts.window == 0 || opts.repetitions < 1 || opts.submits_per_rep == 0) {
    std::fprintf(stderr, "bench transport: sizes, window, repetitions and submits must be > 0\n");
    return 2; // a usage error, as every command's
  }
  caf::actor_system_config cfg;
  add_message_types(cfg);
  caf::actor_system sys{cfg};
  std::printf("transport bench: %llu MiB per repetition, window %llu, %d interleaved "
              "repetitions, medians, FI_DELIVERY_COMPLETE on every write\n",
              static_cast<unsigned long long>(opts.bytes_per_rep >> 20),
              static_cast<unsigned long long>(opts.window), opts.repetitions);
  std::printf("%-12s %10s %10s %10s %8s\n", "provider", "size", "raw GB/s", "actor GB/s",
              "actor/raw");
  std::vector<result_row> rows;
  int rc = 0;
  for (const auto& provider : opts.providers) {
    if (auto err = bench_provider(sys, provider, opts, rows)) {
      std::fprintf(stderr, "bench transport: %s: %s\n", provider.c_str(), describe(err).c_str());
      if (!is(err, lserr::fabric_error))
        rc = 1; // a missing provider is skipped; a failed write is not
    }
  }
  if (rows.empty() && rc == 0)
    rc = 2;
  if (!opts.json_path.empty()) {
    nlohmann::json out;
    std::string names;
    for (const auto& p : opts.providers)
      names += (names.empty() ? "" : ",") + p;
    out["provider"] = names;
    out["results"] = nlohmann::json::array();
    for (const auto& row : rows)
      out["results"].push_back({{"provider", row.provider},
                                {"size", row.size},
                                {"raw_gbps", row.raw_gbps},
                                {"actor_gbps", row.actor_gbps}});
    if (!write_json_file(opts.json_path, out)) {
      std::fprintf(stderr, "bench transport: cannot write %s\n", opts.json_path.c_str());
      rc = 1;
    }
  }
  return rc;
}

} // namespace layerstream
