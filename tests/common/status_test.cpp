#include "common/status.hpp"

#include <gtest/gtest.h>

namespace lithos {
namespace {

Result<int> parse_positive(int v) {
  if (v <= 0) return Status::invalid_argument("not positive: " + std::to_string(v));
  return v;
}

Status chain(int v) {
  LITHOS_RETURN_IF_ERROR(parse_positive(v).status());
  return Status::ok();
}

TEST(Status, OkAndErrors) {
  EXPECT_TRUE(Status::ok().is_ok());
  EXPECT_EQ(Status::ok().to_string(), "ok");
  const Status s = Status::not_found("tenant 'x'");
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.to_string(), "not found: tenant 'x'");
  EXPECT_EQ(s.with_context("scenario a.toml").message(), "scenario a.toml: tenant 'x'");
}

TEST(Result, ValueOrStatus) {
  auto good = parse_positive(3);
  ASSERT_TRUE(good.is_ok());
  EXPECT_EQ(*good, 3);
  auto bad = parse_positive(-1);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(chain(1).is_ok());
  EXPECT_EQ(chain(0).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lithos
