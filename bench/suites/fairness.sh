#!/usr/bin/env bash
# fairness — does one reader starve beside four syncing writers?
# Not yet implemented (issue 12): 4 writers (4 KiB randwrite, fdatasync)
# and 1 randread reader, in writethrough and in writeback.
set -euo pipefail
. "$(dirname "$0")/common.sh"
suite_not_implemented "4 writers 4k randwrite with fdatasync + 1 randread reader, writethrough and writeback"
