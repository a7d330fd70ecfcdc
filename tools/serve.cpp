#include "tools/commands.h"
#include "tools/args.h"

namespace ubcache {

int ServeMain(int argc, char** argv) {
  Args args("serve", "--backing SPEC --nbd unix:PATH", "Serves a device over NBD.");
  args.Parse(argc - 1, argv + 1);
  Die(1, "serve: not implemented yet");
}

}  // namespace ubcache
