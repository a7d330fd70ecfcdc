// SPDX-License-Identifier: Apache-2.0
// A small command-line parser for ubcache's subcommands: --long options with
// or without values (--name VALUE or --name=VALUE), repeatable options,
// positional arguments, and a generated --help. Usage errors exit 2.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ubcache {

class Args {
 public:
  Args(std::string command, std::string synopsis, std::string description)
      : command_(std::move(command)), synopsis_(std::move(synopsis)), desc_(std::move(description)) {}

  // An option taking a value; `def` is shown in --help and returned by Get.
  Args& Option(const std::string& name, const std::string& metavar, const std::string& help,
               std::optional<std::string> def = std::nullopt, bool repeatable = false);
  // A flag without a value.
  Args& Flag(const std::string& name, const std::string& help, char short_name = 0);
  Args& Epilog(std::string text) {
    epilog_ = std::move(text);
    return *this;
  }

  // Parses argv (after the subcommand). Prints help and exits 0 on --help;
  // prints one line and exits 2 on a usage error.
  void Parse(int argc, char** argv);
  // Reads more options from a file, one per line: `name value`,
  // `name=value` or `--name value`, a flag's name alone; blank lines and
  // lines starting with `#` are skipped, a value may be in double quotes.
  // The command line wins: an option it gave keeps its value(s). Exits 2
  // naming FILE:LINE on an unknown or a `forbidden` option, a missing value
  // or an option given twice, or naming FILE when it cannot be read.
  void ParseFile(const std::string& path, const std::vector<std::string>& forbidden = {});

  bool Has(const std::string& name) const;
  std::string Get(const std::string& name) const;  // value or default, "" if neither
  std::vector<std::string> GetAll(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }
  // Prints the error and exits 2; throws Args::Error instead after
  // ThrowOnError() (a running daemon re-reading its options must not exit).
  [[noreturn]] void UsageError(const std::string& msg) const;
  struct Error {
    std::string message;
  };
  void ThrowOnError() { throw_ = true; }
  // The options given (on the command line or in a file), in --help order.
  std::vector<std::string> Names() const;
  std::string Help() const;

 private:
  struct Spec {
    std::string metavar, help;
    std::optional<std::string> def;
    bool takes_value, repeatable;
    char short_name;
  };
  std::string command_, synopsis_, desc_, epilog_;
  std::vector<std::string> order_;
  std::map<std::string, Spec> specs_;
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
  bool throw_ = false;
};

// Prints "ubcache: <msg>" to stderr and exits with `code`.
[[noreturn]] void Die(int code, const std::string& msg);

}  // namespace ubcache
