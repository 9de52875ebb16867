// Hidden variants of Problem 5.5 (tests/zero/test_fsdp.cpp's role, other shapes): five ranks
// on a one-block model (every unit padded: 5 divides none of them), and two ranks on four blocks.
#include <gtest/gtest.h>

#include "rank_roles.h"

TEST(HiddenFsdp, FiveRanksOnOneBlockMatchAdamW) {
  rank_test::expect_all_ranks_pass(rank_test::run_ranks(5, "fsdp_adamw", 120, {{"KIT_TEST_N_LAYER", "1"}}), 5,
                                   "FSDP, 5 ranks, 1 block");
}

TEST(HiddenFsdp, TwoRanksOnFourBlocksMatchAdamW) {
  rank_test::expect_all_ranks_pass(rank_test::run_ranks(2, "fsdp_adamw", 120, {{"KIT_TEST_N_LAYER", "4"}}), 2,
                                   "FSDP, 2 ranks, 4 blocks");
}
