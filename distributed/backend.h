#pragma once
/// Backend construction for ProcessGroup: Gloo (CPU tensors) or NCCL (CUDA tensors), bound to the
/// network device distributed/network_interface.h chooses. The world group chooses the device once;
/// its sub-groups reuse it, so every group of a job talks over the same interface.
#include <chrono>
#include <memory>
#include <string>

#include "volt/core/compat.h"

namespace c10d {
class Store;
}  // namespace c10d

namespace volt::detail {

/// The transport of a job's groups (opaque: Gloo's devices, or nothing for NCCL, which picks its own).
struct BackendDevices;

/// Whether this build has Gloo (the PyTorch wheel's LibTorch ships no gloo headers) and NCCL.
bool have_gloo();
bool have_nccl();

/// Chooses and opens the devices for `backend` ("gloo", "nccl") in a job whose master is
/// `master_addr`, reading GLOO_SOCKET_IFNAME; for NCCL with a remote master and NCCL_SOCKET_IFNAME
/// unset, sets it to the interface that reaches the master. Throws DistributedError naming the
/// interfaces it tried.
std::shared_ptr<BackendDevices> open_devices(const std::string& backend, const std::string& master_addr);
/// "gloo on eth0 (10.231.0.2), the route to MASTER_ADDR=10.231.0.1": for the log.
std::string describe(const BackendDevices& devices);
/// The local address the devices bind to ("" when chosen by interface name or by NCCL).
std::string local_address(const BackendDevices& devices);

/// A backend of `size` ranks rendezvousing through `store`.
c10::intrusive_ptr<compat::C10dBackend> make_backend(const std::string& backend,
                                                     const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                     std::chrono::milliseconds timeout, const BackendDevices& devices);

}  // namespace volt::detail
