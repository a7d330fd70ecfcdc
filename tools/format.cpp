// ubcache format / show-super (issue: cache core). Placeholder until the
// superblock code lands.
#include "tools/args.h"
#include "tools/commands.h"

namespace ubcache {

int FormatMain(int argc, char** argv) {
  Args args("format", "--cache SPEC | --backing SPEC", "Writes a superblock.");
  args.Parse(argc - 1, argv + 1);
  Die(1, "format: not implemented yet");
}

int ShowSuperMain(int argc, char** argv) {
  Args args("show-super", "SPEC", "Prints a superblock.");
  args.Parse(argc - 1, argv + 1);
  Die(1, "show-super: not implemented yet");
}

}  // namespace ubcache
