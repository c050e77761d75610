// Position-id derivation: fresh, continuation, padded batches, packed documents. Golden values
// are written out by hand from the definitions in positions.hpp (they are small enough to
// count), plus RapidCheck properties over random masks and document splits.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "posenc/core/error.hpp"
#include "posenc/positions/positions.hpp"

using namespace posenc;
using v64 = std::vector<int64_t>;

TEST(Positions, FreshAndContinuation) {
  EXPECT_EQ(positions_fresh(4), (v64{0, 1, 2, 3}));
  EXPECT_EQ(positions_fresh(3, 10), (v64{10, 11, 12}));
  EXPECT_EQ(positions_fresh(0), v64{});
  // After a cached prefix of 5 tokens the next three are 5, 6, 7 (not 0, 1, 2).
  EXPECT_EQ(positions_continuation(5, 3), (v64{5, 6, 7}));
  EXPECT_EQ(positions_continuation(0, 2), (v64{0, 1}));
  EXPECT_THROW(positions_fresh(-1), invalid_argument);
  EXPECT_THROW(positions_fresh(2, -3), invalid_argument);
  EXPECT_THROW(positions_continuation(-1, 2), invalid_argument);
  EXPECT_THROW(positions_fresh(2, int64_t{1} << 62), invalid_argument);
}

TEST(Positions, PaddedBatchesGiveRealTokensTheUnpaddedIds) {
  // Row 0 left padded, row 1 right padded, row 2 a hole in the middle, row 3 all pad.
  const std::vector<uint8_t> mask = {0, 0, 1, 1, 1,  //
                                     1, 1, 1, 0, 0,  //
                                     1, 0, 1, 1, 0,  //
                                     0, 0, 0, 0, 0};
  EXPECT_EQ(positions_from_mask(mask, 4, 5), (v64{-1, -1, 0,  1,  2,   //
                                                  0,  1,  2,  -1, -1,  //
                                                  0,  -1, 1,  2,  -1,  //
                                                  -1, -1, -1, -1, -1}));
  // With a start offset (RoBERTa-style padding_idx + 1 = 2) pads keep the sentinel.
  EXPECT_EQ(positions_from_mask(std::span(mask).first(5), 1, 5, 2), (v64{-1, -1, 2, 3, 4}));
  EXPECT_EQ(pad_position, -1);
  EXPECT_THROW(positions_from_mask(mask, 3, 5), invalid_argument);  // 20 entries, not 15
  EXPECT_THROW(positions_from_mask(mask, -1, 5), invalid_argument);
  try {
    positions_from_mask(mask, 2, 5);
    FAIL();
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("mask"), std::string::npos) << e.what();
  }
}

TEST(Positions, PackedFromCuSeqlens) {
  const v64 cu = {0, 3, 5};
  EXPECT_EQ(doc_ids_from_cu_seqlens(cu), (v64{0, 0, 0, 1, 1}));
  EXPECT_EQ(positions_packed(cu), (v64{0, 1, 2, 0, 1}));
  EXPECT_EQ(positions_packed(cu, 2), (v64{2, 3, 4, 2, 3}));  // RoBERTa: padding_idx 1
  // Empty documents are allowed and consume nothing.
  const v64 cu2 = {0, 2, 2, 3};
  EXPECT_EQ(positions_packed(cu2), (v64{0, 1, 0}));
  EXPECT_EQ(doc_ids_from_cu_seqlens(cu2), (v64{0, 0, 2}));
  EXPECT_EQ(positions_packed(v64{0}), v64{});
  EXPECT_THROW(positions_packed(v64{}), invalid_argument);
  EXPECT_THROW(positions_packed(v64{1, 3}), invalid_argument);     // must start at 0
  EXPECT_THROW(positions_packed(v64{0, 3, 2}), invalid_argument);  // decreasing
  EXPECT_THROW(validate_cu_seqlens(v64{0, 3}, 4, "cu"), invalid_argument);
  try {
    validate_cu_seqlens(v64{0, 3}, 4, "--cu-seqlens");
    FAIL();
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--cu-seqlens"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find('4'), std::string::npos) << e.what();
  }
}

TEST(Positions, PackedFromDocIds) {
  EXPECT_EQ(positions_packed_from_doc_ids(v64{7, 7, 7, 2, 2}), (v64{0, 1, 2, 0, 1}));
  // A new run of an id seen before is a new document (position-reset packing).
  EXPECT_EQ(positions_packed_from_doc_ids(v64{1, 1, 2, 1}), (v64{0, 1, 0, 0}));
  EXPECT_EQ(positions_packed_from_doc_ids(v64{0, 0, 1}, 2), (v64{2, 3, 2}));
  EXPECT_THROW(positions_packed_from_doc_ids(v64{0, -1}), invalid_argument);
}

