// SPDX-License-Identifier: Apache-2.0
// The subcommands of the ubcache binary; each lives in its own file.
#pragma once

namespace ubcache {

// argv[0] is the subcommand's name; options follow. Returns the exit status:
// 0 success, 1 failure of the operation, 2 usage error or bad input.
int ProbeMain(int argc, char** argv);
int ServeMain(int argc, char** argv);
int FormatMain(int argc, char** argv);
int ShowSuperMain(int argc, char** argv);
int ForgetCacheMain(int argc, char** argv);
int CtlMain(int argc, char** argv);
int StatusMain(int argc, char** argv);
int StopMain(int argc, char** argv);

}  // namespace ubcache
