#include "gpu/slot_map.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <tuple>

#include "h100_fixture.hpp"

namespace lithos::gpu {
namespace {

using sched::TpcSet;
using testing::h100_slot_map;

TEST(H100Fixture, MatchesTheMeasuredFacts) {
  const SlotMap m = h100_slot_map();
  EXPECT_EQ(m.live_tpcs(), 66);
  EXPECT_EQ(m.live_set(), TpcSet::first(66));
  // Stated in h100-facts.md §1 (slot -> first SM / 2).
  const std::pair<int, int> stated[] = {{0, 0},  {1, 8},   {2, 16}, {3, 24},  {9, 1},
                                        {10, 9}, {62, 60}, {63, 7}, {64, 15}, {71, 61}};
  for (auto [slot, tpc] : stated) EXPECT_EQ(m.tpc_of_slot[static_cast<std::size_t>(slot)], tpc) << slot;
  for (int dead : {4, 5, 6, 7, 8, 17, 26, 35, 44, 53}) EXPECT_EQ(m.tpc_of_slot[static_cast<std::size_t>(dead)], -1);
  int below72 = 0;
  for (int s = 0; s < 72; ++s) below72 += m.tpc_of_slot[static_cast<std::size_t>(s)] >= 0 ? 1 : 0;
  EXPECT_EQ(below72, 62);
  for (int t = 62; t < 66; ++t) EXPECT_GE(*m.slot_of_tpc(t), 72);
  // Measured by `lithos calibrate` on the H100 (docs/gpu.md).
  EXPECT_EQ(m.slot_of_tpc(62), 75);
  EXPECT_EQ(m.slot_of_tpc(63), 78);
  EXPECT_EQ(m.slot_of_tpc(64), 81);
  EXPECT_EQ(m.slot_of_tpc(65), 83);
}

TEST(H100Fixture, EqualsTheMapMeasuredOnTheH100) {
  auto measured = slot_map_load(LITHOS_GPU_TEST_DATA "/h100-slot-map-2026-11-21.txt");
  if (measured.status().code() == StatusCode::kNotFound) GTEST_SKIP() << "test data not on this machine";
  ASSERT_TRUE(measured.is_ok()) << measured.status().to_string();
  EXPECT_EQ(measured->tpc_of_slot, h100_slot_map().tpc_of_slot);
  EXPECT_EQ(measured->sm_count, 132);
  EXPECT_EQ(measured->driver_version, "580.159.04");
  EXPECT_FALSE(measured->topology.known());  // format 1: no topology
}

TEST(SlotMapQueries, SlotOfTpcAndLiveSet) {
  const SlotMap m = h100_slot_map();
  EXPECT_EQ(m.slot_of_tpc(0), 0);
  EXPECT_EQ(m.slot_of_tpc(8), 1);
  EXPECT_EQ(m.slot_of_tpc(1), 9);
  EXPECT_EQ(m.slot_of_tpc(66), std::nullopt);
  EXPECT_EQ(m.slot_of_tpc(-1), std::nullopt);
  EXPECT_EQ(SlotMap{}.live_tpcs(), 0);
  EXPECT_TRUE(SlotMap{}.live_set().empty());
}

int enabled_count(const SlotMask& m) {
  int n = 0;
  for (int s = 0; s < kMaxSlots; ++s) n += m.disabled(s) ? 0 : 1;
  return n;
}

TEST(MaskFor, EnablesExactlyTheSlotsOfTheSet) {
  const SlotMap m = h100_slot_map();
  auto mask = mask_for(m, TpcSet::parse("0,1,8").value());
  ASSERT_TRUE(mask.is_ok()) << mask.status().to_string();
  EXPECT_EQ(enabled_count(*mask), 3);
  EXPECT_FALSE(mask->disabled(0));  // TPC 0
  EXPECT_FALSE(mask->disabled(9));  // TPC 1
  EXPECT_FALSE(mask->disabled(1));  // TPC 8
  EXPECT_TRUE(mask->disabled(2));
  EXPECT_TRUE(mask->disabled(4));  // dead slots stay disabled
}

TEST(MaskFor, DeadAndUnprobedSlotsAreAlwaysDisabled) {
  const SlotMap m = h100_slot_map();
  auto mask = mask_for(m, TpcSet::first(66));
  ASSERT_TRUE(mask.is_ok());
  EXPECT_EQ(enabled_count(*mask), 66);
  for (int s = 0; s < kMaxSlots; ++s) {
    EXPECT_EQ(mask->disabled(s), m.tpc_of_slot[static_cast<std::size_t>(s)] < 0) << "slot " << s;
  }
  // Word 2 holds slots 64-95: 64-71 (group 7) and 75, 78, 81, 83 enabled.
  EXPECT_EQ(mask->disable[2], ~(0xFFU | (1U << 11) | (1U << 14) | (1U << 17) | (1U << 19)));
  EXPECT_EQ(mask->disable[3], 0xFFFFFFFFU);
}

TEST(MaskFor, TpcsAboveSlot71UseWordTwo) {
  const SlotMap m = h100_slot_map();
  auto mask = mask_for(m, TpcSet::range(62, 66));
  ASSERT_TRUE(mask.is_ok());
  EXPECT_EQ(mask->disable[0], 0xFFFFFFFFU);
  EXPECT_EQ(mask->disable[1], 0xFFFFFFFFU);
  // Slots 75, 78, 81, 83 = word 2 bits 11, 14, 17, 19.
  EXPECT_EQ(mask->disable[2], ~((1U << 11) | (1U << 14) | (1U << 17) | (1U << 19)));
  EXPECT_EQ(mask->disable[3], 0xFFFFFFFFU);
}

TEST(MaskFor, RefusesEmptySets) {
  const auto r = mask_for(h100_slot_map(), TpcSet{});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("0-65"), std::string::npos) << r.status().message();
}

TEST(MaskFor, RefusesSetsWithoutLiveTpcs) {
  const SlotMap m = h100_slot_map();
  for (const char* text : {"66", "66-127", "100", "127"}) {
    const auto r = mask_for(m, TpcSet::parse(text).value());
    ASSERT_FALSE(r.is_ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("live TPCs"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("0-65"), std::string::npos) << r.status().message();
  }
}

TEST(MaskFor, RefusesSetsNamingAnyUnreachableTpc) {
  // A set with live TPCs and one unreachable TPC is refused, not trimmed: the
  // caller asked for something this GPU does not have.
  const auto r = mask_for(h100_slot_map(), TpcSet::parse("0-3,70").value());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("70"), std::string::npos);
}

TEST(MaskFor, AnUncalibratedMapRefusesEverything) {
  const auto r = mask_for(SlotMap{}, TpcSet::first(66));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("calibrate"), std::string::npos) << r.status().message();
}

