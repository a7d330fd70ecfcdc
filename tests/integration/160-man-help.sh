#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 160-man-help — the man pages in doc/man say what the binary says, so
# neither can change without the other:
#  1. a page ubcache-CMD.8 for every command `ubcache --help` lists and for
#     no other; ubcache.8 lists every command (COMMANDS, SEE ALSO) and the
#     global options;
#  2. each page's OPTIONS has exactly the options of `ubcache CMD --help`
#     (both directions, exact names and value names), the same default
#     where --help gives one as a value (not in words) and nowhere else,
#     and "Repeatable." exactly
#     where --help says [repeatable]; EXIT STATUS has every status --help
#     names;
#  3. ubcache-ctl.8: every command of `ctl --help` with its arguments, and
#     every attribute of `ctl --list`, each knob with its default;
#  4. ubcache.8's DEVICE SPECS: every spec form, scheme and option key of
#     the device-spec help, and every page of a command that takes specs
#     points there; ubcache-serve.8's MEMORY has --help's numbers;
#  5. ubcache-show-super.8 names every field show-super prints (a cache
#     with an index, a backing device), and ubcache-probe.8 exactly the
#     workloads probe runs;
#  6. every page renders with no warning from groff -ww or mandoc -Tlint,
#     lexgrog reads its NAME line, and no line is wider than 80 columns;
#  7. the checker can fail: copies of the pages, each broken in one way (an
#     option dropped or invented, a default changed, an attribute or a
#     scheme dropped, a bad macro), are each refused with the reason.
source "$(dirname "$0")/lib.sh"

MAN_DIR=$UBCACHE_SRC/doc/man
for tool in groff mandoc lexgrog man; do
  command -v "$tool" >/dev/null || fail "$tool is missing (scripts/install-deps installs it)"
done

# ---- what the binary prints besides --help ----
# A formatted cache with an index root (written by a clean stop) and a
# backing device: show-super prints every field it has for them.
format_cache_backing 64M 32M
start_server --cache "$CACHE" --backing "$BACKING" --nbd "unix:$SOCK" --control "$CTL_SOCK"
qio "a write, for an index" "write -q -P 7 0 1M"
stop_server
"$UBCACHE" show-super "$CACHE" >"$WORK/super.cache" || fail "show-super $CACHE"
"$UBCACHE" show-super "$BACKING" >"$WORK/super.backing" || fail "show-super $BACKING"
grep -q '^index_root_nodes ' "$WORK/super.cache" || fail "no index root after a clean stop: $(cat "$WORK/super.cache")"
"$UBCACHE" probe mem:64M --seconds 0.02 --json >"$WORK/probe.json" 2>/dev/null || fail "probe mem:64M"

cat >"$WORK/check_man.py" <<'EOF'
"""Checks the man pages in MAN_DIR against UBCACHE's --help texts.

Prints each disagreement on one line and exits 1 if there is any.
"""
import json
import os
import re
import subprocess
import sys

man_dir, ubcache, work = sys.argv[1:4]
problems = []


def problem(msg):
    problems.append(msg)


def run(*args):
    return subprocess.run([ubcache, *args], capture_output=True, text=True, check=True).stdout


# ---- troff source, read the way tests need it ----
ESCAPES = [(r"\-", "-"), (r"\e", "\\"), (r"\(aq", "'"), (r"\(mc", "µ"), (r"\(lq", '"'), (r"\(rq", '"'),
           (r"\(em", "—"), (r"\&", ""), (r"\:", ""), (r"\c", ""), (r"\%", ""), (r"\ ", " ")]


def unescape(s):
    s = re.sub(r"\\f(\[[^]]*\]|\(..|.)", "", s)
    for a, b in ESCAPES:
        s = s.replace(a, b)
    return s


def macro_args(rest):
    """A macro line's arguments: words, or "quoted strings" with their spaces."""
    return [m.group(1) if m.group(1) is not None else m.group(2)
            for m in re.finditer(r'"((?:[^"]|"")*)"|(\S+)', rest)]


