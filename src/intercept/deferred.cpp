#include "intercept/deferred.hpp"

#include <pthread.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "intercept/log.hpp"
#include "intercept/real_driver.hpp"

namespace lithos::intercept {

namespace {

thread_local bool t_worker = false;

std::uint64_t now_ns() noexcept {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(t.tv_nsec);
}

// The worker spins this long for the next launch before it sleeps: a
// training step's launches come a few microseconds apart, and a wake-up
// costs more than that.
constexpr std::uint64_t kSpinNs = 200'000;

void relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

void drain_at_exit() { DeferredLaunches::instance().drain(); }

}  // namespace

void DeferredLaunches::configure(bool on, std::uint32_t depth) noexcept {
  depth_ = depth < 1 ? 1 : depth;
  enabled_.store(on, std::memory_order_relaxed);
}

bool DeferredLaunches::start_locked() noexcept {
  if (started_) return true;
  try {
    std::thread(&DeferredLaunches::worker, this).detach();
  } catch (const std::exception& e) {
    LITHOS_LOG(LogLevel::kWarn, "deferred launches: no worker thread (%s): launches are made in place", e.what());
    enabled_.store(false, std::memory_order_relaxed);
    return false;
  }
  started_ = true;
  static std::once_flag once;
  std::call_once(once, [] {
    // A forked child has no worker: it starts with an empty queue, and its
    // launches are not deferred (its daemon client is not connected either).
    pthread_atfork([] { DeferredLaunches::instance().mu_.lock(); }, [] { DeferredLaunches::instance().mu_.unlock(); },
                   [] { DeferredLaunches::instance().after_fork_child(); });
    // Registered after the CUDA runtime's own exit handlers (the first
    // launch came after its initialisation), so it runs before them.
    std::atexit(drain_at_exit);
  });
  return true;
}

void DeferredLaunches::after_fork_child() noexcept {
  // mu_ is held (the prepare handler took it in the parent): reset the state
  // under it, then release.
  queue_.clear();
  started_ = false;
  worker_sleeping_ = false;
  waiters_ = 0;
  done_.store(pushed_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  enabled_.store(false, std::memory_order_relaxed);
  mu_.unlock();
  // The condition variables may hold waiters of the parent's threads.
  new (&work_cv_) std::condition_variable();
  new (&done_cv_) std::condition_variable();
}

bool DeferredLaunches::push(Launch launch, CUctx_st* ctx) noexcept {
  if (!enabled() || t_worker) return false;
  try {
    std::unique_lock<std::mutex> lock(mu_);
    if (!start_locked()) return false;
    if (queue_.size() >= depth_) {
      full_waits_.fetch_add(1, std::memory_order_relaxed);
      ++waiters_;
      done_cv_.wait(lock, [&] { return queue_.size() < depth_; });
      --waiters_;
    }
    queue_.push_back(Item{std::move(launch), ctx});
    const std::uint64_t depth =
        pushed_.fetch_add(1, std::memory_order_acq_rel) + 1 - done_.load(std::memory_order_acquire);
    if (depth > max_depth_.load(std::memory_order_relaxed)) max_depth_.store(depth, std::memory_order_relaxed);
    if (worker_sleeping_) work_cv_.notify_one();
  } catch (...) {
    return false;  // allocation failed: the caller launches in place
  }
  return true;
}

int DeferredLaunches::drain(const char* cause) noexcept {
  if (t_worker) return 0;
  const std::uint64_t target = pushed_.load(std::memory_order_acquire);
  if (done_.load(std::memory_order_acquire) < target) {
    drains_.fetch_add(1, std::memory_order_relaxed);
    const std::uint64_t t0 = now_ns();
    // The last launches are usually being made now: spin a little first.
    while (done_.load(std::memory_order_acquire) < target && now_ns() - t0 < 20'000) relax();
    if (done_.load(std::memory_order_acquire) < target) {
      std::unique_lock<std::mutex> lock(mu_);
      ++waiters_;
      done_cv_.wait(lock, [&] { return done_.load(std::memory_order_acquire) >= target; });
      --waiters_;
    }
    const std::uint64_t waited = now_ns() - t0;
    drain_wait_ns_.fetch_add(waited, std::memory_order_relaxed);
    count_cause(cause, waited);
  }
  return take_error();
}

void DeferredLaunches::count_cause(const char* cause, std::uint64_t wait_ns) noexcept {
  // Lock-free: a slot is claimed by the first cause stored into it; the
  // last slot takes every cause that finds the table full.
  Cause* slot = &causes_[kCauses - 1];
  for (std::size_t i = 0; i + 1 < kCauses; ++i) {
    const char* name = causes_[i].name.load(std::memory_order_acquire);
    if (name == nullptr) {
      const char* expected = nullptr;
      if (causes_[i].name.compare_exchange_strong(expected, cause, std::memory_order_acq_rel) || expected == cause) {
        slot = &causes_[i];
        break;
      }
      name = expected;
    }
    if (name == cause || std::strcmp(name, cause) == 0) {
      slot = &causes_[i];
      break;
    }
  }
  slot->n.fetch_add(1, std::memory_order_relaxed);
  slot->wait_ns.fetch_add(wait_ns, std::memory_order_relaxed);
}

void DeferredLaunches::worker() noexcept {
  t_worker = true;
  const auto set_current = driver().cuCtxSetCurrent;
  CUctx_st* current = nullptr;
  bool have_current = false;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (queue_.empty()) {
      lock.unlock();
      const std::uint64_t t0 = now_ns();
      while (pushed_.load(std::memory_order_acquire) == done_.load(std::memory_order_acquire) &&
             now_ns() - t0 < kSpinNs)
        relax();
      lock.lock();
      while (queue_.empty()) {
        worker_sleeping_ = true;
        work_cv_.wait(lock);
        worker_sleeping_ = false;
      }
    }
    Item item = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    if (item.ctx != nullptr && (!have_current || item.ctx != current) && set_current != nullptr) {
      if (set_current(item.ctx) == 0) {
        current = item.ctx;
        have_current = true;
      }
    }
    int r = 0;
    try {
      r = item.launch();
    } catch (...) {
      r = 999;  // CUDA_ERROR_UNKNOWN: the launch code never throws out of its own catch
    }
    if (r != 0) {
      if (errors_.fetch_add(1, std::memory_order_relaxed) == 0)
        LITHOS_LOG(LogLevel::kWarn, "a deferred launch failed with CUresult %d: the next synchronising call returns it",
                   r);
      int expected = 0;
      first_error_.compare_exchange_strong(expected, r, std::memory_order_acq_rel);
    }
    item.launch = nullptr;  // the copied arguments go before the launch counts as made
    lock.lock();
    done_.fetch_add(1, std::memory_order_acq_rel);
    if (waiters_ > 0) done_cv_.notify_all();
  }
}

DeferredLaunches::Stats DeferredLaunches::stats() const noexcept {
  Stats s;
  s.deferred = pushed_.load(std::memory_order_relaxed);
  s.stream_ops = stream_ops_.load(std::memory_order_relaxed);
  s.inline_made = inline_made_.load(std::memory_order_relaxed);
  s.drains = drains_.load(std::memory_order_relaxed);
  s.drain_wait_ns = drain_wait_ns_.load(std::memory_order_relaxed);
  s.full_waits = full_waits_.load(std::memory_order_relaxed);
  s.max_depth = max_depth_.load(std::memory_order_relaxed);
  s.errors = errors_.load(std::memory_order_relaxed);
  return s;
}

std::string DeferredLaunches::stats_json() const {
  const Stats s = stats();
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"enabled\":%s,\"depth\":%u,\"deferred\":%llu,\"stream_ops\":%llu,\"in_place\":%llu,\"drains\":%llu,"
                "\"drain_wait_us\":%.1f,\"full_waits\":%llu,\"max_depth\":%llu,\"errors\":%llu",
                enabled() ? "true" : "false", depth_, static_cast<unsigned long long>(s.deferred),
                static_cast<unsigned long long>(s.stream_ops), static_cast<unsigned long long>(s.inline_made),
                static_cast<unsigned long long>(s.drains), static_cast<double>(s.drain_wait_ns) / 1000.0,
                static_cast<unsigned long long>(s.full_waits), static_cast<unsigned long long>(s.max_depth),
                static_cast<unsigned long long>(s.errors));
  std::string out(buf);
  // "drained_by": {"cuMemsetD32Async": {"n": 12, "wait_us": 340.5}, ...}
  out += ",\"drained_by\":{";
  bool first = true;
  for (std::size_t i = 0; i < kCauses; ++i) {
    const std::uint64_t n = causes_[i].n.load(std::memory_order_relaxed);
    if (n == 0) continue;
    const char* name = causes_[i].name.load(std::memory_order_acquire);
    if (i + 1 == kCauses || name == nullptr) name = "more causes";
    std::snprintf(buf, sizeof buf, "%s\"%s\":{\"n\":%llu,\"wait_us\":%.1f}", first ? "" : ",", name,
                  static_cast<unsigned long long>(n),
                  static_cast<double>(causes_[i].wait_ns.load(std::memory_order_relaxed)) / 1000.0);
    out += buf;
    first = false;
  }
  out += "}}";
  return out;
}

}  // namespace lithos::intercept