TEST(MaskFor, NeverEmitsAMaskWithoutALiveSlot) {
  // Every accepted single-TPC set enables exactly its slot, which is live.
  const SlotMap m = h100_slot_map();
  for (int t = 0; t < sched::kMaxTpcs; ++t) {
    TpcSet s;
    s.set(t);
    const auto r = mask_for(m, s);
    if (t < 66) {
      ASSERT_TRUE(r.is_ok()) << t;
      EXPECT_EQ(enabled_count(*r), 1);
      EXPECT_FALSE(r->disabled(*m.slot_of_tpc(t)));
    } else {
      EXPECT_FALSE(r.is_ok()) << t;
    }
  }
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  const auto pos = s.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  if (pos != std::string::npos) s.replace(pos, from.size(), to);
  return s;
}

TEST(SlotMapText, RoundTrips) {
  const SlotMap m = h100_slot_map();
  const std::string text = slot_map_serialize(m);
  EXPECT_EQ(text.rfind("lithos-slot-map 2\n", 0), 0U);
  auto back = slot_map_parse(text);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(*back, m);
  EXPECT_EQ(slot_map_serialize(*back), text);
}

TEST(SlotMapText, RoundTripsTheTopology) {
  SlotMap m = h100_slot_map();
  m.topology = testing::h100_topology();
  const std::string text = slot_map_serialize(m);
  EXPECT_EQ(text.rfind("lithos-slot-map 2\n", 0), 0U);
  EXPECT_NE(text.find("\nslot 83 65\ngpc 0,8,16,24\ngpc 1,9,17,25,32,39,46,53\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\ngpc 7,15,23,31,38,45,52,59,61\ngpc 62\ngpc 63\ngpc 64\ngpc 65\nend\n"), std::string::npos)
      << text;
  auto back = slot_map_parse(text);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(*back, m);
  EXPECT_EQ(back->topology.count(), 12);
  EXPECT_EQ(slot_map_serialize(*back), text);
  // Without a topology, version 2 has no gpc lines and reads back unknown.
  auto plain = slot_map_parse(slot_map_serialize(h100_slot_map()));
  ASSERT_TRUE(plain.is_ok());
  EXPECT_FALSE(plain->topology.known());
}

