// ubcache serve: a device (and, with the cache core, a cache in front of
// it) served over NBD until SIGTERM.
#include <cstdio>
#include <memory>
#include <vector>

#include "backend/block_device.h"
#include "frontend/nbd_server.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "util/log.h"
#include "util/size.h"

namespace ubcache {

int ServeMain(int argc, char** argv) {
  Args args("serve", "--backing SPEC --nbd unix:PATH|tcp:HOST:PORT [options]",
            "Serves SPEC as an NBD export on every --nbd address until SIGTERM or\n"
            "Ctrl-C; then stops accepting, finishes requests in flight, flushes and\n"
            "exits 0. Attach with any NBD client, e.g.\n"
            "  nbdinfo 'nbd+unix:///?socket=PATH'\n"
            "  nbd-client -unix PATH /dev/nbd0\n"
            "  qemu-io -f raw 'nbd+unix:///?socket=PATH'\n"
            "  nbdfuse DIR/disk --unix PATH");
  args.Option("backing", "SPEC", "the device to serve")
      .Option("nbd", "ADDR", "listen on unix:PATH or tcp:HOST:PORT (TCP only when asked)",
              std::nullopt, true)
      .Option("export", "NAME", "export name (the empty name selects it too)", "ubcache")
      .Option("description", "TEXT", "export description shown by nbdinfo")
      .Option("threads", "N", "reactor threads, each with its own io_uring (0: one per core)", "0")
      .Flag("read-only", "refuse writes (EPERM) and open the device read-only")
      .Epilog(DeviceSpecHelp());
  args.Parse(argc - 1, argv + 1);
  if (!args.positional().empty()) args.UsageError("unexpected argument '" + args.positional()[0] + "'");
  if (!args.Has("backing")) args.UsageError("--backing SPEC is required");
  if (!args.Has("nbd")) args.UsageError("--nbd unix:PATH or tcp:HOST:PORT is required");
  auto threads = ParseUint(args.Get("threads"), 0, 256, "--threads");
  if (!threads.ok()) args.UsageError(threads.status().message());

  OpenOptions opts;
  opts.read_only = args.Has("read-only");
  auto dev = OpenDevice(args.Get("backing"), opts);
  if (!dev.ok()) Die(2, dev.status().message());

  std::vector<NbdExport> exports;
  NbdExport e;
  e.name = args.Get("export");
  e.description = args.Has("description") ? args.Get("description") : (*dev)->Describe();
  e.device = dev->get();
  e.read_only = opts.read_only;
  exports.push_back(e);

  NbdServerOptions so;
  so.listen = args.GetAll("nbd");
  so.threads = static_cast<unsigned>(*threads);
  NbdServer server(std::move(exports), so);
  Status st = server.Start();
  if (!st.ok()) Die(2, st.message());
  st = server.Run();
  if (!st.ok()) {
    UB_ERROR("{}", st.ToString());
    return 1;
  }
  return 0;
}

}  // namespace ubcache
