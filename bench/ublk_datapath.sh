#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ublk_datapath.sh — what a request costs the server on the ublk frontend
# beside the NBD frontend (issue 28 item 3), in a qemu guest (vm-run: this
# machine has no ublk_drv; the guest kernel has). Four daemons up at once in
# one guest:
#   ublk-mem   ubcache serve --backing mem:SIZE --ublk      (/dev/ublkb0)
#   ublk-file  ubcache serve --backing /dev/vda --ublk      (/dev/ublkb1)
#   nbd-mem    ubcache serve --backing mem:SIZE --nbd unix:...
#   nbd-file   ubcache serve --backing /dev/vdb --nbd unix:...
# /dev/vda and /dev/vdb are two virtio disks over files of fio-written data.
# fio in the guest: io_uring O_DIRECT on /dev/ublkbN, its nbd engine (libnbd,
# one connection) on the sockets; 4 KiB randread QD1 and QD32, 4 KiB
# randwrite QD32; each round drives every daemon once, the order rotated by
# one per round. Per run: fio's numbers and the daemon's utime+stime
# (/proc/PID/stat in the guest) ÷ fio's requests. The guest is emulated
# (TCG) unless this machine has KVM: its timings are functional only — they
# show that each frontend works and how their costs compare within the
# guest, not what either does on hardware.
# Usage: bench/ublk_datapath.sh --ubcache PATH --out FILE.json [--seconds N]
#        [--rounds N] [--size SIZE]; VM_RUN overrides the vm-run tool.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/lib.sh"
BENCH=ublk_datapath

UBCACHE=$repo/build/ubcache
OUT=""
SECONDS_PER=3
ROUNDS=2
SIZE=128M
PYTHON=${PYTHON:-python3}
FIO=${FIO:-fio}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ubcache) UBCACHE=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    --seconds) SECONDS_PER=${2:?}; shift 2 ;;
    --rounds) ROUNDS=${2:?}; shift 2 ;;
    --size) SIZE=${2:?}; shift 2 ;;
    -h|--help) sed -n '3,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1'" ;;
  esac
done
[[ -n $OUT ]] || die "--out FILE.json is needed"
[[ -x $UBCACHE ]] || die "$UBCACHE is not an executable"
UBCACHE=$(realpath "$UBCACHE")
VM_RUN=${VM_RUN:-/work/shared/tools/vm-run}
[[ -x $VM_RUN ]] || die "vm-run not found (set VM_RUN): the guest needs a kernel with ublk_drv"
FIO_BIN=$(command -v "$FIO") || die "fio not found"
size=$(to_bytes "$SIZE")
accel=tcg
[[ -w /dev/kvm ]] && accel=kvm

bench_setup ublk_datapath
# raw is under TMPDIR; the guest writes its results into $raw/share (9p).
mkdir -p "$raw/share"
disk_a=$raw/disk-a.img disk_b=$raw/disk-b.img
FILL=1 fill_file "$disk_a" "$size"
FILL=1 fill_file "$disk_b" "$size"
cat >"$raw/guest.sh" <<'GUEST'
. "$GUEST_LIB"
set +u -f
O=$SHARE
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
up() { cut -d' ' -f1 /proc/uptime; }

start_srv 1 --backing "mem:$SIZE" --ublk --ublk-id 0; P_ublk_mem=$SRV_PID
start_srv 1 --backing /dev/vda --ublk --ublk-id 1; P_ublk_file=$SRV_PID
SRV_SOCK=/tmp/mem.sock start_srv 0 --backing "mem:$SIZE" --nbd unix:/tmp/mem.sock; P_nbd_mem=$SRV_PID
SRV_SOCK=/tmp/file.sock start_srv 0 --backing /dev/vdb --nbd unix:/tmp/file.sock; P_nbd_file=$SRV_PID
target() {  # target CONFIG: fio's engine and target options
  case $1 in
    ublk-mem) echo "--ioengine=io_uring --direct=1 --filename=/dev/ublkb0" ;;
    ublk-file) echo "--ioengine=io_uring --direct=1 --filename=/dev/ublkb1" ;;
    nbd-mem) echo "--ioengine=nbd --uri=nbd+unix:///?socket=/tmp/mem.sock" ;;
    nbd-file) echo "--ioengine=nbd --uri=nbd+unix:///?socket=/tmp/file.sock" ;;
  esac
}
pid_of() { case $1 in ublk-mem) echo $P_ublk_mem ;; ublk-file) echo $P_ublk_file ;; nbd-mem) echo $P_nbd_mem ;; nbd-file) echo $P_nbd_file ;; esac; }
# The mem: exports are written in full first, so reads find data.
for c in ublk-mem nbd-mem; do
  $FIO --name=fill-$c $(target $c) --rw=write --bs=1m --iodepth=8 --size="$SIZE" --output-format=terse >/tmp/fill.out 2>&1 ||
    fail "fill of $c failed: $(cat /tmp/fill.out)"
