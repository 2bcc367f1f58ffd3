// validate_hello and SubmitValidator: every rule, once accepted and once
// rejected, with the message naming the field and the bad value.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "ipc/validate.hpp"

namespace lithos::ipc {
namespace {

// Expects a kInvalidArgument whose message contains every one of `parts`.
void expect_rejected(const Status& s, std::initializer_list<const char*> parts) {
  ASSERT_FALSE(s.is_ok()) << "accepted";
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  for (const char* p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << s.message() << " lacks " << p;
}

// ---- Hello ------------------------------------------------------------------

TEST(IpcValidateHello, AcceptsDefaultsAndBothKinds) {
  Hello h;
  std::strcpy(h.tenant, "inference");
  std::strcpy(h.program, "python3");
  EXPECT_TRUE(validate_hello(h).is_ok());
  h.kind = HelloKind::kStatus;
  EXPECT_TRUE(validate_hello(h).is_ok());
}

TEST(IpcValidateHello, RejectsMagicVersionKind) {
  Hello h;
  h.magic = 0x12345678;
  expect_rejected(validate_hello(h), {"hello.magic", "0x12345678"});
  h = Hello{};
  h.version = 99;
  expect_rejected(validate_hello(h), {"hello.version", "99"});
  h = Hello{};
  h.kind = static_cast<HelloKind>(7);
  expect_rejected(validate_hello(h), {"hello.kind", "7"});
  h.kind = static_cast<HelloKind>(0);
  expect_rejected(validate_hello(h), {"hello.kind", "0"});
}

// The MPS flags: kept as sent when the client says it asked the driver;
// "MPS client" without "known", and bits no client defines, are dropped.
TEST(IpcValidateHello, KeepsOnlyTheMpsFlagsItKnows) {
  Hello h;
  h.flags = kHelloMpsKnown | kHelloMpsClient;
  ASSERT_TRUE(validate_hello(h).is_ok());
  EXPECT_EQ(h.flags, kHelloMpsKnown | kHelloMpsClient);
  h.flags = kHelloMpsKnown;
  ASSERT_TRUE(validate_hello(h).is_ok());
  EXPECT_EQ(h.flags, kHelloMpsKnown);
  h.flags = kHelloMpsClient;
  ASSERT_TRUE(validate_hello(h).is_ok());
  EXPECT_EQ(h.flags, 0U);
  h.flags = 0xffffffffU;
  ASSERT_TRUE(validate_hello(h).is_ok());
  EXPECT_EQ(h.flags, kHelloFlags);
}

TEST(IpcValidateHello, ForcesTermination) {
  Hello h;
  std::memset(h.tenant, 'a', sizeof h.tenant);  // no NUL anywhere
  std::memset(h.program, 'b', sizeof h.program);
  ASSERT_TRUE(validate_hello(h).is_ok());
  EXPECT_EQ(h.tenant[kNameBytes - 1], '\0');
  EXPECT_EQ(h.program[kNameBytes - 1], '\0');
  EXPECT_EQ(std::strlen(h.tenant), kNameBytes - 1);
}

TEST(IpcValidateHello, RejectsControlCharacters) {
  Hello h;
  std::strcpy(h.tenant, "bad\nname");
  expect_rejected(validate_hello(h), {"hello.tenant", "0xa", "byte 3"});
  h = Hello{};
  std::strcpy(h.program, "esc\x1b[31m");
  expect_rejected(validate_hello(h), {"hello.program", "0x1b"});
  h = Hello{};
  std::strcpy(h.program, "del\x7f");
  expect_rejected(validate_hello(h), {"hello.program", "0x7f"});
  // A control character in the last byte is overwritten by the terminator;
  // bytes after the terminator are not part of the name.
  h = Hello{};
  h.tenant[kNameBytes - 1] = '\n';
  std::strcpy(h.program, "ok");
  h.program[10] = '\t';
  EXPECT_TRUE(validate_hello(h).is_ok());
  // UTF-8 passes.
  h = Hello{};
  std::strcpy(h.tenant, "t\xc3\xa9nant");
  EXPECT_TRUE(validate_hello(h).is_ok());
  EXPECT_STREQ(h.tenant, "t\xc3\xa9nant");
}

// Names end up in logs and in `lithos status --json`, which must be valid
// UTF-8: every byte that is not part of a well-formed sequence becomes '?'.
TEST(IpcValidateHello, MakesNamesValidUtf8) {
  Hello h;
  std::strcpy(h.program, "\xe9t\xe9");  // "été" in Latin-1
  std::strcpy(h.tenant, "x\xff\xfe");
  ASSERT_TRUE(validate_hello(h).is_ok());
  EXPECT_STREQ(h.program, "?t?");
  EXPECT_STREQ(h.tenant, "x??");
  // A sequence cut by the terminator, overlong forms, surrogates, code
  // points above U+10FFFF, a lone continuation byte; well-formed ones of
  // 2, 3 and 4 bytes stay.
  struct Case {
    const char* in;
    const char* out;
  };
  const Case cases[] = {
      {"ab\xe2\x82", "ab??"},
      {"\xc0\xaf", "??"},
      {"\xe0\x80\xaf", "???"},
      {"\xed\xa0\x80", "???"},
      {"\xf4\x90\x80\x80", "????"},
      {"\x80x", "?x"},
      {"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"},
  };
  for (const Case& c : cases) {
    h = Hello{};
    std::strcpy(h.program, c.in);
    ASSERT_TRUE(validate_hello(h).is_ok()) << c.in;
    EXPECT_STREQ(h.program, c.out);
  }
  // A 2-byte sequence whose second byte would be the terminator.
  h = Hello{};
  std::memset(h.program, 'a', sizeof h.program);
  h.program[kNameBytes - 2] = '\xc3';
  ASSERT_TRUE(validate_hello(h).is_ok());
  EXPECT_EQ(h.program[kNameBytes - 2], '?');
  EXPECT_EQ(valid_utf8("caf\xe9"), "caf?");
  EXPECT_EQ(valid_utf8("caf\xc3\xa9"), "caf\xc3\xa9");
}

// ---- SubmitMsg ----------------------------------------------------------------

SubmitMsg open_msg(std::uint32_t stream) {
  SubmitMsg m;
  m.type = SubmitType::kStreamOpen;
  m.stream = stream;
  return m;
}

SubmitMsg launch(std::uint32_t stream, std::uint64_t seq) {
  SubmitMsg m;
  m.type = SubmitType::kLaunch;
  m.stream = stream;
  m.seq = seq;
  m.grid[0] = 132;
  m.block[0] = 256;
  return m;
}

// A validator with stream 0 open.
SubmitValidator with_open_stream() {
  SubmitValidator v;
  EXPECT_TRUE(v.check(open_msg(0)).is_ok());
  return v;
}

TEST(IpcValidateSubmit, UnknownType) {
  SubmitValidator v;
  SubmitMsg m = open_msg(0);
  static constexpr std::uint16_t kUnknown[] = {0, 7, 0xffff};
  for (const std::uint16_t t : kUnknown) {
    m.type = static_cast<SubmitType>(t);
    expect_rejected(v.check(m), {"submit.type", std::to_string(t).c_str()});
  }
}

TEST(IpcValidateSubmit, StreamRange) {
  SubmitValidator v;
  EXPECT_TRUE(v.check(open_msg(kMaxStreams - 1)).is_ok());
  expect_rejected(v.check(open_msg(kMaxStreams)), {"submit.stream", "256"});
  expect_rejected(v.check(open_msg(0xffffffff)), {"submit.stream", "4294967295"});
}

TEST(IpcValidateSubmit, FlagBits) {
  SubmitValidator v = with_open_stream();
  SubmitMsg m = launch(0, 1);
  m.flags = kSubmitCooperative | kSubmitGraph | kSubmitWhole | kSubmitRunning;
  EXPECT_TRUE(v.check(m).is_ok());
  m = launch(0, 2);
  m.flags = 1U << 6;
  expect_rejected(v.check(m), {"submit.flags", "0x40"});
  m.flags = 0x8001;
  expect_rejected(v.check(m), {"submit.flags", "0x8001", "0x8000"});
}

// A timed launch is one already running, never a graph; its sample names a
// launch reported on an open stream, carries no flags and a duration of
// 1 ns .. kMaxSampleNs.
TEST(IpcValidateSubmit, TimedLaunchesAndTheirSamples) {
  SubmitValidator v = with_open_stream();
  SubmitMsg m = launch(0, 1);
  m.flags = kSubmitTimed;
  expect_rejected(v.check(m), {"submit.flags", "0x20", "timed"});
  m.flags = kSubmitTimed | kSubmitRunning | kSubmitGraph;
  expect_rejected(v.check(m), {"submit.flags", "timed"});
  m.flags = kSubmitTimed | kSubmitRunning;
  EXPECT_TRUE(v.check(m).is_ok());
  SubmitMsg s;
  s.type = SubmitType::kSample;
  s.stream = 0;
  s.seq = 1;
  set_sample_ns(s, 1);
  EXPECT_TRUE(v.check(s).is_ok());
  set_sample_ns(s, kMaxSampleNs);
  EXPECT_EQ(sample_ns(s), kMaxSampleNs);
  EXPECT_TRUE(v.check(s).is_ok());
  SubmitMsg bad = s;
  set_sample_ns(bad, 0);
  expect_rejected(v.check(bad), {"submit.grid", "0 ns"});
  set_sample_ns(bad, kMaxSampleNs + 1);
  expect_rejected(v.check(bad), {"submit.grid", "10000000001 ns"});
  bad = s;
  bad.seq = 2;  // not reported yet
  expect_rejected(v.check(bad), {"submit.seq", "2"});
  bad.seq = 0;
  expect_rejected(v.check(bad), {"submit.seq", "0"});
  bad = s;
  bad.flags = kSubmitRunning;
  expect_rejected(v.check(bad), {"submit.flags", "no flags"});
  bad = s;
  bad.stream = 1;  // never opened
  expect_rejected(v.check(bad), {"submit.stream", "not open"});
}

// A pinned graph launch carries its TPC set in grid/block (set_pinned_tpcs):
// accepted with any non-empty set, never without kSubmitGraph or with none.
TEST(IpcValidateSubmit, PinnedGraphLaunches) {
  SubmitValidator v = with_open_stream();
  SubmitMsg m = launch(0, 1);
  m.flags = kSubmitGraph | kSubmitWhole;
  set_pinned_tpcs(m, 0xffffffffffULL << 24, 0x3);  // TPCs 24-65: grid/block far from a launch shape
  EXPECT_TRUE(v.check(m).is_ok());
  std::uint64_t w0 = 0, w1 = 0;
  pinned_tpcs(m, &w0, &w1);
  EXPECT_EQ(w0, 0xffffffffffULL << 24);
  EXPECT_EQ(w1, 0x3U);
  m.seq = 2;
  m.flags = kSubmitPinned;
  expect_rejected(v.check(m), {"submit.flags", "pinned without graph"});
  m.flags = kSubmitGraph;
  set_pinned_tpcs(m, 0, 0);
  expect_rejected(v.check(m), {"submit.grid", "no TPCs"});
  m.flags = kSubmitGraph;
  set_pinned_tpcs(m, 1, 0);
  m.smem = 1U << 30;  // the rest of the shape is still checked
  expect_rejected(v.check(m), {"submit.smem"});
}

TEST(IpcValidateSubmit, OpenCloseSyncState) {
  SubmitValidator v;
  SubmitMsg m = open_msg(3);
  m.type = SubmitType::kStreamClose;
  expect_rejected(v.check(m), {"submit.stream", "3", "not open"});
  m.type = SubmitType::kSync;
  expect_rejected(v.check(m), {"submit.stream", "3", "not open"});
  EXPECT_TRUE(v.check(open_msg(3)).is_ok());
  EXPECT_TRUE(v.is_open(3));
  expect_rejected(v.check(open_msg(3)), {"submit.stream", "3", "already open"});
  m.type = SubmitType::kSync;
  EXPECT_TRUE(v.check(m).is_ok());
  m.type = SubmitType::kStreamClose;
  EXPECT_TRUE(v.check(m).is_ok());
  EXPECT_FALSE(v.is_open(3));
  expect_rejected(v.check(m), {"submit.stream", "3"});
}

TEST(IpcValidateSubmit, LaunchNeedsOpenStream) {
  SubmitValidator v;
  expect_rejected(v.check(launch(5, 1)), {"submit.stream", "5", "not open"});
  EXPECT_TRUE(v.check(open_msg(5)).is_ok());
  EXPECT_TRUE(v.check(launch(5, 1)).is_ok());
}

TEST(IpcValidateSubmit, SeqStrictlyIncreasing) {
  SubmitValidator v = with_open_stream();
  expect_rejected(v.check(launch(0, 0)), {"submit.seq", "= 0"});
  EXPECT_TRUE(v.check(launch(0, 1)).is_ok());
  EXPECT_TRUE(v.check(launch(0, 5)).is_ok());  // gaps are allowed
  expect_rejected(v.check(launch(0, 5)), {"submit.seq", "5", "last launch seq 5"});
  expect_rejected(v.check(launch(0, 4)), {"submit.seq", "4"});
  EXPECT_EQ(v.last_seq(0), 5U);
  // A rejected launch changes nothing; sync does not restart the numbering.
  SubmitMsg sync = open_msg(0);
  sync.type = SubmitType::kSync;
  EXPECT_TRUE(v.check(sync).is_ok());
  expect_rejected(v.check(launch(0, 5)), {"submit.seq"});
  EXPECT_TRUE(v.check(launch(0, 6)).is_ok());
  // Streams are numbered separately; a reopened slot starts afresh.
  EXPECT_TRUE(v.check(open_msg(1)).is_ok());
  EXPECT_TRUE(v.check(launch(1, 1)).is_ok());
  SubmitMsg close = open_msg(0);
  close.type = SubmitType::kStreamClose;
  EXPECT_TRUE(v.check(close).is_ok());
  EXPECT_TRUE(v.check(open_msg(0)).is_ok());
  EXPECT_TRUE(v.check(launch(0, 1)).is_ok());
}

TEST(IpcValidateSubmit, GridDims) {
  SubmitValidator v = with_open_stream();
  std::uint64_t seq = 0;
  for (int i = 0; i < 3; ++i) {
    SubmitMsg m = launch(0, ++seq);
    m.grid[i] = 0;
    const std::string field = "submit.grid[" + std::to_string(i) + "]";
    expect_rejected(v.check(m), {field.c_str(), "= 0"});
  }
  SubmitMsg m = launch(0, ++seq);
  m.grid[0] = 1U << 20, m.grid[1] = 1U << 20, m.grid[2] = 1;  // exactly 2^40
  m.unit = 1;
  EXPECT_TRUE(v.check(m).is_ok());
  m = launch(0, ++seq);
  m.grid[0] = 1U << 20, m.grid[1] = 1U << 20, m.grid[2] = 2;  // 2^41
  expect_rejected(v.check(m), {"submit.grid[2]", "2", "2^40"});
  m.grid[0] = 0xffffffff, m.grid[1] = 0xffffffff, m.grid[2] = 0xffffffff;  // would overflow 64 bits
  expect_rejected(v.check(m), {"submit.grid[1]", "4294967295"});
}

TEST(IpcValidateSubmit, BlockDims) {
  SubmitValidator v = with_open_stream();
  std::uint64_t seq = 0;
  for (int i = 0; i < 3; ++i) {
    SubmitMsg m = launch(0, ++seq);
    m.block[0] = 1;
    m.block[i] = 0;
    const std::string field = "submit.block[" + std::to_string(i) + "]";
    expect_rejected(v.check(m), {field.c_str(), "= 0"});
  }
  SubmitMsg m = launch(0, ++seq);
  m.block[0] = 32, m.block[1] = 8, m.block[2] = 4;  // 1024
  EXPECT_TRUE(v.check(m).is_ok());
  m = launch(0, ++seq);
  m.block[0] = 32, m.block[1] = 8, m.block[2] = 5;  // 1280
  expect_rejected(v.check(m), {"submit.block[2]", "5", "1024"});
  m.block[0] = 1025, m.block[1] = 1, m.block[2] = 1;
  expect_rejected(v.check(m), {"submit.block[0]", "1025"});
}

TEST(IpcValidateSubmit, ClusterDims) {
  SubmitValidator v = with_open_stream();
  std::uint64_t seq = 0;
  for (int i = 0; i < 3; ++i) {
    SubmitMsg m = launch(0, ++seq);
    m.cluster[i] = 0;
    const std::string field = "submit.cluster[" + std::to_string(i) + "]";
    expect_rejected(v.check(m), {field.c_str(), "= 0"});
  }
  SubmitMsg m = launch(0, ++seq);
  m.grid[0] = 128, m.grid[1] = 4;
  m.cluster[0] = 8, m.cluster[1] = 2;  // 16 blocks
  EXPECT_TRUE(v.check(m).is_ok());
  m = launch(0, ++seq);
  m.grid[0] = 128, m.grid[1] = 4;
  m.cluster[0] = 8, m.cluster[1] = 4;  // 32 blocks
  expect_rejected(v.check(m), {"submit.cluster", "8x4x1", "16"});
  m.cluster[0] = 255, m.cluster[1] = 255, m.cluster[2] = 255;  // largest the bytes hold
  m.grid[0] = 255, m.grid[1] = 255, m.grid[2] = 255;
  expect_rejected(v.check(m), {"submit.cluster", "255x255x255"});
  // Each grid dim a multiple of the cluster's.
  m = launch(0, ++seq);
  m.grid[0] = 130;
  m.cluster[0] = 4;
  expect_rejected(v.check(m), {"submit.grid[0]", "130", "cluster[0] = 4"});
  m.grid[0] = 128, m.grid[2] = 3;
  m.cluster[2] = 2;
  expect_rejected(v.check(m), {"submit.grid[2]", "3", "cluster[2] = 2"});
}

TEST(IpcValidateSubmit, Unit) {
  SubmitValidator v = with_open_stream();
  SubmitMsg m = launch(0, 1);
  m.grid[0] = 64, m.grid[1] = 2;
  m.unit = 0;
  expect_rejected(v.check(m), {"submit.unit", "= 0"});
  m.unit = 129;
  expect_rejected(v.check(m), {"submit.unit", "129", "128 blocks"});
  m.unit = 128;
  EXPECT_TRUE(v.check(m).is_ok());
}

// A running (hp) launch's report carries the TPCs it used in `unit`
// (running_tpcs): 0 (its whole allocation) to kMaxTpcs, whatever its grid.
TEST(IpcValidateSubmit, ARunningReportCarriesItsTpcCount) {
  SubmitValidator v = with_open_stream();
  SubmitMsg m = launch(0, 1);
  m.flags = kSubmitRunning;
  m.grid[0] = 1;
  set_running_tpcs(m, 0);
  EXPECT_TRUE(v.check(m).is_ok());
  m.seq = 2;
  set_running_tpcs(m, 4);  // more TPCs than blocks: not a unit
  EXPECT_TRUE(v.check(m).is_ok());
  EXPECT_EQ(running_tpcs(m), 4U);
  m.seq = 3;
  set_running_tpcs(m, kMaxTpcs);
  EXPECT_TRUE(v.check(m).is_ok());
  m.seq = 4;
  set_running_tpcs(m, kMaxTpcs + 1);
  expect_rejected(v.check(m), {"submit.unit", "129", "TPC count"});
}

TEST(IpcValidateSubmit, SharedMemory) {
  SubmitValidator v = with_open_stream();
  SubmitMsg m = launch(0, 1);
  m.smem = 228 * 1024;
  EXPECT_TRUE(v.check(m).is_ok());
  m = launch(0, 2);
  m.smem = 228 * 1024 + 1;
  expect_rejected(v.check(m), {"submit.smem", "233473"});
}

TEST(IpcValidateSubmit, NothingAfterGoodbye) {
  SubmitValidator v = with_open_stream();
  SubmitMsg bye;
  bye.type = SubmitType::kGoodbye;
  EXPECT_TRUE(v.check(bye).is_ok());
  EXPECT_TRUE(v.said_goodbye());
  expect_rejected(v.check(launch(0, 1)), {"submit.type", "launch", "goodbye"});
  expect_rejected(v.check(bye), {"submit.type", "goodbye"});
}

TEST(IpcValidateSubmit, RejectedMessagesChangeNoState) {
  SubmitValidator v;
  SubmitMsg m = open_msg(2);
  m.flags = 0x100;  // bad flags: the open must not take effect
  EXPECT_FALSE(v.check(m).is_ok());
  EXPECT_FALSE(v.is_open(2));
  EXPECT_TRUE(v.check(open_msg(2)).is_ok());
  SubmitMsg l = launch(2, 10);
  l.smem = 1U << 30;
  EXPECT_FALSE(v.check(l).is_ok());
  EXPECT_EQ(v.last_seq(2), 0U);
  EXPECT_TRUE(v.check(launch(2, 1)).is_ok());
}

}  // namespace
}  // namespace lithos::ipc
