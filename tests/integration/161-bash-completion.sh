#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 161-bash-completion — contrib/bash-completion/ubcache completes what the
# binary takes. Its function is driven as bash drives it (COMP_WORDS split
# at COMP_WORDBREAKS, COMP_CWORD, COMP_LINE, COMP_POINT) and each result
# compared exactly:
#  1. commands after `ubcache`, global options and their values;
#  2. every option of `serve --help` after `serve --`, and option values:
#     listed choices (--cache-mode), --opt=value, choices explained in
#     prose (_UBCACHE_CHOICES: each word still in that option's --help);
#  3. ctl: its commands, the knobs after `set` (writable ones only), every
#     attribute after `get`, a knob's choices, the groups after `stats`;
#  4. device specs: exactly the schemes the help's "Device specs:" block
#     lists, paths after file:, inside wrappers (sas:fault,...:) and as a
#     positional SPEC (show-super); unix: and tcp: for --nbd; control
#     sockets for --control;
#  5. no call writes anything to stderr;
#  6. in a real interactive bash (a pty), TAB completes a line with
#     file:PATH, --opt=value and a value, and the line runs as expected:
#     the COMP_WORDBREAKS handling holds for readline, not only for 1-5.
source "$(dirname "$0")/lib.sh"

COMPLETION=$UBCACHE_SRC/contrib/bash-completion/ubcache
[[ -f $COMPLETION ]] || fail "no $COMPLETION"
# The completion runs the binary by the name typed: ubcache, on PATH.
mkdir -p "$WORK/bin" "$WORK/img" "$WORK/run" "$WORK/empty"
ln -s "$UBCACHE" "$WORK/bin/ubcache"
export PATH=$WORK/bin:$PATH
touch "$WORK/img/cache.img" "$WORK/img/backing.img"
python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$WORK/run/disks.sock"

