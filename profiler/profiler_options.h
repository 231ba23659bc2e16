#pragma once
/// The `trainer.profiler` option, as Lightning users write it:
///   profiler: null                # the default: no profiler (a scope costs one branch)
///   profiler: simple              # time per phase and hook, a table at the end of fit
///   profiler: pytorch             # LibTorch's profiler: a Chrome trace (trace.json)
///   profiler:                     # LightningCLI's form, with constructor arguments
///     class_path: SimpleProfiler  # or PyTorchProfiler
///     init_args: {dirpath: prof, filename: run1}
/// C++: options.profiler = "simple";
#include <cstdint>
#include <memory>
#include <string>

#include "volt/core/options.h"
#include "volt/core/options_help.h"

namespace volt {

class Profiler;

struct ProfilerOptions {
  std::string kind;      ///< "" (none), "simple" or "pytorch" (class names accepted, normalized by validate)
  std::string dirpath;   ///< "" = the logger's log_dir, else trainer.default_root_dir
  std::string filename;  ///< "" = "profile" (simple: fit-profile.txt) / "trace" (pytorch: trace.json)

  ProfilerOptions() = default;
  ProfilerOptions(const char* k) : kind(k) {}             // NOLINT: implicit on purpose
  ProfilerOptions(std::string k) : kind(std::move(k)) {}  // NOLINT
  explicit operator bool() const { return !kind.empty(); }
  /// Normalizes the kind ("SimpleProfiler" -> "simple"); ConfigError naming trainer.profiler otherwise.
  void validate();
};

/// The profiler `options` names (nullptr when none).
std::unique_ptr<Profiler> make_profiler(const ProfilerOptions& options);

namespace detail {
template <>
struct YamlCodec<ProfilerOptions> {
  static ProfilerOptions decode(const YAML::Node& n, const std::string& key);
  static YAML::Node encode(const ProfilerOptions& v);
};
template <>
struct HelpType<ProfilerOptions> {
  static std::string name() { return "null|simple|pytorch|map"; }
};
}  // namespace detail

}  // namespace volt
