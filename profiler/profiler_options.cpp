#include "volt/profiler/profiler_options.h"

#include <algorithm>
#include <cctype>

#include "volt/core/errors.h"
#include "volt/profiler/pytorch_profiler.h"
#include "volt/profiler/simple_profiler.h"

namespace volt {

namespace {
/// "simple" / "pytorch" for a name or class path (any case, "Profiler" suffix and module path
/// optional); "" when it names neither.
std::string normalize_kind(std::string s) {
  const auto dot = s.rfind('.');
  if (dot != std::string::npos) s = s.substr(dot + 1);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s.size() > 8 && s.compare(s.size() - 8, 8, "profiler") == 0) s.resize(s.size() - 8);
  return s == "simple" || s == "pytorch" ? s : "";
}
}  // namespace

void ProfilerOptions::validate() {
  if (kind.empty()) return;
  const std::string k = normalize_kind(kind);
  VOLT_CHECK(!k.empty(), ConfigError, "config key 'trainer.profiler': unknown profiler '", kind,
             "'; valid: simple, pytorch (or SimpleProfiler, PyTorchProfiler), null for none");
  kind = k;
}

std::unique_ptr<Profiler> make_profiler(const ProfilerOptions& o) {
  ProfilerOptions v = o;
  v.validate();
  if (v.kind == "simple") return std::make_unique<SimpleProfiler>(v.dirpath, v.filename);
  if (v.kind == "pytorch") return std::make_unique<PyTorchProfiler>(v.dirpath, v.filename);
  return nullptr;
}

namespace detail {

ProfilerOptions YamlCodec<ProfilerOptions>::decode(const YAML::Node& n, const std::string& key) {
  if (!n || n.IsNull()) return {};
  if (n.IsScalar()) return ProfilerOptions(n.Scalar());
  if (!n.IsMap()) type_error(key, "null, a profiler name (simple, pytorch) or {class_path, init_args}", n);
  ProfilerOptions o;
  for (const auto& kv : n) {
    const std::string k = kv.first.Scalar();
    VOLT_CHECK(k == "class_path" || k == "init_args", ConfigError, "unknown config key '", join_key(key, k),
               "'; valid: class_path, init_args");
  }
  VOLT_CHECK(n["class_path"] && n["class_path"].IsScalar(), ConfigError, "config key '", key,
             ".class_path': missing (SimpleProfiler or PyTorchProfiler)");
  o.kind = n["class_path"].Scalar();
  const YAML::Node args = n["init_args"];
  if (args && !args.IsNull()) {
    if (!args.IsMap()) type_error(key + ".init_args", "a map", args);
    for (const auto& kv : args) {
      const std::string k = kv.first.Scalar(), full = join_key(key + ".init_args", k);
      VOLT_CHECK(k == "dirpath" || k == "filename", ConfigError, "unknown config key '", full,
                 "'; valid: dirpath, filename");
      (k == "dirpath" ? o.dirpath : o.filename) = YamlCodec<std::string>::decode(kv.second, full);
    }
  }
  return o;
}

YAML::Node YamlCodec<ProfilerOptions>::encode(const ProfilerOptions& v) {
  if (v.kind.empty()) return YAML::Node();
  if (v.dirpath.empty() && v.filename.empty()) return YAML::Node(v.kind);
  YAML::Node out(YAML::NodeType::Map);
  const std::string k = normalize_kind(v.kind);
  out["class_path"] = k == "simple" ? "SimpleProfiler" : k == "pytorch" ? "PyTorchProfiler" : v.kind;
  out["init_args"]["dirpath"] = v.dirpath;
  out["init_args"]["filename"] = v.filename;
  return out;
}

}  // namespace detail
}  // namespace volt