def render(line):
    """One source line as text: font macros applied (their fonts dropped)."""
    if not line.startswith("."):
        return unescape(line)
    m = re.match(r"\.(\S+)\s*(.*)", line)
    name, args = m.group(1), macro_args(m.group(2))
    if name in ("B", "I", "SM", "SB"):
        return unescape(" ".join(args))
    if re.fullmatch(r"[BIR]{2}", name):
        return unescape("".join(args))
    return ""


class Page:
    def __init__(self, path):
        self.path = path
        self.name = os.path.basename(path)
        self.lines = open(path, encoding="utf-8").read().split("\n")
        self.sections = {}  # .SH name -> its source lines
        current = None
        for line in self.lines:
            if line.startswith(".SH"):
                current = unescape(" ".join(macro_args(line[3:])))
                self.sections[current] = []
            elif current is not None:
                self.sections[current].append(line)

    def section(self, name):
        if name not in self.sections:
            problem(f"{self.name}: no {name} section")
        return self.sections.get(name, [])

    def text(self, name):
        return " ".join(t for t in (render(l) for l in self.section(name)) if t)

    def entries(self, name):
        """The .TP entries of a section: [(tags, body source lines)]. Tags
        stacked with .PD 0 between them share one body."""
        out = []
        lines = self.section(name)
        i = 0
        while i < len(lines):
            line = lines[i]
            if line == ".TP" and i + 1 < len(lines):
                tag = re.sub(r"\s+", " ", render(lines[i + 1])).strip()
                if out and all(l.startswith(".PD") for l in out[-1][1]):
                    out[-1][0].append(tag)
                    out[-1][1].clear()
                else:
                    out.append(([tag], []))
                i += 2
                continue
            if line.startswith((".SS", ".SH")):
                out.append(([], []))  # ends the last entry's body
            elif out:
                out[-1][1].append(line)
            i += 1
        return [(tags, body) for tags, body in out if tags]


def body_text(body):
    return " ".join(t for t in (render(l) for l in body if not l.startswith(".PD")) if t)


def stated_default(body):
    m = re.search(r"Default: \\fB(.*?)\\fR", "\n".join(body))
    return unescape(m.group(1)) if m else None


# ---- --help texts ----
def help_sections(text):
    """'Heading:' -> its lines, for the blocks of a --help text."""
    out, current = {}, None
    for line in text.split("\n"):
        m = re.fullmatch(r"([A-Z][A-Za-z ]*):", line)
        if m:
            current = m.group(1)
            out[current] = []
        elif current is not None:
            if line == "":
                current = None
            else:
                out[current].append(line)
    return out


def help_options(lines):
    """{name: (metavar, text, short)} from an Options: block."""
    opts, last = {}, None
    for line in lines:
        m = re.match(r"  (?:-(\w), )?(--?[\w-]+)(?: (\S+))?(?:\s{2,}(.*))?$", line)
        if m and not line.startswith("   "):
            short, name, metavar, text = m.groups()
            opts[name] = [metavar, text or "", short]
            if short:
                opts["-" + short] = opts[name]
            last = name
        elif last:
            opts[last][1] += " " + line.strip()
    return opts


def help_default(text):
    m = re.search(r"\(default: ([^)]*)\)", text)
    return m.group(1) if m else None


def exit_statuses(text):
    m = re.search(r"Exit status:? (.*?)\.(?:\s|$)", " ".join(text.split()))
    return set(re.findall(r"(?:^|, )(\d)\b", m.group(1))) if m else set()


