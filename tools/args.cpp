// SPDX-License-Identifier: Apache-2.0
#include "tools/args.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>

namespace ubcache {

void Die(int code, const std::string& msg) {
  std::fprintf(stderr, "ubcache: %s\n", msg.c_str());
  std::exit(code);
}

Args& Args::Option(const std::string& name, const std::string& metavar, const std::string& help,
                   std::optional<std::string> def, bool repeatable) {
  order_.push_back(name);
  specs_[name] = Spec{metavar, help, std::move(def), true, repeatable, 0};
  return *this;
}

Args& Args::Flag(const std::string& name, const std::string& help, char short_name) {
  order_.push_back(name);
  specs_[name] = Spec{"", help, std::nullopt, false, false, short_name};
  return *this;
}

void Args::UsageError(const std::string& msg) const {
  if (throw_) throw Error{msg};
  std::fprintf(stderr, "ubcache %s: %s\n(see 'ubcache %s --help')\n", command_.c_str(), msg.c_str(),
               command_.c_str());
  std::exit(2);
}

std::string Args::Help() const {
  std::string s = "Usage: ubcache " + command_ + " " + synopsis_ + "\n\n" + desc_ + "\n\nOptions:\n";
  for (const auto& name : order_) {
    const Spec& sp = specs_.at(name);
    std::string left = "  ";
    if (sp.short_name) left += std::string("-") + sp.short_name + ", ";
    left += "--" + name;
    if (sp.takes_value) left += " " + sp.metavar;
    std::string help = sp.help;
    if (sp.def && !sp.def->empty()) help += " (default: " + *sp.def + ")";
    if (sp.repeatable) help += " [repeatable]";
    if (left.size() < 30)
      s += left + std::string(30 - left.size(), ' ') + help + "\n";
    else
      s += left + "\n" + std::string(30, ' ') + help + "\n";
  }
  s += "  -h, --help                  show this help\n";
  if (!epilog_.empty()) s += "\n" + epilog_;
  return s;
}

void Args::Parse(int argc, char** argv) {
  for (int i = 0; i < argc; i++) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(Help().c_str(), stdout);
      std::exit(0);
    }
    if (a == "--") {
      for (i++; i < argc; i++) positional_.push_back(argv[i]);
      break;
    }
    std::string name, value;
    bool has_value = false;
    if (a.rfind("--", 0) == 0) {
      name = a.substr(2);
      auto eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
    } else if (a.size() == 2 && a[0] == '-') {
      for (const auto& [n, sp] : specs_)
        if (sp.short_name == a[1]) name = n;
      if (name.empty()) UsageError("unknown option '" + a + "'");
    } else {
      positional_.push_back(a);
      continue;
    }
    auto it = specs_.find(name);
    if (it == specs_.end()) UsageError("unknown option '--" + name + "'");
    const Spec& sp = it->second;
    if (sp.takes_value) {
      if (!has_value) {
        if (i + 1 >= argc) UsageError("--" + name + " needs a value (" + sp.metavar + ")");
        value = argv[++i];
      }
      auto& vals = values_[name];
      if (!vals.empty() && !sp.repeatable) UsageError("--" + name + " given twice");
      vals.push_back(value);
    } else {
      if (has_value) UsageError("--" + name + " takes no value");
      values_[name].push_back("1");
    }
  }
}

std::vector<std::string> Args::Names() const {
  std::vector<std::string> names;
  for (const auto& name : order_)
    if (Has(name)) names.push_back(name);
  return names;
}

bool Args::Has(const std::string& name) const {
  auto it = values_.find(name);
  return it != values_.end() && !it->second.empty();
}

std::string Args::Get(const std::string& name) const {
  auto it = values_.find(name);
  if (it != values_.end() && !it->second.empty()) return it->second.back();
  auto sp = specs_.find(name);
  if (sp != specs_.end() && sp->second.def) return *sp->second.def;
  return "";
}

std::vector<std::string> Args::GetAll(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

void Args::ParseFile(const std::string& path, const std::vector<std::string>& forbidden) {
  std::ifstream in(path);
  if (!in) UsageError(path + ": " + std::strerror(errno));
  std::set<std::string> from_command_line;
  for (const auto& [name, vals] : values_)
    if (!vals.empty()) from_command_line.insert(name);
  std::string line;
  for (int lineno = 1; std::getline(in, line); lineno++) {
    auto where = path + ":" + std::to_string(lineno) + ": ";
    auto trim = [](std::string t) {
      size_t b = t.find_first_not_of(" \t\r"), e = t.find_last_not_of(" \t\r");
      return b == std::string::npos ? std::string() : t.substr(b, e - b + 1);
    };
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    if (line.rfind("--", 0) == 0) line = line.substr(2);
    size_t cut = line.find_first_of("= \t");
    std::string name = line.substr(0, cut), value;
    bool has_value = cut != std::string::npos;
    if (has_value) {
      value = trim(line.substr(cut + 1));
      if (line[cut] != '=' && !value.empty() && value[0] == '=') value = trim(value.substr(1));
      if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
    }
    auto it = specs_.find(name);
    if (it == specs_.end()) UsageError(where + "unknown option '" + name + "'");
    for (const auto& f : forbidden)
      if (f == name) UsageError(where + "--" + name + " cannot be given in a file");
    if (from_command_line.count(name)) continue;
    const Spec& sp = it->second;
    if (sp.takes_value) {
      if (!has_value) UsageError(where + name + " needs a value (" + sp.metavar + ")");
      auto& vals = values_[name];
      if (!vals.empty() && !sp.repeatable) UsageError(where + name + " given twice");
      vals.push_back(value);
    } else {
      if (has_value && value != "1" && value != "true" && value != "yes")
        UsageError(where + name + " is a flag: give its name alone");
      values_[name].push_back("1");
    }
  }
}

}  // namespace ubcache
