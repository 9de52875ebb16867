// Hidden variants of Problem 5.5 (tests/zero/test_fsdp.cpp's role and judge, other shapes): five
// ranks on a one-block model (every unit padded: 5 divides none of them), and two ranks on four
// blocks.
#include <gtest/gtest.h>

#include "zero/zero_test_util.h"

TEST(HiddenFsdp, FiveRanksOnOneBlockMatchAdamW) {
  zero_test::expect_fsdp_matches_adamw_for({5}, 1, "FSDP, 5 ranks, 1 block", 120);
}

TEST(HiddenFsdp, TwoRanksOnFourBlocksMatchAdamW) {
  zero_test::expect_fsdp_matches_adamw_for({2}, 4, "FSDP, 2 ranks, 4 blocks", 120);
}
