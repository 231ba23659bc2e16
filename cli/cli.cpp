#include "volt/cli/cli.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "volt/checkpoint/checkpoint.h"
#include "volt/core/errors.h"
#include "volt/core/options.h"

namespace volt::cli {

namespace {

constexpr const char* kUsage =
    "usage: volt {fit,validate,test} --config FILE [--KEY=VALUE ...] [--print_config] [--ckpt_path PATH]\n"
    "       volt consolidate SHARDED_CHECKPOINT [-o FILE]\n"
    "  --config FILE        a YAML config with sections trainer, model, data, ckpt_path, seed_everything\n"
    "  --trainer.max_steps=20, --model.ninp=64, ...   override any key (dotted path, YAML value)\n"
    "  --print_config       print the resolved config and exit\n"
    "  consolidate          turn a sharded checkpoint folder into one full checkpoint file\n"
    "                       (default FILE: SHARDED_CHECKPOINT.consolidated), tensor by tensor\n";

/// `volt consolidate DIR [-o FILE]`.
int consolidate(int argc, char** argv) {
  std::string src, dst;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-o" || a == "--output") {
      VOLT_CHECK(i + 1 < argc, ConfigError, "consolidate: ", a, " needs a file name\n", kUsage);
      dst = argv[++i];
    } else if (a.rfind("--output=", 0) == 0) {
      dst = a.substr(9);
    } else {
      VOLT_CHECK(a.rfind("-", 0) != 0 && src.empty(), ConfigError, "consolidate: unexpected argument '", a, "'\n", kUsage);
      src = a;
    }
  }
  VOLT_CHECK(!src.empty(), ConfigError, "consolidate: missing the sharded checkpoint folder\n", kUsage);
  while (src.size() > 1 && src.back() == '/') src.pop_back();
  if (dst.empty()) dst = src + ".consolidated";
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t bytes = consolidate_checkpoint(src, dst);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("consolidated {} into {}: {:.1f} MB in {:.2f} s", src, dst, static_cast<double>(bytes) / 1e6, s);
  return 0;
}

struct Args {
  std::string subcommand;
  std::string config;
  std::vector<std::string> overrides;  // "key=value"
  bool print_config = false;
};

Args parse_args(int argc, char** argv) {
  Args a;
  VOLT_CHECK(argc >= 2, ConfigError, "missing subcommand\n", kUsage);
  a.subcommand = argv[1];
  VOLT_CHECK(a.subcommand == "consolidate" || a.subcommand == "fit" || a.subcommand == "validate" || a.subcommand == "test", ConfigError,
             "unknown subcommand '", a.subcommand, "'\n", kUsage);
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
    if (key == "config") a.config = value;
    else a.overrides.push_back(key + "=" + value);
  }
  return a;
}

}  // namespace

YAML::Node load_config(const std::string& path, const std::vector<std::string>& overrides) {
  YAML::Node root(YAML::NodeType::Map);
  if (!path.empty()) {
    VOLT_CHECK(std::filesystem::exists(path), ConfigError, "config file '", path, "' does not exist");
    try {
      root = YAML::LoadFile(path);
    } catch (const YAML::Exception& e) {
      throw ConfigError(detail::str_cat("config file '", path, "': ", e.what()));
    }
    if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
    VOLT_CHECK(root.IsMap(), ConfigError, "config file '", path, "': the top level must be a map");
  }
  for (const auto& o : overrides) {
    const auto eq = o.find('=');
    apply_override(root, o.substr(0, eq), o.substr(eq + 1));
  }
  return root;
}

int run(int argc, char** argv, const App& app) {
  try {
    VOLT_CHECK(argc >= 2, ConfigError, "missing subcommand\n", kUsage);
    if (std::string(argv[1]) == "consolidate") return consolidate(argc, argv);
    Args args = parse_args(argc, argv);
    Command cmd{args.subcommand, load_config(args.config, args.overrides), args.print_config};
    return app(cmd);
  } catch (const ConfigError& e) {
    std::cerr << "volt: config error: " << e.what() << std::endl;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "volt: error: " << e.what() << std::endl;
    return 1;
  }
}

}  // namespace volt::cli
