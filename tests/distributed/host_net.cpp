#include "distributed/host_net.h"

#include <signal.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <stdexcept>

namespace volt::testing {

namespace {
std::string run(const std::string& cmd, int* code = nullptr) {
  std::array<char, 4096> buf{};
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) throw std::runtime_error("cannot run: " + cmd);
  while (size_t n = std::fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  const int st = ::pclose(p);
  const int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  if (code) {
    *code = rc;
  } else if (rc != 0) {
    throw std::runtime_error("HostNet: '" + cmd + "' failed (" + std::to_string(rc) + "): " + out);
  }
  return out;
}

/// Removes the namespaces of test processes that are gone.
void sweep_stale() {
  const std::string list = run(ip_command() + " netns list", nullptr);
  static const std::regex re("^vh([0-9]+)-[a-z0-9]+");
  std::smatch m;
  size_t pos = 0;
  while (pos < list.size()) {
    const size_t eol = list.find('\n', pos);
    const std::string line = list.substr(pos, eol == std::string::npos ? std::string::npos : eol - pos);
    pos = eol == std::string::npos ? list.size() : eol + 1;
    if (!std::regex_search(line, m, re)) continue;
    const pid_t owner = static_cast<pid_t>(std::stol(m[1]));
    if (::kill(owner, 0) == 0 || errno != ESRCH) continue;
    int rc = 0;
    run(ip_command() + " netns del " + line.substr(0, line.find(' ')), &rc);
  }
}
}  // namespace

std::string ip_command() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (std::filesystem::exists(p)) return p;
  return "";
}

std::string HostNet::unavailable() {
  if (::geteuid() != 0) return "multi-host tests need root (network namespaces)";
  if (ip_command().empty()) return "multi-host tests need the ip command (iproute2)";
  int rc = 0;
  const std::string name = "vh" + std::to_string(::getpid()) + "-probe";
  const std::string out = run(ip_command() + " netns add " + name, &rc);
  if (rc != 0) return "network namespaces are refused here: " + out;
  run(ip_command() + " netns del " + name, &rc);
  return "";
}

HostNet::HostNet(int hosts) : hosts_(hosts), subnet_(static_cast<int>(::getpid() % 250)) {
  prefix_ = "vh" + std::to_string(::getpid());
  sweep_stale();
  const std::string ip = ip_command();
  const std::string sw = prefix_ + "-sw";
  try {
    run(ip + " netns add " + sw);
    run(ip + " -n " + sw + " link add br0 type bridge");
    run(ip + " -n " + sw + " link set br0 up");
    for (int i = 0; i < hosts; ++i) {
      const std::string ns = name(i), a = prefix_ + "a" + std::to_string(i), b = prefix_ + "b" + std::to_string(i);
      run(ip + " netns add " + ns);
      run(ip + " link add " + a + " type veth peer name " + b);
      run(ip + " link set " + a + " netns " + ns);
      run(ip + " link set " + b + " netns " + sw);
      run(ip + " -n " + ns + " link set " + a + " name eth0");
      run(ip + " -n " + ns + " addr add " + address(i) + "/24 dev eth0");
      run(ip + " -n " + ns + " link set eth0 up");
      run(ip + " -n " + ns + " link set lo up");
      run(ip + " -n " + sw + " link set " + b + " master br0");
      run(ip + " -n " + sw + " link set " + b + " up");
    }
  } catch (...) {
    remove();
    throw;
  }
}

HostNet::~HostNet() { remove(); }

void HostNet::remove() const {
  int rc = 0;
  for (int i = 0; i < hosts_; ++i) {
    kill_host(i);
    run(ip_command() + " netns del " + name(i), &rc);
  }
  run(ip_command() + " netns del " + prefix_ + "-sw", &rc);
}

std::string HostNet::address(int host) const {
  return "10.231." + std::to_string(subnet_) + "." + std::to_string(host + 1);
}

std::string HostNet::name(int host) const { return prefix_ + "-" + std::to_string(host); }

std::vector<std::string> HostNet::wrap(int host, const std::vector<std::string>& argv) const {
  std::vector<std::string> out{ip_command(), "netns", "exec", name(host)};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

void HostNet::set_link(int host, bool up) const {
  run(ip_command() + " -n " + name(host) + " link set eth0 " + (up ? "up" : "down"));
}

void HostNet::limit_rate(int host, const std::string& rate) const {
  // Egress of the host's eth0 and of its switch port (the host's ingress).
  run(ip_command() + " netns exec " + name(host) + " tc qdisc replace dev eth0 root tbf rate " + rate +
      " burst 1mb latency 100ms");
  run(ip_command() + " netns exec " + prefix_ + "-sw tc qdisc replace dev " + prefix_ + "b" + std::to_string(host) +
      " root tbf rate " + rate + " burst 1mb latency 100ms");
}

void HostNet::kill_host(int host) const {
  int rc = 0;
  run(ip_command() + " netns pids " + name(host) + " | xargs -r kill -9", &rc);
}

void HostNet::kill_first(int host) const {
  int rc = 0;
  run("pids=\" $(" + ip_command() + " netns pids " + name(host) +
          " | tr '\\n' ' ') \"; for p in $pids; do pp=$(awk '/^PPid/{print $2}' /proc/$p/status 2>/dev/null); "
          "case \"$pids\" in *\" $pp \"*) ;; *) kill -9 $p;; esac; done",
      &rc);
}

int HostNet::processes(int host) const {
  int rc = 0;
  const std::string out = run(ip_command() + " netns pids " + name(host), &rc);
  int n = 0;
  for (char c : out) n += c == '\n';
  return n;
}

long long HostNet::tx_bytes(int host) const {
  int rc = 0;
  const std::string out =
      run(ip_command() + " netns exec " + name(host) + " cat /sys/class/net/eth0/statistics/tx_bytes", &rc);
  return rc == 0 ? std::stoll(out) : -1;
}

}  // namespace volt::testing
