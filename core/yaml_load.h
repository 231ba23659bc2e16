#pragma once
/// YAML text -> YAML::Node for everything a user hands volt (config files, overrides), bounded so
/// that no input makes a later walk of the tree crash or spin: yaml-cpp shares an aliased node
/// instead of copying it, so an alias that refers to itself (`a: &a [*a]`) makes a cycle and a few
/// hundred bytes of nested aliases ("billion laughs") a tree of 10^9 nodes. The text is scanned
/// first (yaml-cpp's event parser, no tree) and refused when an alias refers to a node it is part
/// of, the tree would have more than `max_nodes` nodes or nest deeper than `max_depth` once aliases
/// are expanded (an alias of a deep node, inside another deep node, nests as deep as both). YAML
/// merge keys (`<<: *base`, `<<: [*a, *b]`) are then resolved as YAML 1.1 defines them: the map's
/// own keys win, then the merged maps in order.
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>

namespace volt::detail {

struct YamlLimits {
  int64_t max_nodes = 1'000'000;  ///< after alias expansion
  int64_t max_depth = 200;        ///< after alias expansion
};

/// Parses `text`. Throws ConfigError naming `what` (e.g. "config file 'a.yaml'") and the line when
/// the text is not YAML or exceeds `limits`.
YAML::Node load_yaml(const std::string& text, const std::string& what, const YamlLimits& limits = {});

/// As load_yaml, for a file volt wrote inside a checkpoint (a sharded manifest, an archive's index):
/// as many values are allowed as the text has bytes (a large model's manifest is large, but no alias
/// may multiply it), and a refusal is a CheckpointError naming `what`.
YAML::Node load_checkpoint_yaml(const std::string& text, const std::string& what);

/// Merges config map `over` into `base` (a later config file, or a map given on the command line):
/// maps merge key by key, anything else replaces. A map naming another class (`class_path`), or
/// under the key "strategy" another strategy (`name`, or the other of the two forms), replaces the
/// old one whole: its options mean nothing to the new one.
void merge_config_maps(YAML::Node base, const YAML::Node& over);
/// Whether `over`, given for `base` under `key`, names another class or strategy (see above).
bool names_another_class(const YAML::Node& base, const YAML::Node& over, const std::string& key);

}  // namespace volt::detail
