// docs/architecture.md's table "Folders and what they may include", read from the document itself and
// checked against every `#include "volt/<folder>/..."` of the library's folders, cli/ and demos/:
// the rules and the code cannot drift apart.
//
// The table's cells, as this test reads them:
//   may include: parts separated by ";"; a part may start with "headers:", "sources:" or
//     "`<file>` ...:" (that one file only); it names folders (`core/`), files (`distributed/x.h`),
//     "every lower layer" or "all of libvolt". A source file may include what its header may.
//   must not include: folders, "any other folder", "any higher layer" / "every higher layer";
//     text in parentheses is commentary.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const std::string kSource = VOLT_SOURCE_DIR;

/// One part of a "may include" cell.
struct Allowance {
  std::string scope;              // "", "headers", "sources", or one file ("cli/main.cpp")
  std::set<std::string> folders;  // "core"
  std::set<std::string> files;    // "distributed/reduce_op.h"
  bool lower_layers = false;      // "every lower layer"
  bool all_of_libvolt = false;    // "all of libvolt"
};

struct Row {
  int layer = 0;
  std::string folder;
  std::vector<Allowance> may;
  std::set<std::string> must_not;  // folders
  bool must_not_other = false;     // "any other folder"
  bool must_not_higher = false;    // "any higher layer"
  std::string may_text, must_not_text;
};

using Table = std::map<std::string, Row>;

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::vector<std::string> backticked(const std::string& s) {
  std::vector<std::string> out;
  static const std::regex tick("`([^`]*)`");
  for (auto it = std::sregex_iterator(s.begin(), s.end(), tick); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1]);
  return out;
}

std::string without_parentheses(const std::string& s) {
  std::string out;
  int depth = 0;
  for (char c : s) {
    if (c == '(') ++depth;
    if (depth == 0) out += c;
    if (c == ')' && depth > 0) --depth;
  }
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, sep)) out.push_back(part);
  return out;
}

/// Fills folders / files of `a` from the backticked names of `text`; throws on a name that is neither.
void add_names(Allowance& a, const std::string& text) {
  for (const auto& name : backticked(without_parentheses(text))) {
    if (!name.empty() && name.back() == '/')
      a.folders.insert(name.substr(0, name.size() - 1));
    else if (name.size() > 2 && name.substr(name.size() - 2) == ".h")
      a.files.insert(name);
    else
      throw std::runtime_error("'may include' names `" + name + "`, neither a folder (x/) nor a header (x/y.h)");
  }
  a.lower_layers = text.find("every lower layer") != std::string::npos;
  a.all_of_libvolt = text.find("all of libvolt") != std::string::npos;
}

std::vector<Allowance> parse_may(const std::string& cell) {
  std::vector<Allowance> out;
  for (const auto& raw : split(cell, ';')) {
    std::string part = trim(raw);
    Allowance a;
    const auto colon = part.find(':');
    if (colon != std::string::npos) {
      const std::string head = trim(part.substr(0, colon));
      const auto names = backticked(head);
      if (head == "headers" || head == "sources") {
        a.scope = head;
      } else if (!names.empty() && head.rfind("`", 0) == 0) {
        a.scope = names.front();
      }
      if (!a.scope.empty()) part = part.substr(colon + 1);
    }
    add_names(a, part);
    out.push_back(a);
  }
  return out;
}

/// docs/architecture.md's table of folders.
Table read_table(const std::string& markdown) {
  Table t;
  std::istringstream in(markdown);
  std::string line;
  bool in_section = false;
  static const std::regex row("^\\|\\s*([0-9]+)\\s*\\|(.*)\\|\\s*$");
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) in_section = line.find("Folders and what they may include") != std::string::npos;
    std::smatch m;
    if (!in_section || !std::regex_match(line, m, row)) continue;
    const auto cells = split(m[2].str(), '|');
    if (cells.size() != 4) throw std::runtime_error("a row of the table has not 5 cells: " + line);
    Row r;
    r.layer = std::stoi(m[1].str());
    const auto folder = backticked(cells[0]);
    if (folder.empty() || folder.front().empty() || folder.front().back() != '/')
      throw std::runtime_error("a row names no `folder/`: " + line);
    r.folder = folder.front().substr(0, folder.front().size() - 1);
    r.may_text = trim(cells[2]);
    r.must_not_text = trim(cells[3]);
    r.may = parse_may(r.may_text);
    const std::string no = without_parentheses(r.must_not_text);
    for (const auto& name : backticked(no)) {
      if (name.empty() || name.back() != '/')
        throw std::runtime_error("'must not include' of " + r.folder + " names `" + name + "`, not a folder");
      r.must_not.insert(name.substr(0, name.size() - 1));
    }
    r.must_not_other = no.find("any other folder") != std::string::npos;
    r.must_not_higher =
        no.find("any higher layer") != std::string::npos || no.find("every higher layer") != std::string::npos;
    t[r.folder] = r;
  }
  return t;
}

