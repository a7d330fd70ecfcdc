#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 167-license — the tree is licensed, and says so everywhere it must:
#  1. LICENSE at the root is the Apache License 2.0, word for word the text
#     Debian ships in /usr/share/common-licenses/Apache-2.0;
#  2. every source and script file (scripts/license-files) carries
#     "SPDX-License-Identifier: Apache-2.0" in its first 3 lines;
#  3. debian/copyright is machine-readable (DEP-5) and names Apache-2.0 for
#     every file, with the license's stand-alone paragraph;
#  4. the README says which license and points to LICENSE;
#  5. the checker can fail: in a scratch git tree, a C++ file and a script
#     without the line are listed, a bench result and a fuzz input are not.
source "$(dirname "$0")/lib.sh"

cd "$UBCACHE_SRC"
[[ -f LICENSE ]] || fail "no LICENSE at the root"
cmp -s LICENSE /usr/share/common-licenses/Apache-2.0 ||
  fail "LICENSE is not the Apache License 2.0 text of /usr/share/common-licenses/Apache-2.0"

count=$(scripts/license-files | wc -l)
(( count > 200 )) || fail "scripts/license-files lists only $count files"
if ! missing=$(scripts/license-files --missing); then
  fail "files without an SPDX-License-Identifier: Apache-2.0 line: $missing"
fi
echo "ok: LICENSE; $count source and script files carry the SPDX line"

grep -qx 'Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/' debian/copyright ||
  fail "debian/copyright: no DEP-5 Format line"
python3 - debian/copyright <<'PY' || fail "debian/copyright does not license every file under Apache-2.0"
import sys
paras = [p for p in open(sys.argv[1]).read().split("\n\n") if p.strip()]
def fields(p):
    out, key = {}, None
    for line in p.splitlines():
        if line[:1] in (" ", "\t") and key:
            out[key] += "\n" + line.strip()
        else:
            key, _, val = line.partition(":")
            out[key] = val.strip()
    return out
ps = [fields(p) for p in paras]
files = [p for p in ps if p.get("Files") == "*"]
assert files and files[0].get("License") == "Apache-2.0", "Files: * is not Apache-2.0"
assert files[0].get("Copyright"), "Files: * has no Copyright"
alone = [p for p in ps if "Files" not in p and p.get("License", "").startswith("Apache-2.0")]
assert alone and "/usr/share/common-licenses/Apache-2.0" in alone[0]["License"], \
    "no stand-alone License: Apache-2.0 paragraph pointing to common-licenses"
PY
grep -q 'Apache License, Version 2.0' README.md && grep -q '(LICENSE)' README.md ||
  fail "README does not name the license and link LICENSE"
echo "ok: debian/copyright (DEP-5) and README"

# 5. The checker can fail.
scratch=$WORK/tree
mkdir -p "$scratch/cache" "$scratch/bench/results/x" "$scratch/tests/fuzz/corpus/t"
printf '// SPDX-License-Identifier: Apache-2.0\nint a;\n' >"$scratch/cache/good.cpp"
printf 'int b;\n' >"$scratch/cache/bad.cpp"
printf '#!/bin/sh\necho hi\n' >"$scratch/bench/results/x/run.sh"
printf 'data\n' >"$scratch/tests/fuzz/corpus/t/input.sh"
printf '#!/bin/sh\n# a comment, no license\n' >"$scratch/tool.sh"
git -C "$scratch" init -q && git -C "$scratch" add -A
got=$(UBCACHE_LICENSE_ROOT=$scratch scripts/license-files --missing | sort | tr '\n' ' ') && rc=0 || rc=$?
[[ $rc == 1 && $got == "cache/bad.cpp tool.sh " ]] ||
  fail "the checker on a scratch tree: exit $rc, listed '$got' (want exit 1, 'cache/bad.cpp tool.sh ')"
echo "ok: the checker lists exactly the unlicensed files of a scratch tree"
