#pragma once
/// Which network interface a rank's collectives use. Gloo binds each process group to a device
/// (an interface and an address); the common case needs no variable at all:
///   - GLOO_SOCKET_IFNAME (a comma-separated list, as PyTorch reads it): those interfaces;
///   - else the interface whose address reaches MASTER_ADDR (the route the kernel would take), so
///     ranks on one host talk over loopback and ranks on several over the link between them.
/// NCCL reads its own variables (NCCL_SOCKET_IFNAME, ...); volt sets NCCL_SOCKET_IFNAME to the same
/// choice only when it is unset and the master is on another host.
#include <string>
#include <vector>

namespace volt::detail {

struct NetworkInterface {
  std::string name;     // "eth0"
  std::string address;  // "10.231.0.2" (IPv4)
};

/// The interfaces that are up with an IPv4 address.
std::vector<NetworkInterface> list_interfaces();
/// "lo (127.0.0.1), eth0 (10.231.0.2)": for messages.
std::string describe_interfaces(const std::vector<NetworkInterface>& interfaces);

/// What a process group binds to: interface names (from GLOO_SOCKET_IFNAME) or one local address.
struct DeviceChoice {
  std::vector<std::string> interfaces;  // non-empty: one Gloo device per interface
  std::string address;                  // else: bind to this local address
  std::string interface_name;           // the interface that holds `address` ("" if unknown)
  std::string why;                      // "GLOO_SOCKET_IFNAME", "reaches MASTER_ADDR=..."
};

/// Throws DistributedError naming this host's interfaces when none has a route to `master_addr` (or
/// it does not resolve).
void check_route(const std::string& master_addr);

/// Chooses the device for a job whose master is `master_addr`; `ifname_env` is GLOO_SOCKET_IFNAME's
/// value ("" when unset). Throws DistributedError naming the interfaces it tried when none fits.
DeviceChoice choose_device(const std::string& master_addr, const std::string& ifname_env);

}  // namespace volt::detail