struct Include {
  std::string file;  // "module/lightning_module.cpp"
  int line = 0;
  std::string target;  // "strategies/strategy.h"
};

std::string folder_of(const std::string& path) { return path.substr(0, path.find('/')); }

bool is_header(const std::string& file) { return file.size() > 2 && file.substr(file.size() - 2) == ".h"; }

/// Whether `a` lets `inc.file` include `inc.target`.
bool allows(const Allowance& a, const Include& inc, const Row& row, const Table& table) {
  const std::string target_folder = folder_of(inc.target);
  if (a.folders.count(target_folder) || a.files.count(inc.target)) return true;
  const auto it = table.find(target_folder);
  if (it == table.end()) return false;
  if (a.lower_layers && it->second.layer < row.layer) return true;
  return a.all_of_libvolt && target_folder != row.folder && it->second.layer < row.layer;
}

bool applies(const Allowance& a, const std::string& file) {
  if (a.scope.empty()) return true;
  if (a.scope == "headers") return true;  // a source may include what its header may
  if (a.scope == "sources") return !is_header(file);
  return a.scope == file;
}

/// The broken rules, one line each (empty: all kept).
std::vector<std::string> violations(const Table& table, const std::vector<Include>& includes) {
  std::vector<std::string> out;
  for (const auto& inc : includes) {
    const std::string from = folder_of(inc.file), to = folder_of(inc.target);
    if (from == to) continue;
    const std::string where = inc.file + ":" + std::to_string(inc.line) + " includes volt/" + inc.target;
    const auto row_it = table.find(from);
    if (row_it == table.end()) {
      out.push_back(where + ": the table has no row for " + from + "/");
      continue;
    }
    const Row& row = row_it->second;
    if (!table.count(to)) {
      out.push_back(where + ": the table has no row for " + to + "/");
      continue;
    }
    bool allowed = false, by_name = false;
    for (const auto& a : row.may)
      if (applies(a, inc.file) && allows(a, inc, row, table)) {
        allowed = true;
        by_name = by_name || a.scope == inc.file;
      }
    if (!allowed) out.push_back(where + ": " + from + "/ may include only: " + row.may_text);
    const bool forbidden =
        row.must_not.count(to) || row.must_not_other || (row.must_not_higher && table.at(to).layer > row.layer);
    if (forbidden && !by_name) out.push_back(where + ": " + from + "/ must not include: " + row.must_not_text);
  }
  return out;
}

/// The table against its own sentence: a folder's headers include only lower layers.
std::vector<std::string> table_problems(const Table& table) {
  std::vector<std::string> out;
  for (const auto& [folder, row] : table)
    for (const auto& a : row.may) {
      if (a.scope != "" && a.scope != "headers") continue;
      std::set<std::string> named = a.folders;
      for (const auto& f : a.files) named.insert(folder_of(f));
      for (const auto& n : named) {
        const auto it = table.find(n);
        if (it == table.end())
          out.push_back(folder + "/ may include " + n + "/, which has no row");
        else if (it->second.layer >= row.layer)
          out.push_back(folder + "/ (layer " + std::to_string(row.layer) + ") may include " + n + "/ (layer " +
                        std::to_string(it->second.layer) + "): not a lower layer");
      }
    }
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The library's folders, as CMakeLists.txt's VOLT_HEADER_DIRS lists them, and demos.
std::vector<std::string> library_folders() {
  const std::string cmake = read_file(kSource + "/CMakeLists.txt");
  std::smatch m;
  REQUIRE(std::regex_search(cmake, m, std::regex("set\\(VOLT_HEADER_DIRS([^)]*)\\)")));
  std::vector<std::string> out;
  std::istringstream words(m[1].str());
  for (std::string w; words >> w;) out.push_back(w);
  out.push_back("demos");
  return out;
}

std::vector<Include> scan(const std::vector<std::string>& folders) {
  static const std::regex inc("^\\s*#\\s*include\\s*\"volt/([a-z_0-9]+/[^\"]+)\"");
  std::vector<Include> out;
  for (const auto& folder : folders)
    for (const auto& e : fs::recursive_directory_iterator(kSource + "/" + folder)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".h" && ext != ".cpp")) continue;
      const std::string rel = fs::relative(e.path(), kSource).generic_string();
      std::ifstream in(e.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        std::smatch m;
        if (std::regex_search(line, m, inc)) out.push_back({rel, n, m[1].str()});
      }
    }
  return out;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

}  // namespace

