#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "volt/core/errors.h"
#include "volt/distributed/network_interface.h"

using namespace volt;
using namespace volt::detail;
using Catch::Matchers::Contains;

TEST_CASE("the device that reaches the master: loopback for a local master", "[distributed][network]") {
  const auto c = choose_device("127.0.0.1", "");
  CHECK(c.address == "127.0.0.1");
  CHECK(c.interface_name == "lo");
  CHECK(choose_device("localhost", "").address == "127.0.0.1");
  bool has_lo = false;
  for (const auto& i : list_interfaces()) has_lo = has_lo || (i.name == "lo" && i.address == "127.0.0.1");
  CHECK(has_lo);
}

TEST_CASE("GLOO_SOCKET_IFNAME: a list of interfaces, each checked", "[distributed][network]") {
  CHECK(choose_device("10.9.9.9", "lo").interfaces == std::vector<std::string>{"lo"});
  CHECK(choose_device("10.9.9.9", "lo, lo").interfaces == std::vector<std::string>{"lo", "lo"});
  CHECK_THROWS_WITH(choose_device("127.0.0.1", "nosuch0"),
                    Contains("interface 'nosuch0'") && Contains("lo (127.0.0.1)") && Contains("GLOO_SOCKET_IFNAME"));
  CHECK_THROWS_WITH(choose_device("127.0.0.1", ","), Contains("names no interface"));
}

TEST_CASE("a master that does not resolve is an error naming it", "[distributed][network]") {
  CHECK_THROWS_AS(choose_device("no-such-host.invalid", ""), DistributedError);
  CHECK_THROWS_WITH(choose_device("no-such-host.invalid", ""), Contains("MASTER_ADDR='no-such-host.invalid'"));
}
