// Micro-benchmarks of the prefill hot paths (Google Benchmark).
//
//   BM_Notifier/<contexts>   cost on the forward thread of one notifier call
//                            (record one event + hand one layer_end to the
//                            drain thread, as the scheduler runs it) with that
//                            many active contexts. Target: < 1 us median and
//                            flat (1024 at most 1.5x the cost of 1).
//   BM_NotifierDirect/<contexts>  the same with the send on the calling thread
//                            (notify_poll_us = 0), for comparison.
//   BM_LayerBlocks/<pages>   one layer's blocks from a precomputed plan whose
//                            runs are 64 pages long: cost follows runs, not pages
//                            (see the runs and ns_per_run counters).
//   BM_LayerBlocksContiguous/<pages>  one run whatever the page count: flat.
//
// Run: build/bench/layerstream_bench --benchmark_repetitions=5
//      --benchmark_report_aggregates_only=true
// Every plan is verified against a naive page-by-page computation before
// timing starts (the data check); a mismatch aborts the benchmark.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>
#include <caf/all.hpp>

#include "actors/manager.hpp"
#include "actors/notifier.hpp"
#include "device/host_event.hpp"

using namespace layerstream;

namespace {

struct bench_config : caf::actor_system_config {
  bench_config() {
    layerstream::add_message_types(*this);
    set("logger.verbosity", caf::atom("quiet"));
  }
};

/// The benchmarks' actor system. main() destroys it before exit: left to
/// static destruction it ran after CAF's own statics were gone and crashed
/// ("corrupted double-linked list"; ASan: SEGV in ~actor_system).
std::unique_ptr<caf::actor_system>& system_slot() {
  static std::unique_ptr<caf::actor_system> sys;
  return sys;
}

caf::actor_system& bench_system() {
  static bench_config cfg;
  auto& sys = system_slot();
  if (!sys)
    sys = std::make_unique<caf::actor_system>(cfg);
  return *sys;
}

/// A transport that must never be reached (contexts in these benchmarks own
/// no pages). The name is a spawn argument: CAF 0.17's spawn of a function
/// without arguments dereferences a null tuple (UBSan reports it).
caf::behavior unreachable_transport(caf::event_based_actor*, const std::string& who) {
  auto fail = [who](room_id room) {
    std::cerr << who << ": unexpected submit for room " << room << "\n";
    std::abort();
  };
  return {
      [fail](submit& msg) -> submit_done {
        fail(msg.room);
        return {};
      },
      [fail](submit_batch& msg) -> submit_batch_done {
        fail(msg.rooms.empty() ? 0 : msg.rooms.front().room);
        return {};
      },
  };
}

void notifier_bench(benchmark::State& state, notifier_options opts,
                    std::chrono::microseconds layer_compute) {
  auto& sys = bench_system();
  const auto contexts = static_cast<room_id>(state.range(0));
  constexpr uint32_t layers = 64;
  auto transport =
      caf::actor_cast<submit_sink>(sys.spawn(unreachable_transport, std::string{"BM_Notifier"}));
  auto mgr = sys.spawn(manager_impl, transport, manager_config{});
  caf::scoped_actor self{sys};
  // One setup per room: one context each (as many forward batches in
  // flight), so the manager's fan-out is as wide as it gets.
  for (room_id r = 0; r < contexts; ++r) {
    request_transfer req;
    req.room = r;
    req.ptrs.src_k.assign(layers, 4096);
    req.ptrs.dst_k.assign(layers, 4096);
    req.ptrs.item_lens.assign(layers, 64);
    setup batch;
    batch.batch.push_back(std::move(req));
    self->request(mgr, std::chrono::seconds(10), std::move(batch))
        .receive(
            [&](const setup_result& res) {
              if (!res.refused.empty())
                state.SkipWithError(describe(res.refused.front().reason).c_str());
            },
            [&](caf::error& err) { state.SkipWithError(describe(err).c_str()); });
  }
  completed_event_source events;
  layer_notifier notify{mgr, events, opts};
  uint32_t layer = 0;
  // Per-call times: Google Benchmark reports means over the iterations, and
  // one preempted call in 500 moves a mean by microseconds.
  std::vector<double> call_ns;
  call_ns.reserve(static_cast<size_t>(state.max_iterations));
  for (auto _ : state) { // NOLINT(clang-analyzer-deadcode.DeadStores): the benchmark loop
    auto t0 = std::chrono::steady_clock::now();
    notify(layer);
    auto t1 = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    call_ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
    layer = (layer + 1) % layers;
    // Untimed: wait until the drain thread (if any) has sent it, then let
    // the manager fan this layer_end out before the next call,
    // so the mailbox does not grow without bound. The manager answers this
    // only after it handled the layer_end (mailboxes are FIFO).
    std::atomic<bool> sent{false};
    notify.then([&sent] { sent.store(true); });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!sent.load()) {
      if (std::chrono::steady_clock::now() > deadline) {
        state.SkipWithError("the drain thread did not send a layer_end within 10 s");
        break;
      }
      std::this_thread::yield();
    }
    self->request(mgr, std::chrono::seconds(10), finish{~room_id{0}})
        .receive([](finish_result&) {}, [](caf::error&) {});
    // Then "compute" for one short layer (spin, as a forward thread would,
    // not sleep) while the contexts take their copies on the other core. The
    // same pause for every N: the call's cost depends on how long the
    // workers were idle before it, so only equal pauses compare fairly.
    auto until = std::chrono::steady_clock::now() + layer_compute;
    while (std::chrono::steady_clock::now() < until)
      benchmark::ClobberMemory();
  }
  std::sort(call_ns.begin(), call_ns.end());
  if (!call_ns.empty()) {
    state.counters["call_ns_p50"] = call_ns[call_ns.size() / 2];
    state.counters["call_ns_p99"] = call_ns[call_ns.size() * 99 / 100];
  }
  auto c = notify.counters();
  state.counters["overflowed"] = static_cast<double>(c.overflowed);
  state.counters["wakeups"] = static_cast<double>(c.wakeups);
  self->send_exit(mgr, caf::exit_reason::user_shutdown);
  self->send_exit(caf::actor_cast<caf::actor>(transport), caf::exit_reason::user_shutdown);
}
// A fixed iteration count: each iteration also waits (untimed) for the fan-out.