TEST_CASE("every #include of the library keeps docs/architecture.md's layer table", "[docs][layers]") {
  const Table table = read_table(read_file(kSource + "/docs/architecture.md"));
  const auto folders = library_folders();
  for (const auto& f : folders) {
    INFO("folder " << f << "/");
    CHECK(table.count(f) == 1);  // every folder of the library has its row
  }
  CHECK(table.size() == folders.size());  // and the table no row for a folder that is gone

  const auto problems = table_problems(table);
  INFO(joined(problems));
  CHECK(problems.empty());

  const auto includes = scan(folders);
  CHECK(includes.size() > 300);  // the scan found the code
  const auto broken = violations(table, includes);
  INFO(joined(broken));
  CHECK(broken.empty());
}

TEST_CASE("the layer check reads each kind of cell and refuses what the table forbids", "[docs][layers]") {
  const Table table = read_table(
      "## Folders and what they may include\n\n"
      "| layer | folder | holds | may include | must not include |\n"
      "| --- | --- | --- | --- | --- |\n"
      "| 0 | `core/` | x | LibTorch only | any other folder |\n"
      "| 1 | `data/` | x | `core/` | any higher layer |\n"
      "| 2 | `module/` | x | `core/`, `data/batch.h` | `trainer/` |\n"
      "| 3 | `callbacks/` | x | headers: `module/` (the Trainer is only declared); sources: `trainer/trainer.h` | "
      "`cli/` |\n"
      "| 4 | `trainer/` | x | every lower layer | `cli/` |\n"
      "| 5 | `cli/` | x | every lower layer; `cli/main.cpp` (the program): `demos/` | `demos/` (only main.cpp) |\n"
      "| 6 | `demos/` | x | all of libvolt | nothing in libvolt includes it |\n"
      "## Next\n| 9 | `ignored/` | x | y | z |\n");
  REQUIRE(table.size() == 7);
  CHECK(table_problems(table).empty());
  auto broken = [&](const std::string& file, const std::string& target) {
    return violations(table, {{file, 1, target}}).size();
  };
  CHECK(broken("data/a.h", "core/errors.h") == 0);
  CHECK(broken("data/a.h", "module/lightning_module.h") == 2);  // not allowed, and a higher layer
  CHECK(broken("core/a.h", "data/batch.h") == 2);
  CHECK(broken("module/a.cpp", "data/batch.h") == 0);
  CHECK(broken("module/a.cpp", "data/dataset.h") == 1);
  CHECK(broken("module/a.cpp", "trainer/trainer.h") == 2);
  CHECK(broken("callbacks/a.h", "module/x.h") == 0);
  CHECK(broken("callbacks/a.h", "trainer/trainer.h") == 1);
  CHECK(broken("callbacks/a.cpp", "trainer/trainer.h") == 0);
  CHECK(broken("callbacks/a.cpp", "cli/cli.h") == 2);
  CHECK(broken("cli/main.cpp", "demos/demo_cli.h") == 0);
  CHECK(broken("cli/cli.cpp", "demos/demo_cli.h") == 2);
  CHECK(broken("demos/a.cpp", "cli/cli.h") == 0);
  CHECK(broken("demos/a.cpp", "nowhere/x.h") == 1);
  // A row whose allowed folder is not lower breaks the sentence above the table.
  const Table bad = read_table(
      "## Folders and what they may include\n| 1 | `a/` | x | `b/` | none |\n| 1 | `b/` | x | `a/` | none |\n");
  CHECK(table_problems(bad).size() == 2);
  CHECK_THROWS(read_table("## Folders and what they may include\n| 1 | `a/` | x | `b` | none |\n"));
}
