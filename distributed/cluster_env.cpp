#include "volt/distributed/cluster_env.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

#include "volt/core/errors.h"

namespace volt {

namespace {
struct Vars {
  const std::map<std::string, std::string>* env;
  std::optional<std::string> get(const char* key) const {
    if (env) {
      auto it = env->find(key);
      return it == env->end() ? std::nullopt : std::optional<std::string>(it->second);
    }
    const char* v = std::getenv(key);
    return v ? std::optional<std::string>(v) : std::nullopt;
  }
  bool has(const char* key) const { return get(key).has_value(); }
  int64_t integer(const char* key) const {
    const std::string s = *get(key);
    try {
      size_t pos = 0;
      int64_t v = std::stoll(s, &pos);
      if (pos == s.size()) return v;
    } catch (...) {
    }
    throw DistributedError(detail::str_cat("environment variable ", key, "='", s, "' is not an integer"));
  }
  /// A TCP port, range-checked before it narrows to int (2^32 + 29500 is not 29500).
  int port(const char* key) const {
    const int64_t p = integer(key);
    VOLT_CHECK(p > 0 && p < 65536, DistributedError, "environment variable ", key, "=", p,
               " is not a TCP port (1-65535)");
    return static_cast<int>(p);
  }
  /// The first of `keys` that is set, as an integer; `fallback` when none is.
  int64_t first_int(std::initializer_list<const char*> keys, int64_t fallback) const {
    for (const char* k : keys)
      if (has(k)) return integer(k);
    return fallback;
  }
  std::optional<std::string> first(std::initializer_list<const char*> keys) const {
    for (const char* k : keys)
      if (auto v = get(k)) return v;
    return std::nullopt;
  }
};

int64_t ceil_div(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : 1; }

void read_torchrun(const Vars& v, ClusterEnv& c) {
  c.source = v.has("VOLT_LAUNCHED") ? "volt" : "torchrun";
  c.rank = v.integer("RANK");
  c.world_size = v.integer("WORLD_SIZE");
  VOLT_CHECK(c.world_size >= 1, DistributedError, "environment variable WORLD_SIZE must be >= 1, got ", c.world_size);
  c.local_rank = v.first_int({"LOCAL_RANK"}, c.rank);
  c.local_world_size = v.first_int({"LOCAL_WORLD_SIZE"}, c.world_size);
  VOLT_CHECK(c.local_world_size >= 1, DistributedError, "environment variable LOCAL_WORLD_SIZE must be >= 1, got ",
             c.local_world_size);
  c.node_rank = v.first_int({"GROUP_RANK", "NODE_RANK"}, c.rank / c.local_world_size);
  c.num_nodes = v.first_int({"GROUP_WORLD_SIZE"}, ceil_div(c.world_size, c.local_world_size));
  VOLT_CHECK(v.has("MASTER_ADDR") && v.has("MASTER_PORT"), DistributedError,
             "RANK and WORLD_SIZE are set but MASTER_ADDR or MASTER_PORT is not; set both (torchrun does)");
  c.master_addr = *v.get("MASTER_ADDR");
  c.port = v.port("MASTER_PORT");
  c.port_given = true;
}

void read_slurm(const Vars& v, ClusterEnv& c) {
  c.source = "slurm";
  c.rank = v.integer("SLURM_PROCID");
  c.world_size = v.integer("SLURM_NTASKS");
  c.local_rank = v.first_int({"SLURM_LOCALID"}, 0);
  c.node_rank = v.first_int({"SLURM_NODEID"}, 0);
  c.num_nodes = v.first_int({"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"}, 1);
  if (v.has("SLURM_NTASKS_PER_NODE")) {
    c.local_world_size = v.integer("SLURM_NTASKS_PER_NODE");
  } else if (auto spec = v.first({"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"})) {
    c.local_world_size = detail::first_slurm_tasks_per_node(*spec);
  } else {
    c.local_world_size = ceil_div(c.world_size, c.num_nodes);
  }
  // The step's node list names the nodes this srun runs on; the job's may hold more.
  const auto nodes = v.first({"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  c.master_addr = v.has("MASTER_ADDR") ? *v.get("MASTER_ADDR") : detail::first_slurm_host(nodes.value_or("127.0.0.1"));
  if (v.has("MASTER_PORT")) {
    c.port = v.port("MASTER_PORT");
  } else {
    // Lightning's rule: a port derived from the job id, so every task agrees without talking.
    c.port = static_cast<int>(10000 + v.first_int({"SLURM_JOB_ID"}, 0) % 20000);
  }
  c.port_given = true;
}

void read_self_launch(const Vars& v, ClusterEnv& c) {
  // Lightning's LightningEnvironment: this node's launcher starts its ranks; the others are told
  // where to meet by NODE_RANK, MASTER_ADDR and MASTER_PORT.
  c.node_rank = v.first_int({"NODE_RANK", "GROUP_RANK"}, 0);
  if (auto a = v.get("MASTER_ADDR")) c.master_addr = *a;
  if (v.has("MASTER_PORT")) {
    c.port = v.port("MASTER_PORT");
    c.port_given = true;
  }
  VOLT_CHECK(c.node_rank >= 0, DistributedError, "environment variable NODE_RANK must be >= 0, got ", c.node_rank);
}
}  // namespace

ClusterEnv ClusterEnv::detect(const std::map<std::string, std::string>* env) {
  const Vars v{env};
  ClusterEnv c;
  if (v.has("RANK") && v.has("WORLD_SIZE"))
    read_torchrun(v, c);
  else if (v.has("SLURM_PROCID") && v.has("SLURM_NTASKS"))
    read_slurm(v, c);
  else
    read_self_launch(v, c);
  VOLT_CHECK(c.world_size >= 1 && c.rank >= 0 && c.rank < c.world_size, DistributedError, "rank ", c.rank,
             " is outside world size ", c.world_size, " (from ", c.source, " environment)");
  VOLT_CHECK(c.port > 0 && c.port < 65536, DistributedError, "MASTER_PORT=", c.port,
             " is not a TCP port (1-65535) (from ", c.source, " environment)");
  if (c.source != "none") {
    VOLT_CHECK(c.local_rank >= 0 && c.local_rank < c.local_world_size, DistributedError, "local rank ", c.local_rank,
               " is outside the ", c.local_world_size, " ranks of its node (from ", c.source, " environment)");
    VOLT_CHECK(c.num_nodes >= 1 && c.node_rank >= 0 && c.node_rank < c.num_nodes, DistributedError, "node rank ",
               c.node_rank, " is outside the job's ", c.num_nodes, " node(s) (from ", c.source, " environment)");
  }
  return c;
}

std::string ClusterEnv::describe_node(int64_t node) const {
  const int64_t first = node * local_world_size;
  const int64_t last = std::min(world_size, first + local_world_size) - 1;
  return first == last ? detail::str_cat("rank ", first) : detail::str_cat("ranks ", first, "-", last);
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

int64_t first_slurm_tasks_per_node(const std::string& spec) {
  try {
    size_t pos = 0;
    const int64_t n = std::stoll(spec, &pos);
    if (pos > 0 && n >= 1) return n;
  } catch (...) {
  }
  throw DistributedError(detail::str_cat("SLURM tasks per node '", spec, "' is not of SLURM's form N or N(xK),..."));
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
