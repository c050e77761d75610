// page_buffer (posenc/core/page_buffer.hpp): zero-filled, 2 MiB-aligned from one huge page up
// (what the huge-page advice needs), cache-line aligned below, movable, empty when size 0.
#include <gtest/gtest.h>

#include <cstdint>

#include "posenc/core/page_buffer.hpp"

using namespace posenc;

TEST(PageBuffer, AlignedZeroFilledAndMovable) {
  for (size_t n : {size_t{1}, size_t{1000}, size_t{1} << 19, (size_t{3} << 20) / 4 + 5}) {
    page_buffer<float> b(n);
    ASSERT_EQ(b.size(), n);
    const auto addr = reinterpret_cast<uintptr_t>(b.data());
    EXPECT_EQ(addr % (n * sizeof(float) >= (size_t{2} << 20) ? (size_t{2} << 20) : 64), 0u) << n;
    for (size_t i = 0; i < n; i += 997) EXPECT_EQ(b[i], 0.0f);
    EXPECT_EQ(b[n - 1], 0.0f);
    b[n - 1] = 3;
    page_buffer<float> c = std::move(b);
    EXPECT_EQ(c[n - 1], 3.0f);
  }
  page_buffer<uint16_t> e;
  EXPECT_TRUE(e.empty());
  EXPECT_EQ(e.data(), nullptr);
}