def check_options(page, opts, section="OPTIONS"):
    """OPTIONS of `page` against the --help options `opts`."""
    documented = {}
    for tags, body in page.entries(section):
        for tag in tags:
            # "--name VALUE", "-v", "-h, --help"
            names = re.findall(r"(?:^|, )(--?[\w-]+)", tag)
            if not names:
                problem(f"{page.name}: {section}: '{tag}' names no option")
            m = re.fullmatch(r"(?:-\w, )?--?[\w-]+(?: (\S+))?", tag)
            if not m:
                problem(f"{page.name}: {section}: tag '{tag}' is not '--name VALUE'")
            for n in names:
                documented[n] = (m.group(1) if m else None, body)
    for name, (metavar, text, _) in opts.items():
        if name not in documented:
            problem(f"{page.name}: {name} is in --help but not in {section}")
            continue
        man_metavar, body = documented[name]
        if man_metavar != metavar:
            problem(f"{page.name}: {name}: value '{man_metavar}' here, '{metavar}' in --help")
        want, got = help_default(text), stated_default(body)
        if want is not None and re.search(r"\s", want):
            want = got  # a default in words ("the daemon's first"): the page says it its own way
        if want != got:
            problem(f"{page.name}: {name}: default '{got}' here, '{want}' in --help")
        rep_help, rep_man = "[repeatable]" in text, bool(re.search(r"\bRepeatable\.", body_text(body)))
        if rep_help != rep_man:
            problem(f"{page.name}: {name}: [repeatable] in --help: {rep_help}, 'Repeatable.' here: {rep_man}")
    for name in documented:
        if name not in opts:
            problem(f"{page.name}: {section} documents {name}, which --help does not list")


def load(name):
    path = os.path.join(man_dir, name)
    if not os.path.exists(path):
        problem(f"{name}: missing")
        return None
    return Page(path)


# ---- 1. the commands and ubcache.8 ----
main_help = run("--help")
hs = help_sections(main_help)
commands = [l.split()[0] for l in hs.get("Commands", [])]
if not commands:
    problem("ubcache --help lists no commands")
pages = {f for f in os.listdir(man_dir) if f.endswith(".8")}
for f in sorted(pages - {"ubcache.8"} - {f"ubcache-{c}.8" for c in commands}):
    problem(f"{f}: a page for a command ubcache --help does not list")
top = load("ubcache.8")
if top:
    listed = [t for tags, _ in top.entries("COMMANDS") for t in tags]
    if sorted(listed) != sorted(commands):
        problem(f"ubcache.8: COMMANDS lists {listed}, ubcache --help {commands}")
    see_also = top.text("SEE ALSO")
    for c in commands:
        if f"ubcache-{c}(8)" not in see_also:
            problem(f"ubcache.8: SEE ALSO lacks ubcache-{c}(8)")
    check_options(top, help_options(hs.get("Global options", [])))