TEST(SlotMapText, Version1IsReadWithAnUnknownTopology) {
  const std::string v1 = replace(slot_map_serialize(h100_slot_map()), "lithos-slot-map 2", "lithos-slot-map 1");
  auto m = slot_map_parse(v1);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->tpc_of_slot, h100_slot_map().tpc_of_slot);
  EXPECT_FALSE(m->topology.known());
  // Written back, it becomes version 2.
  EXPECT_EQ(slot_map_serialize(*m).rfind("lithos-slot-map 2\n", 0), 0U);
}

TEST(SlotMapText, MalformedGpcLinesAreRejectedWithTheirLineNumber) {
  // The H100 map without a topology: 6 header lines, 66 slot lines, "end"
  // on line 73. Each case puts gpc lines before "end", so the first of them
  // is line 73.
  const std::string good = slot_map_serialize(h100_slot_map());
  ASSERT_EQ(std::count(good.begin(), good.end(), '\n'), 73);
  auto with = [&](const std::string& lines) { return replace(good, "end\n", lines + "end\n"); };
  std::string many;
  for (int t = 0; t < 33; ++t) many += "gpc " + std::to_string(t) + "\n";
  const std::tuple<std::string, std::string, int> cases[] = {
      {replace(with("gpc 0\n"), "lithos-slot-map 2", "lithos-slot-map 1"), "need format version 2", 73},
      {with("gpc\n"), "at least one TPC", 73},
      {with("gpc \n"), "at least one TPC", 73},
      {with("gpc 0-3x\n"), "gpc: ", 73},
      {with("gpc 200\n"), "gpc: ", 73},
      {with("gpc 0,8\ngpc 1\ngpc 66\n"), "66 are controlled by no slot", 73},
      {with("gpc 0,8\ngpc 8,16\n"), "shares TPCs", 73},
      {with("gpc 0\ngpc 1\ngpc x\n"), "gpc: ", 75},
      {with(many), "more than 32 GPCs", 105},
  };
  for (const auto& [text, needle, line] : cases) {
    const auto r = slot_map_parse(text);
    ASSERT_FALSE(r.is_ok()) << "accepted input expected to fail with '" << needle << "'";
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(needle), std::string::npos)
        << "message '" << r.status().message() << "' lacks '" << needle << "'";
    const std::string at = "line " + std::to_string(line) + ":";
    EXPECT_NE(r.status().message().find(at), std::string::npos)
        << "message '" << r.status().message() << "' lacks '" << at << "'";
  }
}

TEST(SlotMapText, AcceptsCommentsBlankLinesAndCrlf) {
  std::string text = "# cached by lithos\n\n" + slot_map_serialize(h100_slot_map());
  std::string crlf;
  for (char c : text) {
    if (c == '\n') crlf += '\r';
    crlf += c;
  }
  auto back = slot_map_parse(crlf);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->live_tpcs(), 66);
}

