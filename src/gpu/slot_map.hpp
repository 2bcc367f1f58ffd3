// SlotMap: which logical TPC each physical mask slot of one GPU controls, and
// the conversion from a TpcSet (logical TPCs) to a launch-descriptor mask.
//
// Logical TPC t is the pair of SMs 2t and 2t+1 as %smid numbers them. The
// launch-descriptor mask is indexed by *physical* slot, and the two orders
// differ (on the H100: slot 0 -> TPC 0, slot 1 -> TPC 8, slot 9 -> TPC 1;
// slots 4-8 control nothing). A mask whose enabled slots are all dead hangs
// the launch forever, so mask_for() refuses any set that would produce one.
//
// The map is measured by calibrate() (calibrate.hpp) and cached on disk per
// GPU UUID and driver version in a small line-based text format that the
// interposer can read without any third-party library.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.hpp"
#include "gpu/qmd.hpp"
#include "sched/topology.hpp"
#include "sched/tpc_set.hpp"

namespace lithos::gpu {

struct SlotMap {
  std::string gpu_uuid;        // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  std::string gpu_name;        // "NVIDIA H100 80GB HBM3"
  std::string driver_version;  // kernel driver, e.g. "580.159.04"
  int sm_count = 0;            // SMs of the device (132 on the H100)
  int slot_count = 0;          // mask slots probed: slots >= slot_count are unknown (treated as dead)
  // tpc_of_slot[s] = logical TPC that slot s controls; -1 = dead or not probed.
  std::array<std::int16_t, kMaxSlots> tpc_of_slot = empty_slots();
  // Which live TPCs share a GPC (cluster domains, sched/topology.hpp);
  // unknown (no GPCs) when it was not measured. Measured by
  // gpu/topology_probe.hpp; format version 2 stores it.
  sched::Topology topology;

  static constexpr std::array<std::int16_t, kMaxSlots> empty_slots() {
    std::array<std::int16_t, kMaxSlots> a{};
    a.fill(-1);
    return a;
  }

  // Number of slots that control a TPC.
  int live_tpcs() const;
  // The slot that controls logical TPC `tpc`, if any.
  std::optional<int> slot_of_tpc(int tpc) const;
  // Every logical TPC some slot controls.
  sched::TpcSet live_set() const;

  friend bool operator==(const SlotMap&, const SlotMap&) = default;
};

// The DISABLE mask that lets a launch run on exactly the slots of `tpcs`:
// every other slot (dead ones and slots never probed included) is disabled;
// bits for slots >= 128 do not exist. TPCs of `tpcs` that no slot reaches are
// refused rather than ignored.
//
// Refuses with kInvalidArgument (the message names the live TPC range):
//  - an empty set,
//  - a set naming a TPC that no slot controls (dead, absent, or >= 128),
//  - (so, by construction) any set that would leave no live slot enabled.
// This is the "never emit a mask with no live slot" guarantee.
Result<SlotMask> mask_for(const SlotMap& map, const sched::TpcSet& tpcs);

// Text format, version 2 (one record per line, '#' starts a comment line):
//   lithos-slot-map 2
//   gpu_uuid GPU-...
//   gpu_name NVIDIA H100 80GB HBM3        (rest of the line, may hold spaces)
//   driver_version 580.159.04
//   sm_count 132
//   slot_count 128
//   slot <s> <tpc>                        (one line per live slot, s ascending)
//   gpc <tpcs>                            (one line per GPC, e.g. "gpc 0,8,16,24"; none: unknown)
//   end
// Version 1 (no gpc lines) is still read; its topology is unknown.
// Parsing is strict: unknown keys, duplicates, out-of-range numbers, a TPC
// claimed by two slots, a missing header/trailer, a live TPC >= sm_count/2,
// a GPC naming a TPC no slot controls, or GPCs that overlap are errors
// (kInvalidArgument, with the line number).
std::string slot_map_serialize(const SlotMap& map);
Result<SlotMap> slot_map_parse(std::string_view text);

// The text of a GPU's 16-byte UUID (cuDeviceGetUuid's CUuuid::bytes) as slot
// maps, lithosd and nvidia-smi write it: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
std::string uuid_text(const void* bytes16);

// "<cache_dir>/slot-map-<uuid>-<driver>.txt" (characters other than
// [A-Za-z0-9._-] in uuid/driver become '_').
std::string slot_map_cache_path(std::string_view cache_dir, std::string_view uuid, std::string_view driver);
// kNotFound when the file does not exist; kInvalidArgument when it is malformed.
Result<SlotMap> slot_map_load(const std::string& path);
// A map of the calibration cache: slot_map_load, but only a regular file of
// root or this uid, not reached through a link, in a folder no other user
// can change (ipc/safe_file.hpp; kFailedPrecondition otherwise): a map
// someone else put there would decide where lithos confines launches.
Result<SlotMap> slot_map_load_cached(const std::string& path);
// Writes atomically (a temporary file of an unpredictable name in the same
// directory, then rename), never through a link and only into a folder no
// other user can change (ipc/safe_file.hpp); creates missing parent
// directories (0755).
Status slot_map_save(const std::string& path, const SlotMap& map);

// $LITHOS_CACHE_DIR, else $XDG_CACHE_HOME/lithos, else $HOME/.cache/lithos,
// else "/tmp/lithos-cache" (no HOME). Read on every call (cheap).
std::string default_cache_dir();

}  // namespace lithos::gpu
