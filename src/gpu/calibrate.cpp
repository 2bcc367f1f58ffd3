#include "gpu/calibrate.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <iterator>
#include <optional>

namespace lithos::gpu {

namespace {

std::string sms_text(const std::set<int>& sms) {
  std::string out = "{";
  bool first = true;
  for (int sm : sms) {
    if (!first) out += ",";
    out += std::to_string(sm);
    first = false;
  }
  return out + "}";
}

std::set<int> minus(const std::set<int>& a, const std::set<int>& b) {
  std::set<int> out;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::inserter(out, out.end()));
  return out;
}

std::set<int> sms_of_tpc(int tpc) { return {2 * tpc, 2 * tpc + 1}; }

// The TPC whose two SMs are exactly `sms`, if that is what `sms` is.
std::optional<int> as_one_tpc(const std::set<int>& sms) {
  if (sms.size() != 2) return std::nullopt;
  const int lo = *sms.begin();
  if (lo % 2 != 0 || *sms.rbegin() != lo + 1) return std::nullopt;
  return lo / 2;
}

int disabled_count(const SlotMask& m) {
  int n = 0;
  for (std::uint32_t w : m.disable) n += std::popcount(w);
  return n;
}

std::string mask_text(const SlotMask& m) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "disable=";
  for (int w = 3; w >= 0; --w) {
    for (int nib = 7; nib >= 0; --nib) {
      out += kHex[(m.disable[static_cast<std::size_t>(w)] >> (4 * nib)) & 0xFU];
    }
    if (w > 0) out += '_';
  }
  return out;
}

// Emits masks to the probe, refusing any that could hang (see calibrate.hpp).
class MaskGuard {
 public:
  MaskGuard(SmProbe& probe, CalibrateStats& stats) : probe_(probe), stats_(stats) {}

  void allow_bootstrap(bool on) { bootstrap_allowed_ = on; }
  void prove_live(int slot) {
    live_[static_cast<std::size_t>(slot)] = true;
    any_live_ = true;
  }

  Result<std::set<int>> run(const SlotMask& m) {
    bool safe = m == SlotMask::none();
    for (int s = 0; s < kMaxSlots && !safe; ++s) safe = live_[static_cast<std::size_t>(s)] && !m.disabled(s);
    if (!safe && !any_live_ && bootstrap_allowed_ && disabled_count(m) == 1) {
      safe = true;
      ++stats_.bootstrap_masks;
    }
    if (!safe) {
      return Status::internal("calibrate: refusing to emit mask " + mask_text(m) +
                              ": it enables no slot proven live and could hang the GPU");
    }
    ++stats_.launches;
    return probe_.sms_seen(m);
  }

 private:
  SmProbe& probe_;
  CalibrateStats& stats_;
  std::array<bool, kMaxSlots> live_{};
  bool any_live_ = false;
  bool bootstrap_allowed_ = false;
};

SlotMask only_disabled(int slot) {
  SlotMask m;
  m.set_disabled(slot, true);
  return m;
}

SlotMask only_enabled(int a, int b) {
  SlotMask m = SlotMask::all();
  m.set_disabled(a, false);
  m.set_disabled(b, false);
  return m;
}

Status check_within(const std::set<int>& seen, const std::set<int>& baseline, const std::string& what) {
  const std::set<int> extra = minus(seen, baseline);
  if (!extra.empty()) {
    return Status::failed_precondition("calibrate: " + what + " ran on SMs " + sms_text(extra) +
                                       " that the all-slots baseline never used: inconsistent hardware answers");
  }
  return Status::ok();
}

}  // namespace

