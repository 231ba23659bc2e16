#pragma once
/// Reading config files and merging YAML trees for the CLI. Internal to cli/.
#include <yaml-cpp/yaml.h>

#include <string>

namespace volt::detail {

/// A config file's top-level map (null for an empty file), without its empty sections (`trainer:`
/// with every key commented out). Errors name the file: missing, a folder, unreadable, not YAML,
/// not a map, a key given twice.
YAML::Node read_config_file(const std::string& path);
/// `over` merged into `base`: maps key by key, anything else replaced (LightningCLI's order).
void merge_yaml(YAML::Node base, const YAML::Node& over);
/// Refuses (ConfigError naming the key) an override that sets a whole section (trainer, model,
/// data) to null: it would silently drop everything the config files set there.
void check_section_override(const std::string& key, const std::string& value);

}  // namespace volt::detail