TEST(Positions, ValidatePositions) {
  EXPECT_NO_THROW(validate_positions(v64{0, 5, 3}, 3, "p"));
  EXPECT_THROW(validate_positions(v64{0, 5}, 3, "p"), invalid_argument);
  EXPECT_THROW(validate_positions(v64{0, -1}, 2, "p"), invalid_argument);
  EXPECT_NO_THROW(validate_positions(v64{0, -1}, 2, "p", true));
  EXPECT_THROW(validate_positions(v64{0, -2}, 2, "p", true), invalid_argument);
}

// Property: whatever the padding pattern, the real tokens of a row get 0..n-1 in order (the
// ids of the same tokens unpadded), and every pad slot gets pad_position.
RC_GTEST_PROP(PositionsProp, PaddingNeverShiftsRealTokens, ()) {
  const int64_t B = *rc::gen::inRange<int64_t>(1, 5);
  const int64_t T = *rc::gen::inRange<int64_t>(0, 40);
  const int64_t start = *rc::gen::inRange<int64_t>(0, 3);
  const auto mask = *rc::gen::container<std::vector<uint8_t>>(static_cast<size_t>(B * T),
                                                              rc::gen::inRange<uint8_t>(0, 2));
  const auto p = positions_from_mask(mask, B, T, start);
  for (int64_t b = 0; b < B; ++b) {
    int64_t n = 0;
    for (int64_t t = 0; t < T; ++t) {
      const size_t i = static_cast<size_t>(b * T + t);
      if (mask[i]) {
        RC_ASSERT(p[i] == start + n);
        ++n;
      } else {
        RC_ASSERT(p[i] == pad_position);
      }
    }
  }
}

// Property: the cu_seqlens and document-id forms agree, and ids restart at each boundary.
RC_GTEST_PROP(PositionsProp, PackedFormsAgree, ()) {
  const auto lens = *rc::gen::container<std::vector<int64_t>>(rc::gen::inRange<int64_t>(0, 9));
  v64 cu = {0};
  for (int64_t l : lens) cu.push_back(cu.back() + l);
  const int64_t start = *rc::gen::inRange<int64_t>(0, 3);
  const auto a = positions_packed(cu, start);
  const auto b = positions_packed_from_doc_ids(doc_ids_from_cu_seqlens(cu), start);
  RC_ASSERT(a == b);
  for (size_t d = 0; d + 1 < cu.size(); ++d)
    for (int64_t t = cu[d]; t < cu[d + 1]; ++t) RC_ASSERT(a[t] == start + t - cu[d]);
}

TEST(Positions, MropeTextAndImageGrids) {
  // Worked by hand from the convention (positions.hpp): text 0 1, image (1, 2, 3) from 2, then
  // the next text at 2 + max(1, 2, 3) = 5.
  const std::vector<mrope_segment> segs = {{2, 1, 2, 3}, {1, 0, 0, 0}};
  const auto p = positions_mrope(segs);
  EXPECT_EQ(p, (std::vector<int64_t>{0, 1, 2, 2, 2, 2, 2, 2, 5,  //
                                     0, 1, 2, 2, 2, 3, 3, 3, 5,  //
                                     0, 1, 2, 3, 4, 2, 3, 4, 5}));
  // A video of 2 frames of 2 x 2 at the start: t 0 0 0 0 1 1 1 1, then text at 2.
  const std::vector<mrope_segment> vid = {{0, 2, 2, 2}, {2, 0, 0, 0}};
  const auto v = positions_mrope(vid, 10);
  EXPECT_EQ(std::vector<int64_t>(v.begin(), v.begin() + 10),
            (std::vector<int64_t>{10, 10, 10, 10, 11, 11, 11, 11, 12, 13}));
  EXPECT_EQ(std::vector<int64_t>(v.begin() + 10, v.begin() + 20),
            (std::vector<int64_t>{10, 10, 11, 11, 10, 10, 11, 11, 12, 13}));
  // Text only: the three rows are the 1-D ids.
  const std::vector<mrope_segment> text = {{4, 0, 0, 0}};
  EXPECT_EQ(positions_mrope(text), (std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}));
  const std::vector<mrope_segment> bad = {{1, 1, 0, 2}};
  EXPECT_THROW(positions_mrope(bad), invalid_argument);
  const std::vector<mrope_segment> neg = {{-1, 0, 0, 0}};
  EXPECT_THROW(positions_mrope(neg), invalid_argument);
}
