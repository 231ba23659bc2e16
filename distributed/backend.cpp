#include "volt/distributed/backend.h"

#include <cstdlib>
// The PyTorch wheel's LibTorch ships no gloo headers: Gloo is then unavailable (NCCL remains)
// unless the build is given some (VOLT_GLOO_INCLUDE_DIR, see scripts/gpu.sh).
#if __has_include(<gloo/algorithm.h>)
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#define VOLT_HAVE_GLOO 1
#else
#define VOLT_HAVE_GLOO 0
#endif
#if defined(VOLT_GLOO_EXPECTED) && !VOLT_HAVE_GLOO
#error "VOLT_GLOO_INCLUDE_DIR was given, but <gloo/algorithm.h> is not found through it"
#endif
#include <torch/csrc/distributed/c10d/Store.hpp>
#ifdef VOLT_WITH_CUDA
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "volt/core/errors.h"
#include "volt/distributed/network_interface.h"

namespace volt::detail {

struct BackendDevices {
  std::string backend;
  DeviceChoice choice;
#if VOLT_HAVE_GLOO
  std::vector<std::shared_ptr<::gloo::transport::Device>> gloo;
#endif
};

bool have_gloo() { return VOLT_HAVE_GLOO != 0; }

bool have_nccl() {
#ifdef VOLT_WITH_CUDA
  return true;
#else
  return false;
#endif
}

namespace {
bool is_loopback(const std::string& addr) { return addr == "localhost" || addr.rfind("127.", 0) == 0; }
}  // namespace

std::shared_ptr<BackendDevices> open_devices(const std::string& backend, const std::string& master_addr) {
  auto d = std::make_shared<BackendDevices>();
  d->backend = backend;
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (backend == "nccl") {
    // NCCL chooses its interfaces itself; it is told only what volt would choose, when nobody has.
    if (is_loopback(master_addr) || std::getenv("NCCL_SOCKET_IFNAME")) return d;
    d->choice = choose_device(master_addr, "");
    if (!d->choice.interface_name.empty()) ::setenv("NCCL_SOCKET_IFNAME", d->choice.interface_name.c_str(), 0);
    return d;
  }
  d->choice = choose_device(master_addr, ifname ? ifname : "");
#if VOLT_HAVE_GLOO
  try {
    for (const auto& name : d->choice.interfaces)
      d->gloo.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
    if (d->choice.interfaces.empty())
      d->gloo.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(d->choice.address));
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    throw DistributedError(str_cat("cannot open a gloo device on ", describe(*d), ": ", msg.substr(0, msg.find('\n')),
                                   "; this host has ", describe_interfaces(list_interfaces())));
  }
#endif
  return d;
}

std::string describe(const BackendDevices& d) {
  const DeviceChoice& c = d.choice;
  if (!c.interfaces.empty()) {
    std::string names;
    for (const auto& n : c.interfaces) names += (names.empty() ? "" : ", ") + n;
    return str_cat(d.backend, " on ", names, " (", c.why, ")");
  }
  if (c.address.empty()) return d.backend + " (its own choice of interface)";
  return str_cat(d.backend, " on ", c.interface_name.empty() ? "?" : c.interface_name, " (", c.address, "), ", c.why);
}

std::string local_address(const BackendDevices& d) { return d.choice.address; }

c10::intrusive_ptr<compat::C10dBackend> make_backend(const std::string& backend,
                                                     const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                     std::chrono::milliseconds timeout, const BackendDevices& devices) {
#ifdef VOLT_WITH_CUDA
  if (backend == "nccl") {
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = timeout;
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, opts);
  }
#endif
#if !VOLT_HAVE_GLOO
  throw DistributedError("the gloo backend is not available in this build (LibTorch without gloo headers); use nccl");
#else
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  opts->devices = devices.gloo;
  opts->threads = 2;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
#endif
}

}  // namespace volt::detail
