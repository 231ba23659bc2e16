#include "volt/core/options_help.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace volt {

namespace detail {

namespace {
/// A float as written by hand (0.2, not yaml-cpp's 0.20000000000000001): the shortest of 15 or 17
/// digits that reads back as the same number; other text unchanged.
std::string short_float(const std::string& s) {
  if (s.find('.') == std::string::npos) return s;
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (...) {
    return s;
  }
  if (pos != s.size()) return s;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.15g", v);
  if (std::stod(buf) != v) return s;
  std::string out = buf;
  if (out.find_first_of(".eEn") == std::string::npos) out += ".0";  // still reads as a float
  return out;
}
}  // namespace

std::string yaml_inline(const YAML::Node& node) {
  if (!node || node.IsNull()) return "null";
  if (node.IsScalar() && node.Scalar().empty()) return "\"\"";
  if (node.IsScalar()) {
    YAML::Emitter out;
    out << short_float(node.Scalar());
    return out.c_str();
  }
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

std::string yaml_shape(const YAML::Node& node) {
  if (node.IsMap()) return "map";
  if (node.IsSequence()) return "list";
  return "value";
}

}  // namespace detail

std::string format_options_help(const std::vector<OptionHelp>& entries, const std::string& key_prefix,
                                const std::string& indent) {
  size_t width = 0;
  for (const auto& e : entries) width = std::max(width, key_prefix.size() + e.key.size());
  std::ostringstream os;
  for (const auto& e : entries) {
    const std::string key = key_prefix + e.key;
    os << indent << key << std::string(width - key.size() + 2, ' ') << "(type: " << e.type
       << ", default: " << e.default_value << ")" << (e.note.empty() ? "" : "  " + e.note) << "\n";
  }
  return os.str();
}

}  // namespace volt