# ---- 2. and 3. every command's page ----
spec_help = None
for c in commands:
    page = load(f"ubcache-{c}.8")
    if not page:
        continue
    text = run(c, "--help")
    sections = help_sections(text)
    check_options(page, help_options(sections.get("Options", [])))
    want = exit_statuses(text)
    have = {t for tags, _ in page.entries("EXIT STATUS") for t in tags}
    if not have:
        problem(f"{page.name}: EXIT STATUS lists no status")
    if want - have:
        problem(f"{page.name}: EXIT STATUS lacks {sorted(want - have)}, which --help names")
    if "Device specs" in sections:
        spec_help = sections["Device specs"]
        if "DEVICE SPECS" not in "\n".join(page.lines):
            problem(f"{page.name}: {c} takes device specs but the page does not point to DEVICE SPECS")
    if c == "ctl":
        page_cmds = sorted(t for tags, _ in page.entries("COMMANDS") for t in tags)
        help_cmds = sorted(re.split(r"\s{2,}", l.strip())[0] for l in sections.get("Commands", []))
        if not help_cmds or page_cmds != help_cmds:
            problem(f"{page.name}: COMMANDS {page_cmds}, ctl --help {help_cmds}")
        table = [[x.strip() for x in l.strip().strip("|").split("|")]
                 for l in run("ctl", "--list").split("\n") if l.startswith("| ")]
        attrs = {r[0]: r[2] for r in table[1:] if not r[0].startswith("---")}
        documented = {}
        for tags, body in page.entries("ATTRIBUTES"):
            for t in tags:
                documented[t] = stated_default(body)
        for name, default in attrs.items():
            if name not in documented:
                problem(f"{page.name}: attribute {name} (ctl --list) is not in ATTRIBUTES")
            elif documented[name] != (default or None):
                problem(f"{page.name}: {name}: default '{documented[name]}' here, '{default}' in ctl --list")
        for name in documented:
            if name not in attrs:
                problem(f"{page.name}: ATTRIBUTES documents {name}, which ctl --list does not list")
    if c == "serve":
        memory = " ".join(l for l in text.split("\n") if not l.startswith(" ")).split("Memory:")[-1]
        numbers = re.findall(r"\d+ MiB", memory)
        if not numbers:
            problem("serve --help: no Memory paragraph with numbers")
        for n in numbers:
            if n not in page.text("MEMORY"):
                problem(f"{page.name}: MEMORY lacks '{n}' of serve --help")
    if c == "show-super":
        fields = {l.split(" ", 1)[0] for kind in ("cache", "backing")
                  for l in open(os.path.join(work, "super." + kind)) if l.strip()}
        names = {n for tags, _ in page.entries("OUTPUT") for t in tags for n in t.split(", ")}
        for f in sorted(fields - names):
            problem(f"{page.name}: OUTPUT lacks the field {f}")
        for f in sorted(names - fields):
            problem(f"{page.name}: OUTPUT documents {f}, which show-super does not print")
    if c == "probe":
        ran = [r["name"] for r in json.load(open(os.path.join(work, "probe.json")))["results"]]
        names = [t for tags, _ in page.entries("WORKLOADS") for t in tags]
        if ran != names:
            problem(f"{page.name}: WORKLOADS {names}, probe ran {ran}")

# ---- 4. device specs ----
if spec_help is None:
    problem("no command's --help has a 'Device specs:' block")
elif top:
    heads = [l[2:].split("  ")[0] for l in spec_help if re.match(r"  \S", l)]
    forms = [f for h in heads for f in h.split(", ")]
    tags = [t for tags, _ in top.entries("DEVICE SPECS") for t in tags]
    tag_forms = [f for t in tags for f in t.split(", ")]

    def scheme(form):
        m = re.match(r"([a-z]+)[,:]", form)
        return m.group(1) if m else None

    def keys(text):
        return set(re.findall(r"[,(](\w+)=", text))

    for f in forms:
        if f not in tag_forms:
            problem(f"ubcache.8: DEVICE SPECS lacks the spec '{f}' of --help")
    help_schemes = {scheme(f) for f in forms} - {None}
    man_schemes = {scheme(f) for f in tag_forms} - {None}
    if help_schemes != man_schemes:
        problem(f"ubcache.8: DEVICE SPECS schemes {sorted(man_schemes)}, --help {sorted(help_schemes)}")
    man_keys = keys("," + ",".join(tags))
    for k in sorted(keys(" ".join(spec_help)) - man_keys):
        problem(f"ubcache.8: DEVICE SPECS does not document the option {k}=")

# ---- 6. rendering ----
for f in sorted(pages):
    path = os.path.join(man_dir, f)
    r = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", path], capture_output=True, text=True)
    if r.returncode or r.stderr:
        problem(f"{f}: groff: {r.stderr.strip()}")
    r = subprocess.run(["mandoc", "-Tlint", "-W", "warning", path], capture_output=True, text=True)
    if r.stdout or r.stderr:
        problem(f"{f}: mandoc: {(r.stdout + r.stderr).strip()}")
    r = subprocess.run(["lexgrog", path], capture_output=True, text=True)
    if r.returncode or f': "{f[:-2]} - ' not in r.stdout:
        problem(f"{f}: lexgrog cannot read the NAME line: {r.stdout.strip()} {r.stderr.strip()}")
    r = subprocess.run(["man", "-l", path], capture_output=True, text=True,
                       env=dict(os.environ, MANWIDTH="80"))
    if r.returncode or not r.stdout:
        problem(f"{f}: man -l: {r.stderr.strip()}")
    for line in r.stdout.split("\n"):
        if len(line) > 80:
            problem(f"{f}: a line wider than 80 columns: {line.strip()}")