Result<SlotMap> calibrate(SmProbe& probe, const CalibrateOptions& options, CalibrateStats* stats_out) {
  const auto start = std::chrono::steady_clock::now();
  CalibrateStats stats;
  auto finish = [&] {
    stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (stats_out != nullptr) *stats_out = stats;
  };
  const ProbeInfo info = probe.info();
  if (info.sm_count < 2 || info.sm_count > 2 * sched::kMaxTpcs || info.sm_count % 2 != 0) {
    finish();
    return Status::invalid_argument("calibrate: the device reports " + std::to_string(info.sm_count) +
                                    " SMs; expected an even count in 2-256 (TPCs are pairs of SMs)");
  }
  const int mask_slots = std::clamp(info.mask_slots, 0, kMaxSlots);
  const int slots = options.slot_count > 0 ? options.slot_count : mask_slots;
  if (slots < 1 || slots > mask_slots) {
    finish();
    return Status::invalid_argument("calibrate: slot_count " + std::to_string(slots) + " is outside 1-" +
                                    std::to_string(mask_slots) + " (the descriptor mask width)");
  }
  const int retries = std::max(0, options.retries);
  MaskGuard guard(probe, stats);
  auto fail = [&](Status s) -> Result<SlotMap> {
    finish();
    return s;
  };

  // 1. Baseline: every slot enabled. Retried when an SM got no block.
  std::set<int> baseline;
  for (int attempt = 0; attempt <= retries; ++attempt) {
    if (attempt > 0) ++stats.retried;
    auto seen = guard.run(SlotMask::none());
    if (!seen) return fail(seen.status().with_context("calibrate: baseline launch (all slots enabled)"));
    baseline = std::move(*seen);
    if (static_cast<int>(baseline.size()) == info.sm_count) break;
  }
  for (int sm : baseline) {
    if (sm < 0 || sm >= info.sm_count) {
      return fail(Status::failed_precondition("calibrate: SM id " + std::to_string(sm) + " is outside 0-" +
                                              std::to_string(info.sm_count - 1) +
                                              " (virtual SM ids, e.g. under MPS, cannot be calibrated)"));
    }
  }
  if (static_cast<int>(baseline.size()) != info.sm_count) {
    return fail(Status::failed_precondition("calibrate: with every slot enabled the launch ran on " +
                                            std::to_string(baseline.size()) + " of " + std::to_string(info.sm_count) +
                                            " SMs; missing " +
                                            sms_text(minus(
                                                [&] {
                                                  std::set<int> all;
                                                  for (int i = 0; i < info.sm_count; ++i) all.insert(i);
                                                  return all;
                                                }(),
                                                baseline)) +
                                            " (is the GPU shared or partitioned?)"));
  }
  // A mask bit controls at most one TPC, so with two or more TPCs at least
  // two slots are live and a mask disabling a single slot keeps one enabled.
  if (info.sm_count < 4) {
    return fail(Status::failed_precondition(
        "calibrate: a GPU with a single TPC cannot be calibrated without risking a hang; use the whole GPU"));
  }
  guard.allow_bootstrap(true);

  // 2. Complement pass: disable one slot, see which SMs vanish.
  std::array<int, kMaxSlots> tpc_of{};
  tpc_of.fill(-1);
  std::array<int, sched::kMaxTpcs> slot_of_tpc{};
  slot_of_tpc.fill(-1);
  for (int s = 0; s < slots; ++s) {
    std::optional<int> tpc;
    std::set<int> lost;
    bool consistent = false;
    for (int attempt = 0; attempt <= retries && !consistent; ++attempt) {
      if (attempt > 0) ++stats.retried;
      auto seen = guard.run(only_disabled(s));
      if (!seen) return fail(seen.status().with_context("calibrate: slot " + std::to_string(s) + " disabled"));
      if (Status st = check_within(*seen, baseline, "the launch with slot " + std::to_string(s) + " disabled");
          !st.is_ok()) {
        return fail(st);
      }
      lost = minus(baseline, *seen);
      tpc = as_one_tpc(lost);
      consistent = lost.empty() || (tpc.has_value() && slot_of_tpc[static_cast<std::size_t>(*tpc)] < 0);
    }
    if (!consistent) {
      if (tpc.has_value()) {
        return fail(Status::failed_precondition(
            "calibrate: TPC " + std::to_string(*tpc) + " (SMs " + sms_text(lost) + ") vanishes when slot " +
            std::to_string(slot_of_tpc[static_cast<std::size_t>(*tpc)]) + " or slot " + std::to_string(s) +
            " is disabled: two slots claim the same SMs"));
      }
      return fail(Status::failed_precondition("calibrate: disabling slot " + std::to_string(s) + " removed SMs " +
                                              sms_text(lost) +
                                              ", which is not one TPC (SM pair 2t, 2t+1); unsupported slot layout"));
    }
    if (tpc.has_value()) {
      tpc_of[static_cast<std::size_t>(s)] = *tpc;
      slot_of_tpc[static_cast<std::size_t>(*tpc)] = s;
      guard.prove_live(s);
    }
  }

  // Coverage: every SM of the baseline belongs to exactly one slot.
  std::set<int> covered;
  int live = 0;
  for (int s = 0; s < slots; ++s) {
    const int t = tpc_of[static_cast<std::size_t>(s)];
    if (t < 0) continue;
    ++live;
    covered.insert(2 * t);
    covered.insert(2 * t + 1);
  }
  const std::set<int> never = minus(baseline, covered);
  if (!never.empty()) {
    return fail(Status::failed_precondition("calibrate: SMs " + sms_text(never) + " were never found behind any of " +
                                            std::to_string(slots) + " slots"));
  }
  if (live != info.sm_count / 2) {
    return fail(Status::failed_precondition("calibrate: the map covers " + std::to_string(live) + " TPCs, expected " +
                                            std::to_string(info.sm_count / 2)));
  }

  // 3. Positive pass: each slot beside a proven-live reference slot.
  if (options.verify_positive) {
    int ref = -1, ref2 = -1;
    for (int s = 0; s < slots; ++s) {
      if (tpc_of[static_cast<std::size_t>(s)] < 0) continue;
      if (ref < 0) {
        ref = s;
      } else if (ref2 < 0) {
        ref2 = s;
      }
    }
    auto sms_of_slot = [&](int s) {
      const int t = tpc_of[static_cast<std::size_t>(s)];
      return t < 0 ? std::set<int>{} : sms_of_tpc(t);
    };
    for (int s = 0; s < slots; ++s) {
      const int r = s == ref ? ref2 : ref;
      std::set<int> expected = sms_of_slot(s);
      expected.merge(sms_of_slot(r));
      std::set<int> got;
      bool match = false;
      for (int attempt = 0; attempt <= retries && !match; ++attempt) {
        if (attempt > 0) ++stats.retried;
        auto seen = guard.run(only_enabled(s, r));
        if (!seen) {
          return fail(seen.status().with_context("calibrate: slot " + std::to_string(s) + " beside reference slot " +
                                                 std::to_string(r)));
        }
        got = std::move(*seen);
        match = got == expected;
        // Extra SMs cannot be a missed block: fail at once.
        if (!minus(got, expected).empty()) break;
      }
      if (!match) {
        return fail(Status::failed_precondition("calibrate: slot " + std::to_string(s) + " beside reference slot " +
                                                std::to_string(r) + " ran on SMs " + sms_text(got) + ", expected " +
                                                sms_text(expected) + " from the complement pass"));
      }
    }
  }

  SlotMap map;
  map.gpu_uuid = info.gpu_uuid;
  map.gpu_name = info.gpu_name;
  map.driver_version = info.driver_version;
  map.sm_count = info.sm_count;
  map.slot_count = slots;
  for (int s = 0; s < slots; ++s) {
    map.tpc_of_slot[static_cast<std::size_t>(s)] = static_cast<std::int16_t>(tpc_of[static_cast<std::size_t>(s)]);
  }
  finish();
  return map;
}

std::vector<SlotGroup> slot_groups(const SlotMap& map, int group_size) {
  std::vector<SlotGroup> out;
  if (group_size < 1) return out;
  const int slots = std::clamp(map.slot_count, 0, kMaxSlots);
  for (int first = 0; first < slots; first += group_size) {
    SlotGroup g;
    g.first_slot = first;
    for (int s = first; s < std::min(first + group_size, slots); ++s) {
      const int t = map.tpc_of_slot[static_cast<std::size_t>(s)];
      if (t >= 0) {
        ++g.live;
        g.tpcs.push_back(t);
      }
    }
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace lithos::gpu
