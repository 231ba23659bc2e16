#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "volt/core/errors.h"
#include "volt/distributed/device_mesh.h"

using namespace volt;
using Catch::Matchers::Contains;

TEST_CASE("device mesh: the groups along each dimension, row-major", "[distributed][mesh]") {
  // (replicate=2, shard=3): rank 4 = (1, 1).
  CHECK(volt::detail::mesh_group_ranks({2, 3}, 1, 4) == std::vector<int64_t>{3, 4, 5});
  CHECK(volt::detail::mesh_group_ranks({2, 3}, 0, 4) == std::vector<int64_t>{1, 4});
  // 3-D (2, 2, 2): rank 5 = (1, 0, 1).
  CHECK(volt::detail::mesh_group_ranks({2, 2, 2}, 0, 5) == std::vector<int64_t>{1, 5});
  CHECK(volt::detail::mesh_group_ranks({2, 2, 2}, 1, 5) == std::vector<int64_t>{5, 7});
  CHECK(volt::detail::mesh_group_ranks({2, 2, 2}, 2, 5) == std::vector<int64_t>{4, 5});
  CHECK(volt::detail::mesh_group_ranks({4}, 0, 2) == std::vector<int64_t>{0, 1, 2, 3});
}

TEST_CASE("device mesh: layouts that do not fit the world are ConfigErrors naming the key", "[distributed][mesh]") {
  CHECK_NOTHROW(DeviceMesh::validate({{2, 2}, {"replicate", "shard"}}, 4, "k"));
  CHECK_THROWS_WITH(DeviceMesh::validate({{2, 3}, {"replicate", "shard"}}, 4, "trainer.strategy.device_mesh"),
                    Contains("'trainer.strategy.device_mesh'") && Contains("6 ranks") && Contains("world has 4"));
  CHECK_THROWS_WITH(DeviceMesh::validate({{2, 2}, {"dp"}}, 4, "k"), Contains("one name per dimension"));
  CHECK_THROWS_WITH(DeviceMesh::validate({{2, 2}, {"dp", "dp"}}, 4, "k"), Contains("'dp'"));
  CHECK_THROWS_WITH(DeviceMesh::validate({{0, 4}, {"a", "b"}}, 0, "k"), Contains(">= 1"));
  // 3 x 6148914691236517206 = 2^64 + 2, which wraps to 2: it passed for a world of 2, and building
  // its groups ran out of memory.
  CHECK_THROWS_WITH(DeviceMesh::validate({{3, 6148914691236517206}, {"a", "b"}}, 2, "k"),
                    Contains("(3, 6148914691236517206) has more ranks than the world of 2"));
}
