// The one case a rank process runs: init the world, run the role named by KIT_TEST_TP_ROLE,
// and exit 1 when any of its expectations failed (skipped in a normal run of the suite).
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>

#include "kit/errors.h"
#include "tp_test_util.h"

TEST(TPRank, Run) {
  const char* role = std::getenv("KIT_TEST_TP_ROLE");
  if (!role) GTEST_SKIP() << "runs only as a rank started by the tensor-parallel tests";
  const int rank = std::atoi(std::getenv("RANK")), t = std::atoi(std::getenv("WORLD_SIZE"));
  const auto it = tp_test::roles().find(role);
  ASSERT_NE(it, tp_test::roles().end()) << "no role " << role;
  kit::dist::init_process_group("gloo", rank, t);
  try {
    it->second(kit::dist::world_group());
  } catch (const kit::NotImplemented& e) {
    ADD_FAILURE() << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "rank " << rank << " threw: " << e.what();
  }
  // A failed rank leaves at once: its peers then fail their next collective within
  // KIT_DIST_TIMEOUT instead of waiting in the goodbye barrier.
  if (::testing::Test::HasFailure()) std::_Exit(1);
  kit::dist::destroy_process_group();
}
