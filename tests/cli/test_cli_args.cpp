// cli/args.h: the one splitter of subcommand command lines (the run subcommands, consolidate, and
// any new one): each form, each refusal and its message, and the two commands that use it.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "cli/toy_classes.h"
#include "volt/cli/args.h"
#include "volt/cli/cli.h"
#include "volt/core/errors.h"

using Catch::Matchers::Contains;
using volt::ConfigError;
using volt::cli::Args;
using volt::cli::ArgSpec;
using volt::cli::parse_args;

namespace {

/// A generation command's flags, as a subcommand would list them.
ArgSpec generate_spec() {
  return ArgSpec{"generate",
                 {{"ckpt_path", true, false, 0, "FILE"},
                  {"prompt", true, false, 0, "TEXT"},
                  {"max_new_tokens"},
                  {"temperature"},
                  {"top_k"},
                  {"verbose", false, false, 'v'}},
                 0,
                 false,
                 "usage: volt generate --ckpt_path=FILE --prompt TEXT"};
}

std::string error_of(const ArgSpec& spec, const std::vector<std::string>& words) {
  try {
    parse_args(spec, words);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("parse_args gives a subcommand its flags by name, in every spelling", "[cli][args]") {
  const Args a = parse_args(generate_spec(), {"--ckpt_path=/a/b=c.ckpt", "--prompt", "Once upon a time",
                                              "--max_new_tokens", "32", "--temperature=0.7", "--top_k", "40", "-v"});
  CHECK(a.get("ckpt_path") == "/a/b=c.ckpt");  // only the first '=' splits
  CHECK(a.get("prompt") == "Once upon a time");
  CHECK(a.get_int("max_new_tokens", 0, 1, 4096) == 32);
  CHECK(a.get_double("temperature", 1.0) == Approx(0.7));
  CHECK(a.get_int("top_k", 0) == 40);
  CHECK(a.has("verbose"));
  CHECK(a.get("verbose") == "");
  CHECK(a.flags.size() == 6);
  CHECK(a.positional.empty());

  // Absent flags: the fallbacks.
  const Args none = parse_args(generate_spec(), {});
  CHECK_FALSE(none.has("prompt"));
  CHECK(none.get("prompt", "x") == "x");
  CHECK(none.get_int("max_new_tokens", 64) == 64);
  CHECK(none.get_double("temperature", 1.5) == 1.5);

  // A value may look like a negative number, or start with one dash.
  const Args neg = parse_args(generate_spec(), {"--temperature", "-0.5", "--prompt", "-x", "--top_k=-3"});
  CHECK(neg.get_double("temperature", 0) == -0.5);
  CHECK(neg.get("prompt") == "-x");
  CHECK(neg.get_int("top_k", 0) == -3);
  // --name=VALUE carries a value that starts with --.
  CHECK(parse_args(generate_spec(), {"--prompt=--help"}).get("prompt") == "--help");
}

TEST_CASE("parse_args refuses unknown, valueless, repeated and extra arguments, naming them", "[cli][args]") {
  const ArgSpec spec = generate_spec();
  std::string e = error_of(spec, {"--topk", "5"});
  CHECK_THAT(e, Contains("generate: unknown option --topk") && Contains("known: --ckpt_path, --prompt") &&
                    Contains("--verbose (-v)") && Contains("usage: volt generate"));
  CHECK_THAT(error_of(spec, {"-x"}), Contains("unknown option -x"));

  e = error_of(spec, {"--prompt"});
  CHECK_THAT(e, Contains("option --prompt needs a value (--prompt TEXT)"));
  e = error_of(spec, {"--prompt", "--top_k", "3"});
  CHECK_THAT(e, Contains("option --prompt needs a value") && Contains("write --prompt=TEXT"));

  e = error_of(spec, {"--top_k", "3", "--prompt", "a", "--top_k=4"});
  CHECK_THAT(e, Contains("option --top_k is given twice ('3', then '4'); give it once"));
  CHECK_THAT(error_of(spec, {"-v", "--verbose"}), Contains("option --verbose is given twice"));

  CHECK_THAT(error_of(spec, {"--verbose=yes"}), Contains("option --verbose takes no value"));
  CHECK_THAT(error_of(spec, {"stray"}), Contains("unexpected argument 'stray'"));

  const Args bad = parse_args(spec, {"--max_new_tokens", "12x", "--temperature", "nan", "--top_k", "0"});
  CHECK_THROWS_WITH(bad.get_int("max_new_tokens", 1), Contains("option --max_new_tokens: expected an integer"));
  CHECK_THROWS_WITH(bad.get_double("temperature", 1), Contains("option --temperature: expected a finite number"));
  CHECK_THROWS_WITH(bad.get_int("top_k", 1, 1, 100), Contains("from 1 to 100, got '0'"));
}

TEST_CASE("parse_args: positional words, --, short names, repeatable flags and overrides", "[cli][args]") {
  ArgSpec spec{"consolidate", {{"output", true, false, 'o', "FILE"}, {"overwrite", false}}, 1, false, ""};
  Args a = parse_args(spec, {"ckpt/", "-o", "out.ckpt", "--overwrite"});
  CHECK(a.positional == std::vector<std::string>{"ckpt/"});
  CHECK(a.get("output") == "out.ckpt");
  CHECK(a.has("overwrite"));
  CHECK_THAT(error_of(spec, {"a", "b"}), Contains("unexpected argument 'b' (this command takes 1 argument"));
  CHECK_THAT(error_of(spec, {"-o"}), Contains("option -o needs a value (-o FILE)"));
  a = parse_args(spec, {"--", "--weird-name"});
  CHECK(a.positional == std::vector<std::string>{"--weird-name"});

  ArgSpec run{"fit", {{"config", true, true}, {"print_config", false}}, 0, true, ""};
  a = parse_args(
      run, {"--config", "a.yaml", "--trainer.max_steps=3", "--config=b.yaml", "--model.hidden", "8", "--print_config"});
  CHECK(a.all("config") == std::vector<std::string>{"a.yaml", "b.yaml"});
  CHECK(a.overrides == std::vector<std::string>{"trainer.max_steps=3", "model.hidden=8"});
  CHECK(a.has("print_config"));
  CHECK_THAT(error_of(run, {"--trainer.max_steps"}), Contains("option --trainer.max_steps needs a value"));
  CHECK(a.all("missing").empty());
}

TEST_CASE("the CLI's subcommands split their command lines with parse_args", "[cli][args]") {
  volt::CLI cli;
  volt::testing::register_toys(cli, nullptr);
  volt::testing::MainRun r =
      volt::testing::run_main(cli, {"fit", "--config", "x.yaml", "--node_rank=0", "--node_rank=1"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Contains("option --node_rank is given twice ('0', then '1')"));
  r = volt::testing::run_main(cli, {"fit", "stray"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Contains("unexpected argument 'stray'"));
  r = volt::testing::run_main(cli, {"consolidate", "a", "--format", "volt", "--format=safetensors"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Contains("consolidate: option --format is given twice") && Contains("usage: toy consolidate"));
  r = volt::testing::run_main(cli, {"consolidate", "a", "--output"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Contains("option --output needs a value (--output FILE)"));
  r = volt::testing::run_main(cli, {"consolidate", "-x"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Contains("unknown option -x; known: --output (-o), --format, --overwrite"));
}
