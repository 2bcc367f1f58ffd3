// The descriptor hook against a fake driver export table.
#include "gpu/descriptor_hook.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <vector>

namespace lithos::gpu {
namespace {

using DriverCallback = void (*)(void*, int, int, const void*);

// A fake driver: records subscriptions and enables.
struct FakeDriver {
  struct Sub {
    DriverCallback cb;
    void* user;
    bool enabled;
  };
  std::vector<Sub> subs;
  int subscribe_rc = 0;
  int enable_rc = 0;
  int table_rc = 0;
  bool null_entries = false;
  std::array<std::uintptr_t, 8> table{};
  unsigned char last_id[16] = {};

  // Fires every enabled subscription like the driver before a QMD upload.
  void fire(int domain, int cbid, const void* params) {
    for (const Sub& s : subs) {
      if (s.enabled) s.cb(s.user, domain, cbid, params);
    }
  }
};
FakeDriver* g_driver = nullptr;

int fake_subscribe(std::uint32_t* handle, DriverCallback cb, void* user) {
  if (g_driver->subscribe_rc != 0) return g_driver->subscribe_rc;
  g_driver->subs.push_back({cb, user, false});
  *handle = static_cast<std::uint32_t>(g_driver->subs.size() - 1) + 100;
  return 0;
}
int fake_enable(std::uint32_t on, std::uint32_t handle, int domain, int cbid) {
  if (g_driver->enable_rc != 0) return g_driver->enable_rc;
  if (domain != 0xb || cbid != 0x1 || handle < 100 || handle - 100 >= g_driver->subs.size()) return 1;
  g_driver->subs[handle - 100].enabled = on != 0;
  return 0;
}
int fake_get_export_table(const void** table, const void* id) {
  std::memcpy(g_driver->last_id, id, 16);
  if (g_driver->table_rc != 0) return g_driver->table_rc;
  g_driver->table[0] = sizeof(g_driver->table);
  g_driver->table[3] = g_driver->null_entries ? 0 : reinterpret_cast<std::uintptr_t>(&fake_subscribe);
  g_driver->table[6] = reinterpret_cast<std::uintptr_t>(&fake_enable);
  *table = g_driver->table.data();
  return 0;
}
int no_table(const void** table, const void*) {
  *table = nullptr;
  return 0;
}

// Params as the driver passes them: u32 size, QMD pointer in pointer slot 4.
struct Params {
  std::uint32_t size = 88;
  std::uint32_t pad = 0;
  void* slots[10] = {};
};

struct Recorder {
  int calls = 0;
  std::uint8_t* last = nullptr;
};
void record(void* user, std::uint8_t* qmd) {
  auto* r = static_cast<Recorder*>(user);
  ++r->calls;
  r->last = qmd;
  qmd[0] = 0x42;  // edits in place
}
void record2(void* user, std::uint8_t* qmd) { record(user, qmd); }
void record3(void* user, std::uint8_t* qmd) { record(user, qmd); }
void record4(void* user, std::uint8_t* qmd) { record(user, qmd); }
void record5(void* user, std::uint8_t* qmd) { record(user, qmd); }

class DescriptorHook : public ::testing::Test {
 protected:
  void SetUp() override {
    g_driver = &driver_;
    detail::forget_subscriptions_for_tests();  // each test brings a fresh fake driver
  }
  void TearDown() override {
    // Leave no callback installed for the next test.
    for (auto cb : {&record, &record2, &record3, &record4, &record5}) {
      for (Recorder* r : {&a_, &b_}) (void)remove_descriptor_callback(&fake_get_export_table, cb, r);
    }
    g_driver = nullptr;
  }
  FakeDriver driver_;
  Recorder a_, b_;
  std::array<std::uint8_t, 384> qmd_{};
};

TEST_F(DescriptorHook, InstallsWithTheRightTableIdAndFiresOnQmdUpload) {
  ASSERT_TRUE(install_descriptor_callback(&fake_get_export_table, &record, &a_).is_ok());
  EXPECT_EQ(std::memcmp(driver_.last_id, kDescriptorTableId, 16), 0);
  ASSERT_EQ(driver_.subs.size(), 1U);
  EXPECT_TRUE(driver_.subs[0].enabled);
  Params p;
  p.slots[3] = qmd_.data();  // pointer slot 4 = bytes 32..39 = slots[3] here
  driver_.fire(0xb, 0x1, &p);
  EXPECT_EQ(a_.calls, 1);
  EXPECT_EQ(a_.last, qmd_.data());
  EXPECT_EQ(qmd_[0], 0x42);
  EXPECT_EQ(descriptor_hook_stats().last_params_size, 88U);
}

TEST_F(DescriptorHook, IgnoresOtherDomainsShortOrNullParams) {
  ASSERT_TRUE(install_descriptor_callback(&fake_get_export_table, &record, &a_).is_ok());
  const auto before = descriptor_hook_stats();
  Params p;
  p.slots[3] = qmd_.data();
  driver_.fire(0xa, 0x1, &p);
  driver_.fire(0xb, 0x2, &p);
  driver_.fire(0xb, 0x1, nullptr);
  Params shorter = p;
  shorter.size = 39;  // the QMD pointer would be past the end
  driver_.fire(0xb, 0x1, &shorter);
  Params no_qmd;
  driver_.fire(0xb, 0x1, &no_qmd);
  EXPECT_EQ(a_.calls, 0);
  const auto after = descriptor_hook_stats();
  EXPECT_EQ(after.ignored - before.ignored, 3U);
  shorter.size = 40;
  driver_.fire(0xb, 0x1, &shorter);
  EXPECT_EQ(a_.calls, 1);
}

TEST_F(DescriptorHook, TwoCallbacksBothRunAndCanBeRemoved) {
  ASSERT_TRUE(install_descriptor_callback(&fake_get_export_table, &record, &a_).is_ok());
  ASSERT_TRUE(install_descriptor_callback(&fake_get_export_table, &record2, &b_).is_ok());
  // Installing the same pair again is a no-op.
  ASSERT_TRUE(install_descriptor_callback(&fake_get_export_table, &record, &a_).is_ok());
  Params p;
  p.slots[3] = qmd_.data();
  driver_.fire(0xb, 0x1, &p);
  EXPECT_EQ(a_.calls, 1);
  EXPECT_EQ(b_.calls, 1);
  ASSERT_TRUE(remove_descriptor_callback(&fake_get_export_table, &record, &a_).is_ok());
  driver_.fire(0xb, 0x1, &p);
  EXPECT_EQ(a_.calls, 1);
  EXPECT_EQ(b_.calls, 2);
  EXPECT_EQ(remove_descriptor_callback(&fake_get_export_table, &record, &a_).code(), StatusCode::kNotFound);
}

TEST_F(DescriptorHook, SlotsRunOut) {
  ASSERT_TRUE(install_descriptor_callback(&fake_get_export_table, &record, &a_).is_ok());
  ASSERT_TRUE(install_descriptor_callback(&fake_get_export_table, &record2, &a_).is_ok());
  ASSERT_TRUE(install_descriptor_callback(&fake_get_export_table, &record3, &a_).is_ok());
  ASSERT_TRUE(install_descriptor_callback(&fake_get_export_table, &record4, &a_).is_ok());
  EXPECT_EQ(install_descriptor_callback(&fake_get_export_table, &record5, &a_).code(), StatusCode::kFailedPrecondition);
}

TEST_F(DescriptorHook, MissingTableOrEntriesIsUnavailable) {
  EXPECT_EQ(install_descriptor_callback(&no_table, &record, &a_).code(), StatusCode::kUnavailable);
  driver_.table_rc = 500;
  EXPECT_EQ(install_descriptor_callback(&fake_get_export_table, &record, &a_).code(), StatusCode::kUnavailable);
  driver_.table_rc = 0;
  driver_.null_entries = true;
  EXPECT_EQ(install_descriptor_callback(&fake_get_export_table, &record, &a_).code(), StatusCode::kUnavailable);
  EXPECT_TRUE(driver_.subs.empty());
}

TEST_F(DescriptorHook, DriverRefusalsAreUnavailableAndLeaveNothingInstalled) {
  driver_.subscribe_rc = 7;
  const Status s = install_descriptor_callback(&fake_get_export_table, &record, &a_);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("7"), std::string::npos);
  driver_.subscribe_rc = 0;
  driver_.enable_rc = 9;
  EXPECT_EQ(install_descriptor_callback(&fake_get_export_table, &record, &a_).code(), StatusCode::kUnavailable);
  EXPECT_EQ(remove_descriptor_callback(&fake_get_export_table, &record, &a_).code(), StatusCode::kNotFound);
}

TEST_F(DescriptorHook, NullArgumentsAreRefused) {
  EXPECT_EQ(install_descriptor_callback(nullptr, &record, &a_).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(install_descriptor_callback(&fake_get_export_table, nullptr, &a_).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(remove_descriptor_callback(nullptr, &record, &a_).code(), StatusCode::kInvalidArgument);
}

TEST(DescriptorTrampoline, SurvivesANullSlot) {
  Params p;
  detail::descriptor_trampoline(nullptr, 0xb, 0x1, &p);  // nothing to call, no crash
  SUCCEED();
}

}  // namespace
}  // namespace lithos::gpu
