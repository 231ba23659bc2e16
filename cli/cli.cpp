#include "volt/cli/cli.h"

#include <c10/util/Exception.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "volt/checkpoint/checkpoint.h"
#include "volt/core/errors.h"
#include "volt/core/options.h"

namespace volt::cli {

namespace {

constexpr const char* kUsage =
    "usage: volt {fit,validate,test} --config FILE [--config FILE ...] [--KEY=VALUE ...] [--print_config]\n"
    "       volt consolidate SHARDED_CHECKPOINT [-o FILE] [--overwrite]\n"
    "       volt [SUBCOMMAND] --help\n"
    "  --config FILE        a YAML config with sections trainer, model, data, ckpt_path, seed_everything;\n"
    "                       several are merged in order (later files override earlier keys)\n"
    "  --trainer.max_steps=20, --model.ninp=64, ...   override any key (dotted path, YAML value)\n"
    "  --print_config       print the resolved config and exit\n"
    "  consolidate          turn a sharded checkpoint folder into one full checkpoint file\n"
    "                       (default FILE: SHARDED_CHECKPOINT.consolidated), tensor by tensor\n";

/// The output may not be the input or inside it (that would destroy the source), and replaces an
/// existing file only with --overwrite.
void check_consolidate_output(const std::string& src, const std::string& dst, bool overwrite) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path s = fs::weakly_canonical(src, ec), d = fs::weakly_canonical(dst, ec);
  auto rel = d.lexically_relative(s);
  const bool inside = !rel.empty() && *rel.begin() != "..";
  VOLT_CHECK(!inside, ConfigError, "consolidate: the output '", dst, "' is ",
             d == s ? "the input itself" : "inside the input '" + src + "'", "; write it elsewhere (-o FILE)");
  VOLT_CHECK(overwrite || !fs::exists(fs::symlink_status(dst, ec)), ConfigError, "consolidate: '", dst,
             "' exists; pass --overwrite to replace it, or choose another -o FILE");
}

/// `volt consolidate DIR [-o FILE] [--overwrite]`.
int consolidate(int argc, char** argv) {
  std::string src, dst;
  bool overwrite = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--overwrite") {
      overwrite = true;
    } else if (a == "-o" || a == "--output") {
      VOLT_CHECK(i + 1 < argc, ConfigError, "consolidate: ", a, " needs a file name\n", kUsage);
      dst = argv[++i];
    } else if (a.rfind("--output=", 0) == 0) {
      dst = a.substr(9);
    } else {
      VOLT_CHECK(a.rfind("-", 0) != 0 && src.empty(), ConfigError, "consolidate: unexpected argument '", a, "'\n",
                 kUsage);
      src = a;
    }
  }
  VOLT_CHECK(!src.empty(), ConfigError, "consolidate: missing the sharded checkpoint folder\n", kUsage);
  while (src.size() > 1 && src.back() == '/') src.pop_back();
  if (dst.empty()) dst = src + ".consolidated";
  check_consolidate_output(src, dst, overwrite);
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t bytes = consolidate_checkpoint(src, dst);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("consolidated {} into {}: {:.1f} MB in {:.2f} s", src, dst, static_cast<double>(bytes) / 1e6, s);
  return 0;
}

struct Args {
  std::string subcommand;
  std::vector<std::string> configs;
  std::vector<std::string> overrides;  // "key=value"
  bool print_config = false;
};

Args parse_args(int argc, char** argv) {
  Args a;
  a.subcommand = argv[1];
  VOLT_CHECK(
      a.subcommand == "consolidate" || a.subcommand == "fit" || a.subcommand == "validate" || a.subcommand == "test",
      ConfigError, "unknown subcommand '", a.subcommand, "'\n", kUsage);
  for (int i = 2; i < argc; ++i) {
    std::string s = argv[i];
    VOLT_CHECK(s.rfind("--", 0) == 0, ConfigError, "unexpected argument '", s, "'\n", kUsage);
    s = s.substr(2);
    if (s == "print_config") {
      a.print_config = true;
      continue;
    }
    std::string key = s, value;
    const auto eq = s.find('=');
    if (eq != std::string::npos) {
      key = s.substr(0, eq);
      value = s.substr(eq + 1);
    } else {
      VOLT_CHECK(i + 1 < argc, ConfigError, "option --", key, " needs a value");
      value = argv[++i];
    }
    if (key == "config")
      a.configs.push_back(value);
    else
      a.overrides.push_back(key + "=" + value);
  }
  return a;
}

}  // namespace

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

/// `over` merged into `base`: maps key by key, anything else replaced (LightningCLI's order).
void merge_into(YAML::Node base, const YAML::Node& over) {
  for (const auto& kv : over) {
    const std::string key = kv.first.Scalar();
    if (kv.second.IsMap() && base[key] && base[key].IsMap())
      merge_into(base[key], kv.second);
    else
      base[key] = YAML::Clone(kv.second);
  }
}

}  // namespace

YAML::Node load_configs(const std::vector<std::string>& paths, const std::vector<std::string>& overrides) {
  YAML::Node root(YAML::NodeType::Map);
  for (const auto& path : paths) {
    YAML::Node file;
    try {
      file = YAML::Load(read_config_text(path));
    } catch (const YAML::Exception& e) {
      throw ConfigError(detail::str_cat("config file '", path, "': ", e.what()));
    }
    if (file.IsNull()) continue;
    VOLT_CHECK(file.IsMap(), ConfigError, "config file '", path, "': the top level must be a map");
    check_unique_keys(file, path, "");
    merge_into(root, file);
  }
  for (const auto& o : overrides) {
    const auto eq = o.find('=');
    apply_override(root, o.substr(0, eq), o.substr(eq + 1));
  }
  return root;
}

YAML::Node load_config(const std::string& path, const std::vector<std::string>& overrides) {
  return load_configs(path.empty() ? std::vector<std::string>{} : std::vector<std::string>{path}, overrides);
}

int run(int argc, char** argv, const App& app) {
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--help" || a == "-h" || (i == 1 && a == "help")) {
        std::cout << kUsage;
        return 0;
      }
    }
    VOLT_CHECK(argc >= 2, ConfigError, "missing subcommand\n", kUsage);
    if (std::string(argv[1]) == "consolidate") return consolidate(argc, argv);
    Args args = parse_args(argc, argv);
    VOLT_CHECK(!args.configs.empty(), ConfigError, args.subcommand,
               ": no --config FILE given (a run needs its trainer, model and data sections; see configs/)\n", kUsage);
    Command cmd{args.subcommand, load_configs(args.configs, args.overrides), args.print_config};
    return app(cmd);
  } catch (const ConfigError& e) {
    std::cerr << "volt: config error: " << e.what() << std::endl;
    return 2;
  } catch (const c10::Error& e) {
    // LibTorch's own errors (an allocation that failed, say): the message, not its C++ stack trace.
    std::cerr << "volt: error: " << e.what_without_backtrace() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "volt: error: " << e.what() << std::endl;
    return 1;
  }
}

}  // namespace volt::cli
