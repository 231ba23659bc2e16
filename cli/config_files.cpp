#include "volt/cli/config_files.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "volt/cli/cli.h"
#include "volt/core/errors.h"
#include "volt/core/options.h"
#include "volt/core/yaml_load.h"

namespace volt {

namespace detail {

namespace {

/// The text of a config file, with errors that say what is wrong with the path.
std::string read_config_text(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  VOLT_CHECK(st.type() != fs::file_type::not_found, ConfigError, "config file '", path, "' does not exist");
  VOLT_CHECK(!ec, ConfigError, "config file '", path, "': ", ec.message());
  VOLT_CHECK(st.type() != fs::file_type::directory, ConfigError, "config file '", path,
             "' is a folder; --config takes a YAML file");
  // A configuration is a few kilobytes; parsing tens of megabytes takes seconds and gigabytes.
  constexpr uintmax_t kMaxConfigBytes = uintmax_t{8} << 20;
  const uintmax_t bytes = fs::file_size(path, ec);
  VOLT_CHECK(ec || bytes <= kMaxConfigBytes, ConfigError, "config file '", path, "' is ", bytes / (1 << 20),
             " MiB; a config is at most ", kMaxConfigBytes >> 20,
             " MiB (data belongs in the data module, not in the config): is it the right file?");
  std::ifstream in(path, std::ios::binary);
  VOLT_CHECK(in.good(), ConfigError, "config file '", path, "' cannot be read: ", std::strerror(errno));
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

/// Throws for a key given twice in one map (YAML forbids it; yaml-cpp would keep the first silently).
void check_unique_keys(const YAML::Node& n, const std::string& where, const std::string& prefix) {
  if (n.IsMap()) {
    std::set<std::string> seen;
    for (const auto& kv : n) {
      const std::string key = kv.first.Scalar();
      const std::string full = prefix.empty() ? key : prefix + "." + key;
      VOLT_CHECK(seen.insert(key).second, ConfigError, "config file '", where, "': key '", full,
                 "' is given twice (line ", kv.first.Mark().line + 1, ")");
      check_unique_keys(kv.second, where, full);
    }
  } else if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i) check_unique_keys(n[i], where, prefix + "[" + std::to_string(i) + "]");
  }
}

}  // namespace

YAML::Node read_config_file(const std::string& path) {
  YAML::Node file = load_yaml(read_config_text(path), "config file '" + path + "'");
  if (file.IsNull()) return file;
  VOLT_CHECK(file.IsMap(), ConfigError, "config file '", path, "': the top level must be a map");
  check_unique_keys(file, path, "");
  // An empty section (`trainer:` with every key commented out) sets nothing; merged over an earlier
  // file, it would drop every key that file set.
  for (const char* section : {"trainer", "model", "data"}) {
    const YAML::Node& f = file;  // a const lookup adds no entry
    if (f[section] && f[section].IsNull()) file.remove(section);
  }
  return file;
}

void merge_yaml(YAML::Node base, const YAML::Node& over) { merge_config_maps(base, over); }

void check_section_override(const std::string& key, const std::string& value) {
  if (key != "trainer" && key != "model" && key != "data") return;
  const YAML::Node parsed = load_yaml(value, "override --" + key + ": cannot parse value '" + value + "'");
  VOLT_CHECK(!parsed.IsNull(), ConfigError, "override --", key, "=", value, ": setting the whole '", key,
             "' section to null would silently drop every ", key,
             " key the config files set; override its keys one by one (--", key,
             ".KEY=VALUE), or remove the section from the config file");
}

}  // namespace detail

namespace cli {

YAML::Node load_configs(const std::vector<std::string>& paths, const std::vector<std::string>& overrides) {
  YAML::Node root(YAML::NodeType::Map);
  for (const auto& path : paths) {
    const YAML::Node file = detail::read_config_file(path);
    if (!file.IsNull()) detail::merge_yaml(root, file);
  }
  for (const auto& o : overrides) {
    const auto eq = o.find('=');
    detail::check_section_override(o.substr(0, eq), eq == std::string::npos ? "" : o.substr(eq + 1));
    apply_override(root, o.substr(0, eq), o.substr(eq + 1));
  }
  return root;
}

YAML::Node load_config(const std::string& path, const std::vector<std::string>& overrides) {
  return load_configs(path.empty() ? std::vector<std::string>{} : std::vector<std::string>{path}, overrides);
}

}  // namespace cli

}  // namespace volt
