#include "volt/distributed/network_interface.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "volt/core/errors.h"

namespace volt::detail {

namespace {
std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : s + ",") {
    if (ch == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (ch != ' ') {
      cur += ch;
    }
  }
  return out;
}

/// The IPv4 address of `host` (a name or a dotted address); throws naming it.
in_addr resolve(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  VOLT_CHECK(rc == 0 && res, DistributedError, "MASTER_ADDR='", host, "' does not resolve to an IPv4 address (",
             ::gai_strerror(rc), ")");
  const in_addr a = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  ::freeaddrinfo(res);
  return a;
}

/// The local address the kernel would send from to reach `to` ("" with the reason when no route).
std::string source_address(in_addr to, std::string& error) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) {
    error = std::strerror(errno);
    return "";
  }
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_addr = to;
  dst.sin_port = htons(9);  // a UDP "connect" sends nothing: it only picks the route
  sockaddr_in local{};
  socklen_t len = sizeof local;
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
    char buf[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &local.sin_addr, buf, sizeof buf);
    out = buf;
  } else {
    error = std::strerror(errno);
  }
  ::close(fd);
  return out;
}
}  // namespace

std::vector<NetworkInterface> list_interfaces() {
  std::vector<NetworkInterface> out;
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return out;
  for (ifaddrs* i = all; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    char buf[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
    out.push_back({i->ifa_name, buf});
  }
  ::freeifaddrs(all);
  return out;
}

std::string describe_interfaces(const std::vector<NetworkInterface>& interfaces) {
  if (interfaces.empty()) return "none with an IPv4 address is up";
  std::string s;
  for (const auto& i : interfaces) s += (s.empty() ? "" : ", ") + i.name + " (" + i.address + ")";
  return s;
}

void check_route(const std::string& master_addr) {
  std::string error;
  VOLT_CHECK(!source_address(resolve(master_addr), error).empty(), DistributedError,
             "no network interface of this host reaches MASTER_ADDR=", master_addr, " (", error, "); tried ",
             describe_interfaces(list_interfaces()), ". Check the address and the routes");
}

DeviceChoice choose_device(const std::string& master_addr, const std::string& ifname_env) {
  const auto interfaces = list_interfaces();
  DeviceChoice c;
  if (!ifname_env.empty()) {
    c.interfaces = split_list(ifname_env);
    VOLT_CHECK(!c.interfaces.empty(), DistributedError, "GLOO_SOCKET_IFNAME='", ifname_env,
               "' names no interface; this host has ", describe_interfaces(interfaces));
    for (const auto& name : c.interfaces) {
      bool found = false;
      for (const auto& i : interfaces) found = found || i.name == name;
      VOLT_CHECK(found, DistributedError, "GLOO_SOCKET_IFNAME='", ifname_env, "': interface '", name,
                 "' is not up with an IPv4 address on this host; it has ", describe_interfaces(interfaces),
                 ". Name one of those, or unset GLOO_SOCKET_IFNAME to use the one that reaches MASTER_ADDR");
    }
    c.why = "GLOO_SOCKET_IFNAME=" + ifname_env;
    return c;
  }
  std::string error;
  c.address = source_address(resolve(master_addr), error);
  VOLT_CHECK(!c.address.empty(), DistributedError,
             "no network interface of this host reaches MASTER_ADDR=", master_addr, " (", error, "); tried ",
             describe_interfaces(interfaces),
             ". Check the address and the routes, or name the interface in GLOO_SOCKET_IFNAME");
  for (const auto& i : interfaces)
    if (i.address == c.address) c.interface_name = i.name;
  c.why = "the route to MASTER_ADDR=" + master_addr;
  return c;
}

}  // namespace volt::detail
