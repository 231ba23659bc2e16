#include "volt/distributed/cluster_env.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

#include "volt/core/errors.h"

namespace volt {

namespace {
std::optional<std::string> get(const std::map<std::string, std::string>* env, const char* key) {
  if (env) {
    auto it = env->find(key);
    return it == env->end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  const char* v = std::getenv(key);
  return v ? std::optional<std::string>(v) : std::nullopt;
}
int64_t to_int(const std::string& s, const char* key) {
  try {
    size_t pos = 0;
    int64_t v = std::stoll(s, &pos);
    if (pos == s.size()) return v;
  } catch (...) {
  }
  throw DistributedError(detail::str_cat("environment variable ", key, "='", s, "' is not an integer"));
}
}  // namespace

ClusterEnv ClusterEnv::detect(const std::map<std::string, std::string>* env) {
  ClusterEnv c;
  auto rank = get(env, "RANK"), world = get(env, "WORLD_SIZE");
  if (rank && world) {
    c.source = get(env, "VOLT_LAUNCHED") ? "volt" : "torchrun";
    c.rank = to_int(*rank, "RANK");
    c.world_size = to_int(*world, "WORLD_SIZE");
    c.local_rank = get(env, "LOCAL_RANK") ? to_int(*get(env, "LOCAL_RANK"), "LOCAL_RANK") : c.rank;
    c.local_world_size =
        get(env, "LOCAL_WORLD_SIZE") ? to_int(*get(env, "LOCAL_WORLD_SIZE"), "LOCAL_WORLD_SIZE") : c.world_size;
    VOLT_CHECK(get(env, "MASTER_ADDR") && get(env, "MASTER_PORT"), DistributedError,
               "RANK and WORLD_SIZE are set but MASTER_ADDR or MASTER_PORT is not; set both (torchrun does)");
    c.master_addr = *get(env, "MASTER_ADDR");
    c.port = static_cast<int>(to_int(*get(env, "MASTER_PORT"), "MASTER_PORT"));
  } else if (get(env, "SLURM_PROCID") && get(env, "SLURM_NTASKS")) {
    c.source = "slurm";
    c.rank = to_int(*get(env, "SLURM_PROCID"), "SLURM_PROCID");
    c.world_size = to_int(*get(env, "SLURM_NTASKS"), "SLURM_NTASKS");
    c.local_rank = get(env, "SLURM_LOCALID") ? to_int(*get(env, "SLURM_LOCALID"), "SLURM_LOCALID") : 0;
    c.local_world_size = get(env, "SLURM_NTASKS_PER_NODE")
                             ? to_int(*get(env, "SLURM_NTASKS_PER_NODE"), "SLURM_NTASKS_PER_NODE")
                             : c.world_size;
    c.master_addr = get(env, "MASTER_ADDR")
                        ? *get(env, "MASTER_ADDR")
                        : detail::first_slurm_host(get(env, "SLURM_NODELIST").value_or("127.0.0.1"));
    if (get(env, "MASTER_PORT")) {
      c.port = static_cast<int>(to_int(*get(env, "MASTER_PORT"), "MASTER_PORT"));
    } else {
      // Lightning's rule: a port derived from the job id, so every task agrees without talking.
      const int64_t job = get(env, "SLURM_JOB_ID") ? to_int(*get(env, "SLURM_JOB_ID"), "SLURM_JOB_ID") : 0;
      c.port = static_cast<int>(10000 + job % 20000);
    }
  }
  VOLT_CHECK(c.world_size >= 1 && c.rank >= 0 && c.rank < c.world_size, DistributedError, "rank ", c.rank,
             " is outside world size ", c.world_size, " (from ", c.source, " environment)");
  return c;
}

namespace detail {

std::string first_slurm_host(const std::string& nodelist) {
  // Take the first comma-separated entry outside brackets.
  std::string first;
  int depth = 0;
  for (char ch : nodelist) {
    if (ch == '[') ++depth;
    if (ch == ']') --depth;
    if (ch == ',' && depth == 0) break;
    first += ch;
  }
  const auto lb = first.find('[');
  if (lb == std::string::npos) return first;
  std::string prefix = first.substr(0, lb);
  std::string range = first.substr(lb + 1, first.find(']') - lb - 1);
  range = range.substr(0, range.find(','));
  return prefix + range.substr(0, range.find('-'));
}

int find_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  VOLT_CHECK(fd >= 0, DistributedError, "cannot open a socket to find a free port");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw DistributedError("cannot bind a socket on 127.0.0.1 to find a free port");
  }
  const int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

}  // namespace detail
}  // namespace volt