# complete LINE — what _ubcache offers for LINE (cursor at its end), one
# candidate per line, sorted; errors of the call go to $WORK/stderr.
complete_line() {
  (
    set +euo pipefail
    # shellcheck source=/dev/null
    source "$COMPLETION"
    _UBCACHE_RUN_DIR=$WORK/run
    cd "$WORK/empty" || exit 1
    # COMP_WORDS as bash makes them: split at blanks, and runs of the
    # other COMP_WORDBREAKS characters are words of their own.
    local line=$1 brk=${COMP_WORDBREAKS//[[:space:]]/} i ch word="" kind=""
    COMP_WORDS=()
    for ((i = 0; i < ${#line}; i++)); do
      ch=${line:i:1}
      if [[ $ch == [[:space:]] ]]; then
        [[ -n $kind ]] && COMP_WORDS+=("$word")
        word="" kind=""
      elif [[ $brk == *"$ch"* ]]; then
        [[ $kind == w ]] && { COMP_WORDS+=("$word"); word=""; }
        word+=$ch kind=b
      else
        [[ $kind == b ]] && { COMP_WORDS+=("$word"); word=""; }
        word+=$ch kind=w
      fi
    done
    COMP_WORDS+=("$word")
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1)) COMP_LINE=$line COMP_POINT=${#line}
    COMPREPLY=()
    _ubcache
    printf '%s\n' "${COMPREPLY[@]}" | sort
  ) 2>>"$WORK/stderr"
}

# expect LINE WANT... — the candidates for LINE are exactly WANT.
expect() {
  local line=$1 got want
  shift
  got=$(complete_line "$line")
  want=$(printf '%s\n' "$@" | sort)
  [[ $got == "$want" ]] || fail "completing '$line': got
${got:-(nothing)}
want
$want"
}

# The options and commands the binary lists, for the cases that want all.
help_options() {  # CMD — every option name of `ubcache CMD --help`
  "$UBCACHE" "$1" --help | sed -n '/^Options:/,/^$/p' | grep -oE '^  (-[a-z], )?--[a-z0-9-]+' |
    sed -E 's/^  //; s/, /\n/'
}

# ---- 1. commands, global options ----
mapfile -t commands < <("$UBCACHE" --help | sed -n '/^Commands:/,/^$/p' | awk 'NR > 1 && NF { print $1 }')
((${#commands[@]} >= 8)) || fail "ubcache --help lists ${#commands[@]} commands: ${commands[*]}"
expect "ubcache " "${commands[@]}"
expect "ubcache s" serve show-super status stop
expect "ubcache --" --log-level --version --help
expect "ubcache --log-level " trace debug info warn error off
expect "ubcache -v --log-level i" info

# ---- 2. serve's options and their values ----
mapfile -t serve_options < <(help_options serve)
((${#serve_options[@]} > 20)) || fail "serve --help lists only: ${serve_options[*]}"
expect "ubcache serve -" "${serve_options[@]}" --log-level -v
expect "ubcache serve --cache-m" --cache-mode
expect "ubcache serve --ublk --cache-mode w" writethrough writeback writearound
expect "ubcache serve --cache-mode=writea" writearound
expect "ubcache -v serve --log-level=d" debug
expect "ubcache serve --cache-replacement-policy " lru fifo random
expect "ubcache serve --policy " auto bcache
expect "ubcache serve --tls r" require
expect "ubcache format --cache-mode " writethrough writeback writearound none
# Each prose choice still appears in the help of that option, in every
# command that has it.
while read -r opt words; do
  found=0
  for c in "${commands[@]}"; do
    text=$("$UBCACHE" "$c" --help | sed -n '/^Options:/,/^$/p' |
      awk -v o="$opt" '$1 == o { on = 1; print; next } on && /^      / { print; next } { on = 0 }')
    [[ -n $text ]] || continue
    found=1
    for w in $words; do
      grep -qw -- "$w" <<<"$text" || fail "_UBCACHE_CHOICES[$opt] offers '$w', which '$c --help' does not name: $text"
    done
  done
  ((found)) || fail "_UBCACHE_CHOICES has $opt, which no command takes"
done < <(bash -c 'source "$1"; for k in "${!_UBCACHE_CHOICES[@]}"; do echo "$k ${_UBCACHE_CHOICES[$k]}"; done' _ "$COMPLETION")

# ---- 3. ctl ----
mapfile -t ctl_commands < <("$UBCACHE" ctl --help | sed -n '/^Commands:/,/^$/p' | awk 'NR > 1 && NF { print $1 }')
expect "ubcache ctl " "${ctl_commands[@]}"
expect "ubcache ctl --json " "${ctl_commands[@]}"
mapfile -t knobs < <("$UBCACHE" ctl --list | awk -F' [|] ' 'NR > 2 && $4 != "read-only" { sub(/^[|] /, "", $1); print $1 }')
((${#knobs[@]} > 15)) || fail "ctl --list has only these knobs: ${knobs[*]}"
expect "ubcache ctl set " "${knobs[@]}"
expect "ubcache ctl set seq" sequential_cutoff
expect "ubcache ctl --control /x set cache_r" cache_replacement_policy
expect "ubcache ctl set dirty" # read-only: not a knob
expect "ubcache ctl get dirty_d" dirty_data
expect "ubcache ctl get dirty" dirty_data dirty_epochs
expect "ubcache ctl get stats_day/cache_hi" stats_day/cache_hits stats_day/cache_hit_ratio
expect "ubcache ctl set cache_mode " writethrough writeback writearound none
expect "ubcache ctl set sequential_cutoff " auto
expect "ubcache ctl stats " backing_device cache_set cache_device stats_total stats_five_minute stats_hour stats_day internal

# ---- 4. device specs, addresses, sockets ----
expect "ubcache serve --backing " file: mem: nbd: rbd: sas: hdd, fault,
expect "ubcache serve --cache m" mem:
expect "ubcache serve --backing file:$WORK/img/ca" "$WORK/img/cache.img"
expect "ubcache serve --cache=file:$WORK/img/" "$WORK/img/backing.img" "$WORK/img/cache.img"
expect "ubcache serve --backing sas:fault,eio_p=0.5:$WORK/img/b" "$WORK/img/backing.img"
expect "ubcache serve --backing hdd,rpm=7200:f" file: fault,
expect "ubcache serve --backing $WORK/img/c" "$WORK/img/cache.img"
expect "ubcache show-super $WORK/img/b" "$WORK/img/backing.img"
expect "ubcache probe --seconds 1 m" mem:
expect "ubcache ctl attach s" sas:
expect "ubcache serve --nbd " unix: tcp:
expect "ubcache serve --nbd unix:$WORK/run/d" "$WORK/run/disks.sock"
expect "ubcache status --control " "$WORK/run/disks.sock"
expect "ubcache ctl --control " "$WORK/run/disks.sock"
expect "ubcache status --dir $WORK/r" "$WORK/run"
expect "ubcache stop --control " "$WORK/run/disks.sock"
expect "ubcache stop d" disks
expect "ubcache stop --delete --dir $WORK/run " disks

# ---- 5. quiet ----
[[ ! -s $WORK/stderr ]] || fail "the completion wrote to stderr: $(head -n 20 "$WORK/stderr")"

# ---- 6. a real interactive bash ----
# `ubcache` is a shell function there that records its arguments; the
# completion still runs the binary (`command` skips the function).
python3 - "$COMPLETION" "$WORK" <<'EOF' || fail "interactive completion (above)"
import os, pty, select, sys, time

completion, work = sys.argv[1:]
args_file = os.path.join(work, "args")
typed = (f"ubcache serve --backing file:{work}/img/ca\t --cache-mode=writeb\t"
         f"--cache-replacement-p\tfi\t\n")
want = (f"serve --backing file:{work}/img/cache.img --cache-mode=writeback "
        f"--cache-replacement-policy fifo")

pid, fd = pty.fork()
if pid == 0:
    os.chdir(os.path.join(work, "empty"))
    os.execvp("bash", ["bash", "--norc", "--noprofile", "-i"])
seen = b""


def read_for(seconds):
    global seen
    end = time.time() + seconds
    while time.time() < end:
        if select.select([fd], [], [], 0.05)[0]:
            try:
                seen += os.read(fd, 4096)
            except OSError:
                return


setup = (f"source {completion}; "
         f"ubcache() {{ printf '%s' \"$*\" > {args_file}; }}; echo READY\n")
os.write(fd, setup.encode())
deadline = time.time() + 20
while b"READY\r\n" not in seen and time.time() < deadline:
    read_for(0.1)
os.write(fd, typed.encode())
while not os.path.exists(args_file) and time.time() < deadline:
    read_for(0.1)
time.sleep(0.2)
os.write(fd, b"exit\n")
read_for(0.5)
got = open(args_file).read() if os.path.exists(args_file) else None
if got != want:
    print(f"typed {typed!r}\nran   {got!r}\nwant  {want!r}\nterminal:\n{seen.decode(errors='replace')}",
          file=sys.stderr)
    sys.exit(1)
EOF
log "ok"
