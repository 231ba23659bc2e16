#pragma once
// HostNet: several hosts on this machine for multi-host tests, as network namespaces joined through
// a bridge (a "switch" namespace of their own), each host with its own address 10.231.S.(i+1)/24 on
// its interface eth0. Needs root and `ip` (iproute2); unavailable() says why not, and the tests skip.
//
// Namespaces are named vh<pid>-<i> (and vh<pid>-sw): the destructor removes them however a test
// ends, and each HostNet first removes those of test processes that no longer exist (a test killed
// with SIGKILL cannot clean up after itself). Test traffic stays inside these namespaces.
#include <string>
#include <vector>

namespace volt::testing {

class HostNet {
 public:
  /// "" when hosts can be made here; else the reason (not root, no ip command, namespaces refused).
  static std::string unavailable();

  explicit HostNet(int hosts);
  ~HostNet();
  HostNet(const HostNet&) = delete;
  HostNet& operator=(const HostNet&) = delete;

  int size() const { return hosts_; }
  /// Host i's address ("10.231.S.<i+1>") and namespace name.
  std::string address(int host) const;
  std::string name(int host) const;
  /// `argv` run inside host i (absolute argv[0]): {ip, netns, exec, name, argv...}.
  std::vector<std::string> wrap(int host, const std::vector<std::string>& argv) const;
  /// Host i's link up or down (down: the host is cut off, a network partition).
  void set_link(int host, bool up) const;
  /// Limits host i's link to `rate` (tc tbf, e.g. "2gbit") in both directions.
  void limit_rate(int host, const std::string& rate) const;
  /// SIGKILL to every process in host i (a host lost).
  void kill_host(int host) const;
  /// SIGKILL to host i's first process (the one whose parent runs outside the host): the command
  /// started there, volt's launcher (local rank 0).
  void kill_first(int host) const;
  /// Processes still running in host i.
  int processes(int host) const;
  /// Bytes host i's eth0 sent so far.
  long long tx_bytes(int host) const;

 private:
  void remove() const;
  int hosts_;
  int subnet_;
  std::string prefix_;
};

/// The `ip` command's absolute path ("" if none).
std::string ip_command();

}  // namespace volt::testing