for p in problems:
    print(p)
sys.exit(1 if problems else 0)
EOF

# check DIR — the checker on the pages in DIR; its findings in $out.
check() {
  local rc=0
  out=$(python3 "$WORK/check_man.py" "$1" "$UBCACHE" "$WORK" 2>&1) || rc=$?
  return $rc
}

check "$MAN_DIR" || fail "the man pages and --help disagree:
$out"
log "doc/man agrees with --help"

# ---- 7. broken copies are refused ----
# break_page LABEL FILE PYTHON-EXPR NEEDLE — a copy of the pages in which
# FILE's text s is replaced by PYTHON-EXPR must fail the check, saying NEEDLE.
break_page() {
  local label=$1 file=$2 expr=$3 needle=$4 dir=$WORK/broken
  rm -rf "$dir"
  cp -r "$MAN_DIR" "$dir"
  python3 -c 'import sys
p = sys.argv[1]
s = open(p).read()
t = eval(sys.argv[2])
assert t != s, "the edit changed nothing"
open(p, "w").write(t)' "$dir/$file" "$expr" || fail "$label: cannot break $file"
  if check "$dir"; then
    fail "$label: the check passed a broken $file"
  fi
  expect_contains "$out" "$needle" "$label"
}
break_page "an option dropped" ubcache-serve.8 \
  's.replace(".TP\n.BI \\-\\-depth \" D\"\n", "")' \
  "ubcache-serve.8: --depth is in --help but not in OPTIONS"
break_page "an option invented" ubcache-status.8 \
  's.replace(".SH EXIT STATUS", ".TP\n.B \\-\\-verbose\nMore.\n.SH EXIT STATUS")' \
  "ubcache-status.8: OPTIONS documents --verbose, which --help does not list"
break_page "a value name changed" ubcache-probe.8 \
  's.replace(".BI \\-\\-seconds \" N\"", ".BI \\-\\-seconds \" SECONDS\"")' \
  "ubcache-probe.8: --seconds: value 'SECONDS' here, 'N' in --help"
break_page "a default changed" ubcache-format.8 \
  's.replace("Default: \\fB8k\\fR.", "Default: \\fB4k\\fR.")' \
  "ubcache-format.8: --data-offset: default '4k' here, '8k' in --help"
break_page "an attribute dropped" ubcache-ctl.8 \
  's.replace(".TP\n.B internal/journal_bytes\n", "")' \
  "ubcache-ctl.8: attribute internal/journal_bytes (ctl --list) is not in ATTRIBUTES"
break_page "a knob's default changed" ubcache-ctl.8 \
  's.replace("Default: \\fB100\\fR.", "Default: \\fB50\\fR.")' \
  "ubcache-ctl.8: journal_delay_ms: default '50' here, '100' in ctl --list"
break_page "a scheme dropped" ubcache.8 \
  's.replace(".BI sas: SPEC\n", ".BI wal: SPEC\n")' \
  "ubcache.8: DEVICE SPECS lacks the spec 'sas:SPEC' of --help"
break_page "a command dropped" ubcache.8 \
  's.replace(".TP\n.B probe\n", ".TP\n.B prob\n")' \
  "ubcache.8: COMMANDS lists"
break_page "an undefined macro" ubcache-show-super.8 \
  's.replace(".SH EXIT STATUS", ".XX\n.SH EXIT STATUS")' \
  "ubcache-show-super.8: groff:"
log "ok"