// The notifier as the scheduler runs it: offloaded to a drain thread that
// polls every 50 us (transfer.notify_poll_us, the default).
// Between calls the forward thread computes for 1 ms, bench tail's layer.
void BM_Notifier(benchmark::State& state) {
  notifier_options opts;
  opts.poll = std::chrono::microseconds(50);
  notifier_bench(state, opts, std::chrono::microseconds(1000));
}

// The same after 3 ms of compute. The call costs more the longer the forward
// thread ran without it: on this machine's VMs a timer tick (a VM exit)
// leaves the caches and TLB cold, and every line and page the call touches
// is a miss (measured: ~0.1 us after 0.1 ms, ~0.3-0.5 us after 1 ms,
// ~0.8-1.3 us after 3 ms).
void BM_NotifierLongLayer(benchmark::State& state) {
  notifier_options opts;
  opts.poll = std::chrono::microseconds(50);
  notifier_bench(state, opts, std::chrono::microseconds(3000));
}

// For comparison: caf::anon_send on the forward thread (notify_poll_us = 0).
void BM_NotifierDirect(benchmark::State& state) {
  notifier_bench(state, notifier_options{}, std::chrono::microseconds(1000));
}

BENCHMARK(BM_Notifier)->Arg(1)->Arg(64)->Arg(1024)->UseManualTime()->Iterations(500);
BENCHMARK(BM_NotifierLongLayer)->Arg(1)->Arg(64)->Arg(1024)->UseManualTime()->Iterations(500);
BENCHMARK(BM_NotifierDirect)->Arg(1)->Arg(64)->Arg(1024)->UseManualTime()->Iterations(500);

