#include "volt/core/yaml_load.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "volt/core/errors.h"

namespace volt::detail {

namespace {

/// Counts the nodes the tree will have once every alias is expanded, without building it.
class BoundsCheck : public YAML::EventHandler {
 public:
  BoundsCheck(const YamlLimits& limits, std::string what) : limits_(limits), what_(std::move(what)) {}

  void OnDocumentStart(const YAML::Mark&) override {
    open_.clear();
    anchored_.clear();
    total_ = 0;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override { leaf(mark, anchor); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, const std::string&) override {
    leaf(mark, anchor);
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    auto it = anchored_.find(anchor);
    VOLT_CHECK(it != anchored_.end(), ConfigError, what_, ": the alias on line ", mark.line + 1,
               " refers to a node it is part of (a cycle); YAML anchors may only be used after their node ends");
    check_depth(mark, static_cast<int64_t>(open_.size()) + it->second.height);
    add(mark, it->second.size, it->second.height);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(mark, anchor);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open(mark, anchor);
  }
  void OnMapEnd() override { close(); }

 private:
  struct Open {
    YAML::anchor_t anchor;
    int64_t size;
    int64_t height;  // the deepest nesting of a child so far (0: only scalars)
  };
  /// A finished anchored node once expanded: its values, and its nesting (0 for a scalar).
  struct Anchored {
    int64_t size;
    int64_t height;
  };
  /// `depth`: the collections a value would sit in once every alias above it is expanded.
  void check_depth(const YAML::Mark& mark, int64_t depth) const {
    VOLT_CHECK(depth <= limits_.max_depth, ConfigError, what_, ": nested deeper than ", limits_.max_depth,
               " levels at line ", mark.line + 1, " (once its aliases are expanded); refused");
  }
  void add(const YAML::Mark& mark, int64_t n, int64_t height = 0) {
    total_ += n;
    VOLT_CHECK(total_ <= limits_.max_nodes, ConfigError, what_, ": more than ", limits_.max_nodes,
               " values once its aliases are expanded (at line ", mark.line + 1,
               "): refused, as a configuration never is that large (nested aliases that multiply, a \"billion "
               "laughs\"?)");
    if (!open_.empty()) {
      open_.back().size += n;
      open_.back().height = std::max(open_.back().height, height);
    }
  }
  void leaf(const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (anchor != YAML::NullAnchor) anchored_[anchor] = {1, 0};
    add(mark, 1);
  }
  void open(const YAML::Mark& mark, YAML::anchor_t anchor) {
    check_depth(mark, static_cast<int64_t>(open_.size()) + 1);
    add(mark, 1);
    open_.push_back({anchor, 0, 0});
  }
  void close() {
    const Open o = open_.back();
    open_.pop_back();
    if (!open_.empty()) {
      open_.back().size += o.size;
      open_.back().height = std::max(open_.back().height, o.height + 1);
    }
    if (o.anchor != YAML::NullAnchor) anchored_[o.anchor] = {o.size + 1, o.height + 1};
  }

  YamlLimits limits_;
  std::string what_;
  std::vector<Open> open_;
  std::unordered_map<YAML::anchor_t, Anchored> anchored_;  // finished anchored nodes, expanded
  int64_t total_ = 0;
};

bool is_merge_key(const YAML::Node& key) { return key.IsScalar() && key.Scalar() == "<<" && key.Tag() != "!"; }

/// Resolves `<<` in every map under `n` (children first, so merged maps are resolved themselves).
void resolve_merge_keys(YAML::Node n, const std::string& what) {
  if (n.IsSequence()) {
    for (auto child : n) resolve_merge_keys(child, what);
    return;
  }
  if (!n.IsMap()) return;
  YAML::Node merge;
  bool has_merge = false;
  for (auto kv : n) {
    if (is_merge_key(kv.first)) {
      merge = kv.second;
      has_merge = true;
    } else {
      resolve_merge_keys(kv.second, what);
    }
  }
  if (!has_merge) return;
  std::vector<YAML::Node> sources;
  if (merge.IsMap()) {
    sources.push_back(merge);
  } else if (merge.IsSequence()) {
    for (const auto& m : merge) sources.push_back(m);
  } else {
    sources.push_back(merge);  // refused just below
  }
  for (auto& s : sources) {
    VOLT_CHECK(s.IsMap(), ConfigError, what, ": a merge key '<<' (line ", merge.Mark().line + 1,
               ") takes a map or a list of maps, e.g. '<<: *base' or '<<: [*a, *b]'");
    resolve_merge_keys(s, what);
  }
  n.remove("<<");
  // The map's own keys win, then the merged maps in the order given.
  for (const auto& s : sources)
    for (const auto& kv : s) {
      const std::string key = kv.first.Scalar();
      const YAML::Node& own = n;                       // a const lookup adds no entry
      if (!own[key]) n[key] = YAML::Clone(kv.second);  // a copy: an override must not reach the source
    }
}

}  // namespace

YAML::Node load_yaml(const std::string& text, const std::string& what, const YamlLimits& limits) {
  try {
    {
      std::istringstream in(text);
      YAML::Parser parser(in);
      BoundsCheck check(limits, what);
      while (parser.HandleNextDocument(check)) {
      }
    }
    // yaml-cpp's Load keeps the first document and drops the rest without a word; empty ones (a
    // lone '---' at the end) hold nothing to drop.
    std::vector<YAML::Node> documents;
    for (auto& d : YAML::LoadAll(text))
      if (!d.IsNull()) documents.push_back(d);
    VOLT_CHECK(documents.size() <= 1, ConfigError, what, ": holds ", documents.size(),
               " YAML documents (separated by '---'); one is read: merge them into one (a configuration can be "
               "split over several --config files instead, later ones overriding earlier ones)");
    YAML::Node n = documents.empty() ? YAML::Node() : documents.front();
    resolve_merge_keys(n, what);
    return n;
  } catch (const YAML::Exception& e) {
    throw ConfigError(str_cat(what, ": ", e.what()));
  }
}

bool names_another_class(const YAML::Node& base, const YAML::Node& over, const std::string& key) {
  // {class_path, init_args} anywhere; {name, ...} only where it names a strategy (elsewhere "name"
  // is an ordinary argument: a logger's run name).
  std::vector<const char*> ids{"class_path"};
  if (key == "strategy") ids.push_back("name");
  bool over_names = false;
  for (const char* k : ids) {
    if (!over[k]) continue;
    over_names = true;
    if (base[k] && base[k].IsScalar() && over[k].IsScalar() && base[k].Scalar() == over[k].Scalar()) return false;
  }
  return over_names;  // named, and not as base is named (another value, or the other form)
}

void merge_config_maps(YAML::Node base, const YAML::Node& over) {
  for (const auto& kv : over) {
    const std::string k = kv.first.Scalar();
    const YAML::Node& b = base;  // a const lookup adds no entry
    if (kv.second.IsMap() && b[k] && b[k].IsMap() && !names_another_class(b[k], kv.second, k))
      merge_config_maps(base[k], kv.second);
    else
      base[k] = YAML::Clone(kv.second);
  }
}

YAML::Node load_checkpoint_yaml(const std::string& text, const std::string& what) {
  YamlLimits limits;
  limits.max_nodes = std::max<int64_t>(limits.max_nodes, static_cast<int64_t>(text.size()));
  try {
    return load_yaml(text, what, limits);
  } catch (const ConfigError& e) {
    throw CheckpointError(e.what());
  }
}

}  // namespace volt::detail