TEST(SlotMapText, MalformedInputIsAnError) {
  const std::string good = slot_map_serialize(h100_slot_map());
  const std::pair<std::string, std::string> cases[] = {
      {"", "empty"},
      {"hello\n", "not a lithos slot map"},
      {replace(good, "lithos-slot-map 2", "lithos-slot-map 3"), "format version"},
      {replace(good, "end\n", ""), "truncated"},
      {good + "slot 90 5\n", "after 'end'"},
      {replace(good, "sm_count 132", "sm_count many"), "sm_count"},
      {replace(good, "sm_count 132", "sm_count 1000"), "sm_count"},
      {replace(good, "slot_count 128", "slot_count 129"), "slot_count"},
      {replace(good, "slot 0 0\n", "slot 0 0\nslot 0 1\n"), "listed twice"},
      {replace(good, "slot 1 8\n", "slot 1 0\n"), "claimed by two slots"},
      {replace(good, "slot 0 0\n", "slot 0 70\n"), "does not exist"},
      {replace(good, "slot 0 0\n", "slot 0\n"), "expected 'slot <slot> <tpc>'"},
      {replace(good, "slot 0 0\n", "slot 200 0\n"), "outside 0-127"},
      {replace(good, "slot 0 0\n", "slot 0 -1\n"), "outside 0-127"},
      {replace(good, "gpu_name", "gpu_label"), "unknown key"},
      {replace(good, "sm_count 132\n", "sm_count 132\nsm_count 132\n"), "duplicate"},
      {replace(good, "driver_version 580.159.04\n", ""), "lacks"},
      {replace(good, "gpu_uuid GPU-", "gpu_uuid G PU-"), "one non-empty word"},
      {replace(good, "slot_count 128", "slot_count 72"), "beyond slot_count"},
  };
  for (const auto& [text, needle] : cases) {
    const auto r = slot_map_parse(text);
    ASSERT_FALSE(r.is_ok()) << "accepted input expected to fail with '" << needle << "'";
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(needle), std::string::npos)
        << "message '" << r.status().message() << "' lacks '" << needle << "'";
  }
}

TEST(SlotMapText, AMapWithNoLiveSlotIsAnError) {
  SlotMap m = h100_slot_map();
  m.tpc_of_slot = SlotMap::empty_slots();
  const auto r = slot_map_parse(slot_map_serialize(m));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("no live slot"), std::string::npos);
}

TEST(SlotMapText, ErrorsNameTheLine) {
  const std::string text = replace(slot_map_serialize(h100_slot_map()), "sm_count 132", "sm_count x");
  const auto r = slot_map_parse(text);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("line 5"), std::string::npos) << r.status().message();
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/lithos-gpu-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }
  std::string dir_;
};

TEST(SlotMapCache, PathSanitizesUuidAndDriver) {
  EXPECT_EQ(slot_map_cache_path("/c", "GPU-ab/cd", "580.159.04"), "/c/slot-map-GPU-ab_cd-580.159.04.txt");
  EXPECT_EQ(slot_map_cache_path("/c/", "x y", ""), "/c/slot-map-x_y-unknown.txt");
  EXPECT_EQ(slot_map_cache_path("", "u", "d"), "./slot-map-u-d.txt");
}

using SlotMapFiles = TempDir;

TEST_F(SlotMapFiles, SaveCreatesDirectoriesAndLoadReadsItBack) {
  const SlotMap m = h100_slot_map();
  const std::string path = slot_map_cache_path(dir_ + "/a/b", m.gpu_uuid, m.driver_version);
  ASSERT_TRUE(slot_map_save(path, m).is_ok());
  auto back = slot_map_load(path);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(*back, m);
  // No temporary file is left behind.
  std::string listing;
  FILE* p = ::popen(("ls -A '" + dir_ + "/a/b'").c_str(), "r");
  char buf[512];
  while (p != nullptr && std::fgets(buf, sizeof buf, p) != nullptr) listing += buf;
  if (p != nullptr) ::pclose(p);
  EXPECT_EQ(listing, "slot-map-GPU-00000000-1111-2222-3333-444444444444-580.159.04.txt\n");
}