/// `pages` pages in runs of `run_len` (both src and dst jump between runs).
std::pair<std::vector<uint64_t>, std::vector<uint64_t>> make_pages(uint64_t pages,
                                                                   uint64_t run_len) {
  std::vector<uint64_t> src(pages), dst(pages);
  for (uint64_t i = 0; i < pages; ++i) {
    src[i] = (i / run_len) * (run_len + 3) + i % run_len;
    dst[i] = (i / run_len) * (run_len + 7) + i % run_len + 1000;
  }
  return {src, dst};
}

kv_pointers make_pointers(uint32_t layers) {
  kv_pointers p;
  for (uint32_t l = 0; l < layers; ++l) {
    p.src_k.push_back(uint64_t{1} << 40 | uint64_t{l} << 32);
    p.src_v.push_back(uint64_t{2} << 40 | uint64_t{l} << 32);
    p.dst_k.push_back(uint64_t{3} << 40 | uint64_t{l} << 32);
    p.dst_v.push_back(uint64_t{4} << 40 | uint64_t{l} << 32);
  }
  p.item_lens.assign(layers, 4096);
  p.item_lens.resize(2 * size_t{layers}, 2048);
  return p;
}

/// The data check: the plan's blocks cover exactly the pages, one by one.
void verify(const std::vector<block>& blocks, const std::vector<uint64_t>& src,
            const std::vector<uint64_t>& dst, const kv_pointers& p, uint32_t layer) {
  size_t i = 0;
  auto item = p.item_lens[layer];
  for (auto& b : blocks) {
    if (i == src.size()) { // V half
      i = 0;
      item = p.item_lens[p.layers() + layer];
    }
    for (uint64_t off = 0; off < b.len; off += item, ++i) {
      uint64_t base_src =
          i < src.size() && b.src >= p.src_v[layer] ? p.src_v[layer] : p.src_k[layer];
      uint64_t base_dst = b.dst >= p.dst_v[layer] ? p.dst_v[layer] : p.dst_k[layer];
      if (i >= src.size() || b.src + off != base_src + src[i] * item ||
          b.dst + off != base_dst + dst[i] * item) {
        std::cerr << "BM_LayerBlocks: data check failed at page position " << i << "\n";
        std::abort();
      }
    }
  }
}

void run_layer_blocks(benchmark::State& state, uint64_t run_len) {
  const auto pages = static_cast<uint64_t>(state.range(0));
  auto [src, dst] = make_pages(pages, run_len);
  auto ptrs = make_pointers(4);
  auto plan = make_transfer_plan(src, dst);
  if (!plan) {
    state.SkipWithError(describe(plan.error()).c_str());
    return;
  }
  std::vector<block> out;
  if (auto err = append_layer_blocks(*plan, ptrs, 2, out)) {
    state.SkipWithError(describe(err).c_str());
    return;
  }
  verify(out, src, dst, ptrs, 2);
  for (auto _ : state) { // NOLINT(clang-analyzer-deadcode.DeadStores): the benchmark loop
    out.clear();
    auto err = append_layer_blocks(*plan, ptrs, 2, out);
    benchmark::DoNotOptimize(err);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["runs"] = static_cast<double>(plan->runs.size());
  state.counters["ns_per_run"] = benchmark::Counter(
      static_cast<double>(plan->runs.size()) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_LayerBlocks(benchmark::State& state) {
  run_layer_blocks(state, 64);
}
BENCHMARK(BM_LayerBlocks)->Arg(1)->Arg(1024)->Arg(int64_t{128} * 1024);

void BM_LayerBlocksContiguous(benchmark::State& state) {
  run_layer_blocks(state, ~uint64_t{0});
}
BENCHMARK(BM_LayerBlocksContiguous)->Arg(1)->Arg(1024)->Arg(int64_t{128} * 1024);

} // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv))
    return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  system_slot().reset(); // waits for the benchmarks' actors, which all got an exit
  return 0;
}