done
CONFIGS="ublk-mem ublk-file nbd-mem nbd-file"
for w in randread_4k_qd1 randread_4k_qd32 randwrite_4k_qd32; do
  case $w in randread_4k_qd1) rw=randread qd=1 ;; randread_4k_qd32) rw=randread qd=32 ;; *) rw=randwrite qd=32 ;; esac
  r=1
  while [ $r -le "$ROUNDS" ]; do
    set -- $CONFIGS
    i=1; while [ $i -lt $r ]; do c=$1; shift; set -- "$@" "$c"; i=$((i + 1)); done  # rotated by one per round
    for c in "$@"; do
      tag=$w-$c-$r p=$(pid_of $c)
      kill -0 "$p" 2>/dev/null || fail "daemon $c is not running"
      say "== round $r/$ROUNDS: $w, $c, $SECONDS_PER s"
      st0=$(head -1 /proc/stat); t0=$(up); c0=$(ticks "$p")
      $FIO --name=$tag $(target $c) --rw=$rw --bs=4k --iodepth=$qd --size="$SIZE" --time_based \
        --runtime="$SECONDS_PER" --randrepeat=0 --norandommap --lat_percentiles=1 --percentile_list=50:99 \
        --output-format=json --output="$O/fio-$tag.json" >"$O/fio-$tag.err" 2>&1 || fail "fio $tag failed: $(cat "$O/fio-$tag.err")"
      c1=$(ticks "$p"); t1=$(up); st1=$(head -1 /proc/stat)
      printf '%s\t%s\t%s\t%s\t100\n' "$t0" "$t1" "$c0" "$c1" >"$O/cpu-$tag.tsv"
      printf '%s\n%s\n' "$st0" "$st1" >"$O/stat-$tag.txt"
    done
    r=$((r + 1))
  done
done
for p in $P_nbd_file $P_nbd_mem $P_ublk_file $P_ublk_mem; do SRV_PID=$p; stop_srv; done
say OK
GUEST

echo "== booting the guest ($accel; functional timings only)" >&2
set +e
"$VM_RUN" --timeout 1200 --mem 2048 --cwd "$raw/guest" --share "$raw/share" --with "$UBCACHE" --with "$FIO_BIN" \
  --file "$repo/tests/integration/guest_lib.sh" --file "$raw/guest.sh" --disk "$disk_a" --disk "$disk_b" \
  --env "UBCACHE=$UBCACHE" --env "GUEST_LIB=$repo/tests/integration/guest_lib.sh" --env "SHARE=$raw/share" \
  --env "FIO=$FIO_BIN" --env "SIZE=$size" --env "SECONDS_PER=$SECONDS_PER" --env "ROUNDS=$ROUNDS" \
  -- sh "$raw/guest.sh" 2>&1 | tee "$raw/guest.log" | grep --line-buffered '^guest: ' | sed -u 's/^guest: //' >&2
rc=${PIPESTATUS[0]}
set -e
if [[ $rc != 0 ]] || ! grep -q '^guest: OK' "$raw/guest.log"; then
  echo "ublk_datapath: the guest script failed (vm-run exit $rc):" >&2; tail -n 60 "$raw/guest.log" >&2
  exit 1
fi

PYTHONPATH="$here" "$PYTHON" - "$raw/share" "$OUT" "$SECONDS_PER" "$ROUNDS" "$size" "$accel" "$("$FIO" --version)" <<'PY'
import json, statistics, sys
from benchlib import cpu_of, load

share, dst, seconds, rounds, size, accel, fio = sys.argv[1:]
rounds = int(rounds)
configs = ["ublk-mem", "ublk-file", "nbd-mem", "nbd-file"]
keys = ("iops", "p50_us", "p99_us", "server_cpu_us_per_io")
bad = 0
out = {}
for w in ("randread_4k_qd1", "randread_4k_qd32", "randwrite_4k_qd32"):
    out[w] = {}
    for c in configs:
        runs = []
        for r in range(1, rounds + 1):
            tag = f"{w}-{c}-{r}"
            j = load(f"{share}/fio-{tag}.json", "ublk_datapath")
            if not j or not j.get("jobs") or j["jobs"][0].get("error"):
                bad += 1
                runs.append(None)
                continue
            d = j["jobs"][0]["write" if "write" in w else "read"]
            pct = d.get("lat_ns", {}).get("percentile", {})
            run = {"iops": d["iops"], "ios": d["total_ios"], "p50_us": pct.get("50.000000", 0) / 1e3,
                   "p99_us": pct.get("99.000000", 0) / 1e3}
            run.update(cpu_of(share, tag))
            if run.get("server_cpu_pct") is not None and run.get("wall_s") and d["total_ios"]:
                run["server_cpu_us_per_io"] = run["server_cpu_pct"] / 100 * run["wall_s"] / d["total_ios"] * 1e6
            runs.append(run)
        ok = [x for x in runs if x]
        vals = {k: [x[k] for x in ok if x.get(k) is not None] for k in keys}
        out[w][c] = {"runs": runs, "median": {k: statistics.median(v) if v else None for k, v in vals.items()},
                     "range": {k: [min(v), max(v)] if v else None for k, v in vals.items()}}
note = ("The guest ran under software emulation (TCG): these timings are functional only, a comparison within "
        "the guest, not a measurement of either frontend." if accel == "tcg" else
        "The guest ran under KVM; its virtual disks and CPUs still make these timings functional only.")
doc = {"note": note, "accel": accel, "seconds": int(seconds), "rounds": rounds, "size_bytes": int(size),
       "fio": f"{fio}: io_uring O_DIRECT on /dev/ublkbN, the nbd engine on the sockets", "configs": configs,
       "workloads": out}
json.dump(doc, open(dst, "w"), indent=2)
print(json.dumps({w: {c: x["median"] for c, x in v.items()} for w, v in out.items()}, indent=1))
sys.exit(1 if bad else 0)
PY