TEST_F(SlotMapFiles, SaveReplacesAnExistingFile) {
  SlotMap m = h100_slot_map();
  const std::string path = dir_ + "/map.txt";
  ASSERT_TRUE(slot_map_save(path, m).is_ok());
  m.gpu_name = "renamed";
  ASSERT_TRUE(slot_map_save(path, m).is_ok());
  EXPECT_EQ(slot_map_load(path)->gpu_name, "renamed");
}

TEST_F(SlotMapFiles, LoadErrors) {
  EXPECT_EQ(slot_map_load(dir_ + "/absent.txt").status().code(), StatusCode::kNotFound);
  const std::string bad = dir_ + "/bad.txt";
  std::ofstream(bad) << "lithos-slot-map 1\ngpu_uuid x\n";
  const auto r = slot_map_load(bad);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(bad), std::string::npos);
}

TEST_F(SlotMapFiles, SaveToAnUnwritablePlaceIsAnError) {
  const std::string file = dir_ + "/file";
  std::ofstream(file) << "x";
  const Status s = slot_map_save(file + "/sub/map.txt", h100_slot_map());
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find(file + " is not a folder"), std::string::npos) << s.message();
}

// The calibration cache is written by lithosd's calibration child, as root:
// never through a link planted at the map's name, never into a folder others
// can write, and a map behind a link is not loaded from the cache.
TEST_F(SlotMapFiles, TheCacheIsNeverWrittenOrReadThroughALink) {
  const std::string victim = dir_ + "/victim";
  std::ofstream(victim) << "precious\n";
  const std::string map = dir_ + "/slot-map-x.txt";
  ASSERT_EQ(::symlink(victim.c_str(), map.c_str()), 0);
  const Status s = slot_map_save(map, h100_slot_map());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.to_string();
  std::ifstream in(victim);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "precious");
  EXPECT_EQ(slot_map_load_cached(map).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_EQ(::unlink(map.c_str()), 0);
  ASSERT_TRUE(slot_map_save(map, h100_slot_map()).is_ok());
  EXPECT_TRUE(slot_map_load_cached(map).is_ok());
  EXPECT_EQ(slot_map_load_cached(dir_ + "/none.txt").status().code(), StatusCode::kNotFound);
  const std::string open = dir_ + "/open";
  ASSERT_EQ(::mkdir(open.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open.c_str(), 0777), 0);
  EXPECT_EQ(slot_map_save(open + "/m.txt", h100_slot_map()).code(), StatusCode::kFailedPrecondition);
}

TEST(DefaultCacheDir, FollowsTheEnvironment) {
  const char* saved[3] = {std::getenv("LITHOS_CACHE_DIR"), std::getenv("XDG_CACHE_HOME"), std::getenv("HOME")};
  const std::string keep[3] = {saved[0] ? saved[0] : "", saved[1] ? saved[1] : "", saved[2] ? saved[2] : ""};
  ::setenv("LITHOS_CACHE_DIR", "/x/lithos", 1);
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  ::setenv("HOME", "/home/u", 1);
  EXPECT_EQ(default_cache_dir(), "/x/lithos");
  ::unsetenv("LITHOS_CACHE_DIR");
  EXPECT_EQ(default_cache_dir(), "/xdg/lithos");
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(default_cache_dir(), "/home/u/.cache/lithos");
  ::unsetenv("HOME");
  EXPECT_EQ(default_cache_dir(), "/tmp/lithos-cache");
  const char* names[3] = {"LITHOS_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
  for (int i = 0; i < 3; ++i) {
    if (saved[i] != nullptr) ::setenv(names[i], keep[i].c_str(), 1);
  }
}

// The UUID text every part compares (slot maps, the interposer's device
// check, lithosd's Welcome::gpu): nvidia-smi's form, lower-case hex.
TEST(UuidText, IsNvidiaSmisForm) {
  const unsigned char b[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                               0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};
  EXPECT_EQ(uuid_text(b), "GPU-00112233-4455-6677-8899-aabbccddeeff");
  const unsigned char z[16] = {};
  EXPECT_EQ(uuid_text(z), "GPU-00000000-0000-0000-0000-000000000000");
}

}  // namespace
}  // namespace lithos::gpu
