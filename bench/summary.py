#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/run's records and report (issue 12).

  summary.py machine DIR --ubcache BIN --bin COPY ...   DIR/machine.json
  summary.py record DIR SUITE RC T0 T1 QUICK [LEFTOVER] DIR/SUITE.json: the suite's
                                                        status and its raw/SUITE/result.json
  summary.py report DIR [--wall S]                      DIR/summary.md and DIR/plots/

summary.md holds this machine's numbers and nothing else: a suite that did
not run, failed or is not implemented says so and shows no number it did
not measure. Plots need matplotlib (python3-matplotlib; bench/run installs
it); without it summary.md says that the plots are missing.
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys

PACKAGES = ["fio", "nbdkit", "qemu-utils", "sysbench", "dbench", "libnbd-bin", "liburing2", "python3-matplotlib"]


def sh(*cmd):
    """A command's stripped stdout, or None when it fails or is missing."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def now():
    return datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %z")


# --- machine --------------------------------------------------------------

def disk_of(path):
    """The filesystem and block device under PATH: source, fstype, model, rotational."""
    out = {"path": path}
    src = sh("findmnt", "-n", "-o", "SOURCE,FSTYPE", "-T", path)
    if not src:
        return out
    source, _, fstype = src.partition(" ")
    out.update({"source": source, "fstype": fstype.strip()})
    dev = source
    parent = sh("lsblk", "-n", "-d", "-o", "PKNAME", source)
    if parent:
        dev = "/dev/" + parent
    info = sh("lsblk", "-J", "-d", "-o", "NAME,MODEL,VENDOR,SIZE,ROTA,TRAN,SCHED", dev)
    try:
        d = json.loads(info)["blockdevices"][0]
        out.update({"device": dev, "model": (d.get("model") or "").strip() or None,
                    "vendor": (d.get("vendor") or "").strip() or None, "size": d.get("size"),
                    "rotational": d.get("rota") in (True, "1", 1), "transport": d.get("tran"),
                    "scheduler": d.get("sched")})
    except (TypeError, ValueError, KeyError, IndexError):
        out["device"] = dev
    name = os.path.basename(dev)
    try:
        out["driver"] = os.path.basename(os.readlink(f"/sys/block/{name}/device/driver"))
    except OSError:
        pass
    return out


def first_line(path, prefix):
    """The first line of `path` that starts with `prefix`, or None."""
    try:
        for line in open(path):
            if line.startswith(prefix):
                return line
    except OSError:
        pass
    return None


def cpu_model():
    line = first_line("/proc/cpuinfo", "model name")
    return line.split(":", 1)[1].strip() if line else (platform.processor() or None)


def meminfo(key):
    line = first_line("/proc/meminfo", key + ":")
    try:
        return int(line.split()[1]) * 1024 if line else None
    except (IndexError, ValueError):
        return None


def os_release():
    line = first_line("/etc/os-release", "PRETTY_NAME=")
    return line.split("=", 1)[1].strip().strip('"') if line else None


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def cmd_machine(a):
    pkgs = {}
    for p in PACKAGES:
        v = sh("dpkg-query", "-W", "-f=${Status} ${Version}", p)
        pkgs[p] = v.split()[-1] if v and v.startswith("install ok installed") else None
    git = {"commit": sh("git", "-C", a.repo, "rev-parse", "HEAD"),
           "describe": sh("git", "-C", a.repo, "describe", "--always", "--dirty"),
           "branch": sh("git", "-C", a.repo, "rev-parse", "--abbrev-ref", "HEAD")}
    st = sh("git", "-C", a.repo, "status", "--porcelain", "--untracked-files=no")
    git["dirty"] = None if st is None else bool(st)
    doc = {
        "host": platform.node(), "recorded": now(),
        "cpus": os.cpu_count(), "cpu_model": cpu_model(), "memory_bytes": meminfo("MemTotal"),
        "kernel": platform.release(), "kernel_build": platform.version(), "os": os_release(),
        "virtualization": sh("systemd-detect-virt"), "load_avg_at_start": list(os.getloadavg()),
        "disk": disk_of(a.work), "packages": pkgs, "git": git,
        "ubcache": {"path": a.ubcache, "built_by_run": a.built == "1", "sha256": sha256(a.bin),
                    "version": sh(a.bin, "--version"),
                    "mtime": datetime.datetime.fromtimestamp(os.path.getmtime(a.ubcache)).astimezone()
                    .strftime("%Y-%m-%d %H:%M:%S %z")},
        "run": {"command": a.command, "quick": a.quick == "1", "suites": a.suites.split(","), "started": now()},
    }
    with open(os.path.join(a.dir, "machine.json"), "w") as f:
        json.dump(doc, f, indent=2)


# --- record ---------------------------------------------------------------

def cmd_record(a):
    rc = int(a.rc)
    data = load(os.path.join(a.dir, "raw", a.suite, "result.json"))
    status = {0: "ok", 3: "not_implemented"}.get(rc, "failed")
    reason = None
    if status == "ok" and data is None:
        status, reason = "failed", "the suite exited 0 but wrote no result.json"
    if status == "failed" and reason is None:
        reason = "interrupted: bench/run stopped it" if rc in (130, 143) else f"exit status {rc}"
    log = os.path.join("logs", a.suite + ".log")
    tail = None
    if status == "failed":
        try:
            tail = open(os.path.join(a.dir, log), errors="replace").read().splitlines()[-25:]
        except OSError:
            tail = []
    t0, t1 = float(a.t0), float(a.t1)
    doc = {"suite": a.suite, "status": status, "exit_code": rc, "reason": reason,
           "started": datetime.datetime.fromtimestamp(t0).astimezone().isoformat(timespec="seconds"),
           "finished": datetime.datetime.fromtimestamp(t1).astimezone().isoformat(timespec="seconds"),
           "wall_s": round(t1 - t0, 1), "quick": a.quick == "1", "log": log,
           "leftover_processes": [x for x in (a.leftover or "").splitlines() if x.strip()],
           "log_tail": tail, "data": data}
    with open(os.path.join(a.dir, a.suite + ".json"), "w") as f:
        json.dump(doc, f, indent=2)


# --- report: formatting helpers ---------------------------------------------

def f0(v):
    return "—" if v is None else f"{v:.0f}"


def f1(v):
    return "—" if v is None else f"{v:.1f}"


def f2(v):
    return "—" if v is None else f"{v:.2f}"


def f3(v):
    return "—" if v is None else f"{v:.3f}"


def frange(r, f=f2):
    return "—" if not r or r[0] is None else f"{f(r[0])}–{f(r[1])}"


def fspread(v, f=f2):
    """min–max of a list of per-repeat values; one value has no spread."""
    v = [x for x in v if x is not None]
    if len(v) < 2:
        return "— (1 run)" if v else "—"
    return f"{f(min(v))}–{f(max(v))}"


def med(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None


def span(v):
    v = [x for x in v if x is not None]
    return [min(v), max(v)] if v else None


def table(head, rows, align=None):
    align = align or ["---"] + ["---:"] * (len(head) - 1)
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out + [""]


def verdict(targets, prefix):
    for t in targets or []:
        if t.get("target", "").startswith(prefix) and not t.get("info"):
            return "PASS" if t.get("pass") else "MISS"
    return ""


class Plots:
    """Bars of A/B ratios with min–max spread, lines of latency percentiles.
    Every figure goes to plots/NAME.png and plots/NAME.svg."""

    def __init__(self, outdir):
        self.dir = os.path.join(outdir, "plots")
        self.made, self.error = [], None
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            self.plt = plt
        except ImportError as e:
            self.plt, self.error = None, f"matplotlib is not installed ({e}); apt-get install python3-matplotlib"

    def _save(self, fig, name):
        os.makedirs(self.dir, exist_ok=True)
        for ext in ("png", "svg"):
            fig.savefig(os.path.join(self.dir, f"{name}.{ext}"), bbox_inches="tight", dpi=110)
        self.plt.close(fig)
        self.made.append(name)
        return f"plots/{name}.png"

    def ratio_bars(self, name, title, bars, log=False):
        """bars: [(label, value, [lo, hi] or None, target or None)]; None values are left out."""
        bars = [b for b in bars if b[1] is not None]
        if not self.plt or not bars:
            return None
        plt = self.plt
        fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(bars) + 2), 4))
        xs = range(len(bars))
        vals = [b[1] for b in bars]
        lo = [b[1] - (b[2][0] if b[2] else b[1]) for b in bars]
        hi = [(b[2][1] if b[2] else b[1]) - b[1] for b in bars]
        ax.bar(xs, vals, color="#4c72b0", yerr=[lo, hi], capsize=4, ecolor="black")
        for x, b in zip(xs, bars):
            ax.annotate(f"{b[1]:.2f}", (x, b[1]), textcoords="offset points", xytext=(0, 3), ha="center",
                        fontsize=7)
            if b[3] is not None:
                ax.plot([x - 0.4, x + 0.4], [b[3], b[3]], color="#c44e52", linewidth=2)
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([b[0] for b in bars], rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("ratio (bar: median; whiskers: min–max; red: target)")
        if log:
            ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        return self._save(fig, name)

    def scaling_lines(self, name, title, series, ylabel, log=False):
        """series: [(label, [(clients, value)])]; x on a log2 scale."""
        series = [(l, [p for p in pts if p[1] is not None]) for l, pts in series]
        series = [s for s in series if s[1]]
        if not self.plt or not series:
            return None
        plt = self.plt
        fig, ax = plt.subplots(figsize=(6, 4))
        for label, pts in series:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.set_xscale("log", base=2)
        if log:
            ax.set_yscale("log")
        ax.set_xlabel("dbench clients")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8)
        ax.set_title(title, fontsize=10)
        return self._save(fig, name)

    def percentile_lines(self, name, title, series):
        """series: [(label, [(pct_label, median, [lo, hi])])]."""
        series = [s for s in series if any(p[1] is not None for p in s[1])]
        if not self.plt or not series:
            return None
        plt = self.plt
        fig, ax = plt.subplots(figsize=(6, 4))
        for label, pts in series:
            pts = [p for p in pts if p[1] is not None]
            xs = list(range(len(pts)))
            ys = [p[1] for p in pts]
            ax.plot(xs, ys, marker="o", label=label)
            if all(p[2] for p in pts):
                ax.fill_between(xs, [p[2][0] for p in pts], [p[2][1] for p in pts], alpha=0.15)
        ax.set_xticks(range(len(series[0][1])))
        ax.set_xticklabels([p[0] for p in series[0][1]])
        ax.set_yscale("log")
        ax.set_ylabel("latency, µs (median of repeats; band: min–max)")
        ax.legend(fontsize=8)
        ax.set_title(title, fontsize=10)
        return self._save(fig, name)


# --- report: one renderer per suite ----------------------------------------
# Each takes the suite's data (raw/SUITE/result.json) and Plots, and returns
# Markdown lines.

def r_observability(d, plots):
    c, cfg = d["ctl_stall"], d.get("config", {})
    wo, wi = c["iops_without"], c["iops_with"]
    per = [b / a for a, b in zip(wo, wi) if a]
    a = c.get("alternate")
    out = [f"4 KiB randread QD32 through NBD over a {cfg.get('ws', '?')} working set (resident), "
           f"`ctl_poller` asking priority-stats, stats and metrics {cfg.get('rate', '?')} times a second; "
           f"{c['buckets']} buckets.", ""]
    rows = []
    if a:
        out += [f"The verdict is the alternating run's: one fio run of {cfg.get('alt_seconds', '?')} s, the poller "
                "polling in the even wall-clock seconds only; each polled second's IOPS over the mean of the "
                "unpolled seconds on either side (a drifting load cancels), the 200 ms after each switch left "
                f"out; {a['pairs']} such ratios. For reference, {len(wo)} separate pairs of "
                f"{cfg.get('runtime_s', '?')} s runs without and with polling, alternated (A B, B A, …).", ""]
        lo, hi = a["ratio_ci95"]
        rows.append(["alternating seconds: mean of per-second ratios (95 % CI)", f0(a["iops_unpolled"]),
                     f0(a["iops_polled"]), f"{f3(a['ratio_mean'])} ({f3(lo)}–{f3(hi)})",
                     f"{f3(a['ratio_min'])}–{f3(a['ratio_max'])}", "≥ 0.99",
                     "PASS" if a["ratio_mean"] >= 0.99 else "MISS"])
        rows.append(["alternating seconds: median of per-second ratios", "", "", f3(a["ratio_median"]), "", "", ""])
    else:
        out += [f"{len(wo)} pairs of {cfg.get('runtime_s', '?')} s without and with polling; pairs alternated "
                "(A B, B A, …).", ""]
    rows.append(["separate runs: IOPS (median of runs; ratio of sums)", f0(med(wo)), f0(med(wi)), f3(c["ratio"]),
                 fspread(per, f3), "" if a else "≥ 0.99", "" if a else ("PASS" if c["ratio"] >= 0.99 else "MISS")])
    rows.append(["separate runs: median of per-pair ratios", "", "", f3(c["ratio_median"]), "", "", ""])
    out += table(["measure", "without polling", "with polling", "with/without", "min–max", "target", ""], rows)
    out += table(["control queries", "errors", "client p50 ms", "client p99 ms", "client max ms",
                  "daemon p99 µs", "daemon max µs", "daemon CPU per query µs", "over 5 ms"],
                 [[c["queries"], c["query_errors"], f2(c["query_p50_ms"]), f2(c["query_p99_ms"]),
                   f2(c["query_max_ms"]), c["server_wall_p99_us"], c["server_wall_max_us"],
                   c["server_cpu_per_request_us"], c["server_requests_over_5ms"]]])
    bars = [("separate runs (sum)", c["ratio"], span(per), None if a else 0.99),
            ("separate runs, median", c["ratio_median"], span(per), None)]
    if a:
        bars = [("alternating s, mean ± 95 % CI", a["ratio_mean"], a["ratio_ci95"], 0.99),
                ("alternating s, median", a["ratio_median"], [a["ratio_min"], a["ratio_max"]], None)] + bars
    p = plots.ratio_bars("observability", "IOPS with / without stats polling", bars)
    return out + ([f"![observability]({p})", ""] if p else [])


WB_SECTIONS = [("s1_randwrite", "(1)", "4 KiB randwrite QD32: writeback vs spindle alone", "IOPS", 20.0),
               ("s2_flush", "(2)", "ctl flush of random dirty blocks vs spindle in write order", "MiB/s", 2.0),
               ("s3a", "(3a)", "reader beside 4 writers / alone, reader uncached", "IOPS", 0.8),
               ("s3c", "(3c)", "as (3a) with writeback_rate set", "IOPS", 0.8),
               ("s3b", "(3b)", "reader beside 4 writers / alone, reader cached", "IOPS", 0.8),
               ("s3d", "(3d)", "as (3b), writeback_running 0 (reference)", "IOPS", None)]


def r_writeback(d, plots):
    w = d["writeback_bench"]
    cfg = w.get("config", {})
    rows, bars = [], []
    for key, tag, label, unit, need in WB_SECTIONS:
        x = w.get(key)
        if not x:
            continue
        if key == "s1_randwrite":
            a, b, per = x["wb_iops"], x["raw_iops"], [r["ratio"] for r in x["runs"]]
        elif key == "s2_flush":
            mib = 1 << 20
            a = x["wb_bytes_per_s"] and x["wb_bytes_per_s"] / mib
            b = x["raw_bytes_per_s"] and x["raw_bytes_per_s"] / mib
            per = [r["ratio"] for r in x["runs"]]
        else:
            a, b, per = x["beside_iops"], x["solo_iops"], x["ratio_per_pair"]
        fa = f2 if unit == "MiB/s" else f0
        rows.append([f"{tag} {label}", unit, fa(a), fa(b), f2(x["ratio"]), ", ".join(f2(p) for p in per) or "—",
                     "—" if need is None else f"≥ {need:g}", verdict(w.get("targets"), tag) or "—"])
        bars.append((tag, x["ratio"], span(per), need))
    out = [f"bench/writeback_bench.sh over a modelled 10k rpm SAS spindle (`sas:FILE`), "
           f"{cfg.get('repeat', '?')} pair(s) per section, A B then B A; `{cfg.get('command', '')}`.", ""]
    out += table(["section", "unit", "ubcache", "baseline", "ratio (of medians)", "per pair", "target", ""], rows,
                 ["---", "---", "---:", "---:", "---:", "---", "---", "---"])
    notes = w.get("notes") or []
    nwarn = sum(len(v) for v in (w.get("daemon_warnings") or {}).values())
    out += [f"Checks: {len(notes)} note(s), {nwarn} daemon warning/error line(s)"
            + (":" if notes else "."), ""]
    out += [f"- {n}" for n in notes[:8]] + ([f"- … {len(notes) - 8} more"] if len(notes) > 8 else [])
    if notes:
        out.append("")
    p = plots.ratio_bars("writeback", "writeback: ubcache / baseline", bars, log=True)
    return out + ([f"![writeback]({p})", ""] if p else [])


def peer_ratios(row, peer, metric):
    u = row["servers"]["ubcache"]["runs"]
    o = row["servers"][peer]["runs"]
    return [a[metric] / b[metric] for a, b in zip(u, o) if a and b and b.get(metric)]


def r_peers(d, plots):
    out, bars = [], []
    p = d.get("nbd_peers")
    if p:
        label = {"nbdkit": "nbdkit", "null": "nbdkit null", "qemu-nbd": "qemu-nbd", "raw": "raw io_uring"}
        out += [f"bench/nbd_peers.sh: fio nbd engine, {p['seconds']} s per run, {p['repeat']} repeat(s), "
                "servers interleaved per workload, order rotated per repeat; 4 KiB rows IOPS, 1 MiB rows MB/s.", ""]
        rows = []
        for g, grows in p["groups"].items():
            for row in grows:
                m = row["metric"]
                u = row["servers"]["ubcache"][m]
                for peer, ratio in row["ratios"].items():
                    per = peer_ratios(row, peer, m)
                    rows.append([g, row["workload"], "IOPS" if m == "iops" else "MB/s", f0(u), label.get(peer, peer),
                                 f0(row["servers"][peer][m]), f2(ratio), fspread(per)])
                    bars.append((f"{g} {row['workload']} /{label.get(peer, peer)}", ratio, span(per), None))
        out += table(["group", "workload", "unit", "ubcache", "peer", "peer's", "ubcache/peer", "per-repeat min–max"],
                     rows, ["---", "---", "---", "---:", "---", "---:", "---:", "---"])
        out += ["Targets (issue 3): " + "; ".join(
            f"{'info' if t.get('info') else ('PASS' if t['pass'] else 'MISS')} {t['target'].strip()}: {f2(t['ratio'])}"
            for t in p.get("targets", [])), ""]
    else:
        out += ["nbd_peers.sh: no result.", ""]
    c = d.get("cache_bench")
    if c:
        rows = []
        ic = c.get("index_cost")
        if ic:
            rows.append(["(1) index cost: cached+resident / passthrough, 4 KiB randread QD32", "IOPS",
                         f0(ic["b"]["iops"]), f0(ic["a"]["iops"]), f2(ic["ratio"]),
                         fspread(ic["ratio_per_repeat"]), "≥ 0.95", verdict(c.get("targets"), "(1) cached"),
                         f"measured-pass hits {f2(ic.get('measured_hit_pct'))} %"])
            bars.append(("(1) cached/passthrough", ic["ratio"], span(ic["ratio_per_repeat"]), 0.95))
        wc = c.get("warm_vs_cold")
        if wc:
            per = [r["ratio"] for r in wc["runs"]]
            rows.append(["(2) warm / cold over sas:, 4 KiB randread QD16", "IOPS", f0(wc["warm_iops"]),
                         f0(wc["cold_iops"]), f2(wc["ratio"]), fspread(per), "≥ 50",
                         verdict(c.get("targets"), "(2)"), f"warm-pass hits {f2(wc.get('warm_hit_pct'))} %"])
        out += [f"bench/cache_bench.sh: {c['repeat']} repeat(s), {c['seconds']} s per pass of (1), "
                f"working sets {c['ws_bytes'] >> 20} MiB / {c['ws2_bytes'] >> 20} MiB.", ""]
        out += table(["measure", "unit", "ubcache (b / warm)", "baseline (a / cold)", "ratio", "per-repeat min–max",
                      "target", "", "check"], rows, ["---", "---", "---:", "---:", "---:", "---", "---", "---", "---"])
    else:
        out += ["cache_bench.sh: no result.", ""]
    pp = plots.ratio_bars("peers", "peers: ubcache / peer", bars)
    return out + ([f"![peers]({pp})", ""] if pp else [])


LAT_LABEL = {"ubcache": "ubcache serve, cache hit", "raw": "raw cache file, fio io_uring",
             "nbdkit": "nbdkit file", "qemu-nbd": "qemu-nbd", "null": "nbdkit null (protocol only)",
             "file": "ubcache serve, file export (no cache)"}
LAT32_LABEL = {**LAT_LABEL, "raw": "raw export file, fio io_uring"}
PCTS = [("p50", "p50_us"), ("p99", "p99_us"), ("p99.9", "p99.9_us")]


def r_latency(d, plots):
    cfg, sv, rt = d["config"], d["servers"], d["ratios_ubcache_over"]
    out = [f"4 KiB randread QD1, total latency (submit to completion), {cfg['seconds']} s per run, "
           f"{cfg['repeat']} repeat(s), every configuration once per repeat, order rotated; "
           f"{cfg['ws_bytes'] >> 20} MiB region; NBD configurations through fio's nbd engine (one connection). "
           "Cells: median of repeats [min–max].", ""]
    rows = []
    for c, x in sv.items():
        m, r = x["median"], x["range"]
        cells = [f"{f0(m[k])} [{frange(r[k], f0)}]" if m[k] is not None else "—" for _, k in PCTS]
        ratio = "" if c == "ubcache" else f"{f2(rt[c]['p50_us']['median'])} [{frange(rt[c]['p50_us']['range'])}]"
        cpu = med([y.get("server_cpu_pct") for y in x["runs"] if y])
        rows.append([LAT_LABEL.get(c, c), *cells, f"{f0(m['iops'])}", ratio, f0(cpu)])
    out += table(["configuration", "p50 µs", "p99 µs", "p99.9 µs", "IOPS", "ubcache p50 / this p50", "server CPU %"],
                 rows)
    p50 = {c: x["median"]["p50_us"] for c, x in sv.items()}
    if all(p50.get(c) is not None for c in ("ubcache", "raw", "null")):
        added = {c: p50[c] - p50["raw"] for c in ("ubcache", "nbdkit", "qemu-nbd") if p50.get(c) is not None}
        limit = p50["raw"] + p50["null"] + 10
        out += ["Added over the raw file's p50 (medians): "
                + ", ".join(f"{LAT_LABEL.get(c, c)} +{f0(v)} µs" for c, v in added.items())
                + f"; the protocol alone (nbdkit null's p50) costs {f0(p50['null'])} µs. Target (issue 12): ubcache's "
                f"p50 ≤ raw + null + 10 µs = {f0(limit)} µs — {f0(p50['ubcache'])} µs: "
                + ("PASS" if p50["ubcache"] <= limit else "MISS"), ""]
    out += _latency_qd32(d.get("qd32"))
    h = d.get("ubcache_hits")
    if h:
        out += [f"ubcache's counters over the measured runs: {h['hits']} hits, {h['misses']} misses "
                f"(hit ratio {f1(h['hit_pct'])} %) for {h['fio_reads']} fio reads.", ""]
    else:
        out += ["ubcache's hit counters could not be read: the hit ratio is unknown.", ""]
    p1 = plots.percentile_lines("latency_percentiles", "4 KiB randread QD1 latency",
                                [(LAT_LABEL.get(c, c), [(lab, x["median"][k], x["range"][k]) for lab, k in PCTS])
                                 for c, x in sv.items()])
    p2 = plots.ratio_bars("latency_ratios", "ubcache p50 / peer p50 (lower: ubcache faster)",
                          [(f"/{LAT_LABEL.get(c, c)}", rt[c]["p50_us"]["median"], rt[c]["p50_us"]["range"], None)
                           for c in rt])
    return out + [f"![{n}]({p})" for n, p in (("latency percentiles", p1), ("latency ratios", p2)) if p] + [""]


def _latency_qd32(q):
    """The QD32 table and the issue's bar for it: the file export at QD32
    against the no-op server, with the raw file's own QD32 rate beside."""
    if not q:
        return []
    out = ["4 KiB randread QD32, the same servers (IOPS is the measure here; fio's nbd engine, one connection). "
           "Cells: median of repeats [min–max].", ""]
    rows = []
    for c, x in q.items():
        m, r = x["median"], x["range"]
        us = med([y.get("server_cpu_us_per_io") for y in x["runs"] if y])
        cpu = med([y.get("server_cpu_pct") for y in x["runs"] if y])
        rows.append([LAT32_LABEL.get(c, c), f"{f0(m['iops'])} [{frange(r['iops'], f0)}]" if m["iops"] else "—",
                     f0(m["p50_us"]), f0(m["p99_us"]), f0(cpu), f1(us)])
    out += table(["configuration", "IOPS", "p50 µs", "p99 µs", "server CPU %", "server CPU µs per read"], rows)
    iops = {c: x["median"]["iops"] for c, x in q.items()}
    if all(iops.get(c) for c in ("file", "null", "raw")):
        f, n, w = iops["file"], iops["null"], iops["raw"]
        line = (f"Target (issue 12): the file export at QD32 ≥ the no-op server's IOPS — {f0(f)} against {f0(n)} "
                f"({f2(f / n)}×): " + ("PASS" if f >= n else "MISS"))
        if f < n and w < n:
            line += (f". The disk under the file bounds it: the raw file itself, through fio's io_uring engine at "
                     f"QD32 in the same run, reads {f0(w)} IOPS, below the no-op server's {f0(n)}; the file export "
                     f"reaches {f2(f / w)}× of the raw file")
        elif f < n:
            line += f"; the raw file reads {f0(w)} IOPS, the file export {f2(f / w)}× of it"
        out += [line + ".", ""]
    return out


def r_fairness(d, plots):
    rows, bars = [], []
    for mode in ("writethrough", "writeback"):
        w = d.get(mode)
        x = w and w.get("s3a")
        if not x:
            rows.append([mode, "—", "—", "—", "—", "—", "not measured"])
            continue
        beside = (x.get("runs") or {}).get("beside") or []
        wr = med([r.get("writers_iops") for r in beside if r])
        wb = med([r.get("wb_written_reader") for r in beside if r])
        rows.append([mode, f0(x["solo_iops"]), f0(x["beside_iops"]), f2(x["ratio"]),
                     ", ".join(f2(p) for p in x["ratio_per_pair"]) or "—", f0(wr),
                     "—" if wb is None else f1(wb / (1 << 20))])
        bars.append((mode, x["ratio"], span(x["ratio_per_pair"]), 0.8))
    cfg = next((d[m].get("config", {}) for m in ("writethrough", "writeback") if d.get(m)), {})
    out = ["One 4 KiB randread reader (QD1, region not cached: its reads go to the modelled spindle) beside "
           "4 writers (4 KiB randwrite QD8 each, an NBD FLUSH after every write: fio fsync=1, since its nbd engine has no fdatasync), against the same reader alone; "
           f"bench/writeback_bench.sh section (3a) with `--writer-fsync 1 --mode3 MODE`, "
           f"{cfg.get('repeat', '?')} pair(s) per mode, A B then B A. Target (issue 12): reader ≥ 0.8× solo.", ""]
    out += table(["cache mode", "reader alone IOPS", "reader beside IOPS", "ratio (of medians)", "per pair",
                  "writers IOPS", "written back while reading MiB"], rows)
    p = plots.ratio_bars("fairness", "fairness: reader beside 4 syncing writers / alone", bars)
    return out + ([f"![fairness]({p})", ""] if p else [])


SCALE_LABEL = {"ubcache": "ubcache (writethrough, cache file + sas: backing)",
               "ubcache-writethrough": "ubcache writethrough (cache file + sas: backing)",
               "ubcache-writeback": "ubcache writeback (cache file + sas: backing)",
               "alone": "the cache file alone"}


def _largest_over_peak(u):
    """(peak point, largest-count point, their ratio) of one target's sweep."""
    peak = max(u.values(), key=lambda p: p["mb_s"])
    last = u[max(u)]
    return peak, last, last["mb_s"] / peak["mb_s"] if peak["mb_s"] else None


def _pair_ratios(d, k):
    """Target k's fresh-start pairs (those with a peak) and their largest/peak ratios."""
    pr = [p for p in d.get("pairs", {}).get(k, []) if p["peak_mb_s"]]
    return pr, [p["largest_mb_s"] / p["peak_mb_s"] for p in pr]


def _writethrough_scaling_why(by, peak, last):
    """Why writethrough falls at the largest client count: what ext4 sent
    to the device there against at the peak, all of it the spindle's."""
    a, b = peak.get("device_write_mb_s"), last.get("device_write_mb_s")
    if a is None or b is None:
        return []
    wb = by.get("ubcache-writeback", {}).get(last["clients"], {})
    tail = (f" Writeback takes the same writes into the cache: {f1(wb['mb_s'])} MB/s at {last['clients']} clients "
            "in this run." if wb.get("mb_s") is not None else "")
    return [f"Why writethrough falls: at {last['clients']} clients ext4 sent {f1(b)} MB/s of writes to its block "
            f"device, against {f1(a)} MB/s at {peak['clients']} ({f2(b / a) if a else '—'}×), and in writethrough "
            "each of them completes only once the modelled spindle has it, so dbench's writes queue behind the "
            "spindle (max latency above). The client's page-cache settings did not move it (bench/README.md: "
            "dirty_expire_centisecs 300 s, dirty ratios 60/40, ext4 data=writeback, each measured)." + tail, ""]


def r_scaling(d, plots):
    t = d["targets"]
    counts = sorted({p["clients"] for pts in t.values() for p in pts})
    by = {k: {p["clients"]: p for p in pts} for k, pts in t.items()}
    keys = sorted((k for k in t if k != "alone"), key=lambda k: (k != "ubcache-writethrough", k)) + \
        (["alone"] if "alone" in t else [])
    short = {"ubcache": "ubcache", "ubcache-writethrough": "writethrough", "ubcache-writeback": "writeback",
             "alone": "cache file alone"}
    rows = []
    for c in counts:
        row = [str(c)]
        for k in keys:
            p = by.get(k, {}).get(c)
            row += [f1(p["mb_s"]) if p else "—", f0(p["max_latency_ms"]) if p else "—"]
        rows.append(row)
    cache = f", cache {d['cache_size']}" if d.get("cache_size") else ""
    out = [f"dbench 4 (its client.txt load) on ext4 ({d['fs_size']}{cache}), {d['seconds']} s per point; ubcache's "
           "ext4 through nbdfuse + losetup, the cache file's through losetup --direct-io. One run per point.", ""]
    head = ["clients"]
    for k in keys:
        head += [f"{short.get(k, k)} MB/s", f"{short.get(k, k)} max latency ms"]
    out += table(head, rows)
    # What reached the block device under ext4 (the export, or the cache
    # file alone), and in writeback what the cutoff sent to the spindle.
    if any(p.get("device_write_mb_s") is not None for pts in t.values() for p in pts):
        head2, rows2 = ["clients"], []
        for k in keys:
            head2.append(f"{short.get(k, k)} device writes MB/s")
            if k == "ubcache-writeback":
                head2 += ["writeback: written through at the cutoff", "writeback: dirty after, MiB"]
        for c in counts:
            row = [str(c)]
            for k in keys:
                p = by.get(k, {}).get(c) or {}
                row.append(f1(p["device_write_mb_s"]) if p.get("device_write_mb_s") is not None else "—")
                if k == "ubcache-writeback":
                    row.append(str(p["cutoff_writethroughs"]) if p.get("cutoff_writethroughs") is not None else "—")
                    row.append(f0(p["dirty_bytes_after"] / 2**20) if p.get("dirty_bytes_after") is not None else "—")
            rows2.append(row)
        out += ["", "What ext4 wrote to its block device per second of each point (the page cache absorbs the rest "
                "of dbench's writes; in writethrough every byte of it is the spindle's), and in writeback the "
                "writes that dirty data past cutoff_writeback (40 % of the cache) sent through to the spindle:",
                ""] + table(head2, rows2) + [""]
    for k in keys:
        u = by.get(k, {})
        if k == "alone" or not u:
            continue
        peak, last, ratio = _largest_over_peak(u)
        name = "ubcache" if k == "ubcache" else f"ubcache {short.get(k, k)}"
        pr, rs = _pair_ratios(d, k)
        if not pr:
            out += [f"{name} at {max(u)} clients: {f1(last['mb_s'])} MB/s, {f2(ratio)}× its peak "
                    f"({f1(peak['mb_s'])} MB/s at {peak['clients']}); target (issue 12) ≥ 0.9× — "
                    + ("PASS" if ratio is not None and ratio >= 0.9 else "MISS"), ""]
            continue
        med = statistics.median(rs)
        each = ", ".join(f"{f1(p['peak_mb_s'])} → {f1(p['largest_mb_s'])} ({f2(r)}×)" for p, r in zip(pr, rs))
        out += [f"{name}, {len(pr)} fresh-start pairs ({pr[0]['peak_clients']} then {pr[0]['largest_clients']} "
                f"clients, MB/s): {each}; median {f2(med)}× (min–max {f2(min(rs))}–{f2(max(rs))}); the sweep alone: "
                f"{f2(ratio)}×; target (issue 12) ≥ 0.9× — " + ("PASS" if med >= 0.9 else "MISS"), ""]
        if k == "ubcache-writethrough" and med < 0.9:
            out += _writethrough_scaling_why(by, peak, last)
    u = by.get("alone", {})
    if u:
        peak, last, ratio = _largest_over_peak(u)
        _, rs = _pair_ratios(d, "alone")
        tail = ""
        if rs:
            tail = f"; its fresh-start pairs: {', '.join(f2(r) + '×' for r in rs)} (median {f2(statistics.median(rs))}×)"
        out += [f"For reference, the cache file alone at {max(u)} clients: {f1(last['mb_s'])} MB/s, {f2(ratio)}× its "
                f"peak ({f1(peak['mb_s'])} MB/s at {peak['clients']}){tail}.", ""]
    p1 = plots.scaling_lines("scaling_throughput", "dbench throughput",
                             [(SCALE_LABEL.get(k, k), [(p["clients"], p["mb_s"]) for p in pts]) for k, pts in t.items()],
                             "MB/s (dbench)")
    p2 = plots.scaling_lines("scaling_latency", "dbench max latency",
                             [(SCALE_LABEL.get(k, k), [(p["clients"], p["max_latency_ms"]) for p in pts])
                              for k, pts in t.items()], "max latency, ms", log=True)
    return out + [f"![{n}]({p})" for n, p in (("scaling throughput", p1), ("scaling latency", p2)) if p] + [""]

TUNE_LABEL = {"backing": "backing device alone (sas:)", "cache": "cache file alone",
              "untuned": "untuned (bcache defaults)", "tuned": "tuned (cutoff 0, thresholds 0)",
              "cutoff0": "sequential_cutoff 0 alone", "cong0": "congested thresholds 0 alone",
              "shipped": "as shipped", "lba": "as shipped, writeback_order lba"}
TUNE_TOOLS = [("sysbench48", "sysbench fileio rndrw, 48 threads"), ("sysbench4", "sysbench fileio rndrw, 4 threads"),
              ("fio48", "fio randrw (60 % read, 16 KiB, psync), 48 jobs")]


def tune_label(cfg):
    mode, _, knob = cfg.partition(":")
    return TUNE_LABEL[cfg] if not knob else f"{'writeback' if mode == 'wb' else 'writethrough'}: {TUNE_LABEL[knob]}"


def r_tuning(d, plots):
    runs = d["runs"]
    total = lambda x: (x["read_mib_s"] or 0) + (x["written_mib_s"] or 0)
    out = [f"ext4 made fresh on each target; `sysbench fileio prepare` of {d['fileset']} in 16 files (written "
           f"through the target, so sequential_cutoff decides what is cached; cache {d['cache_size']}), then "
           f"{d['seconds']} s of each workload below (16 KiB, O_DIRECT, fsync every 100 requests). Targets in a fixed "
           f"order, the order repeated {d['repeat']}×; the spread is min–max over repeats. Ratios: read + written "
           "MiB/s over the backing device alone's in the same repeat. Target (issue 12): tuned ≥ 3.4× the backing "
           "device alone at 48 threads (the report's 570 against 170 IOPS).", ""]

    def per_repeat(cfg, tool, base):
        return [total(a[tool]) / total(b[tool]) for a, b in zip(runs.get(cfg, []), runs.get(base, []))
                if total(b[tool])]

    bars = []
    for tool, title in TUNE_TOOLS:
        rows = []
        for cfg in d["configs"]:
            rr = runs.get(cfg) or []
            if not rr:
                rows.append([tune_label(cfg)] + ["—"] * 6)
                continue
            rd = [r[tool]["read_mib_s"] for r in rr]
            wr = [r[tool]["written_mib_s"] for r in rr]
            iops = [(r[tool]["reads_s"] or 0) + (r[tool]["writes_s"] or 0) for r in rr]
            vb = per_repeat(cfg, tool, "backing")
            mode = cfg.partition(":")[0]
            vu = per_repeat(cfg, tool, f"{mode}:untuned") if ":" in cfg else []
            rows.append([tune_label(cfg), f"{f2(med(rd))} ({fspread(rd)})", f"{f2(med(wr))} ({fspread(wr)})",
                         f0(med(iops)), f"{f2(med(vb))} ({fspread(vb)})" if vb else "—",
                         f"{f2(med(vu))}" if vu else "—", f1(med([r[tool].get("lat_p95_ms") for r in rr]))])
            if tool == "sysbench48" and ":" in cfg:
                bars.append((tune_label(cfg).replace("writethrough", "wt").replace("writeback", "wb"),
                             med(vb), span(vb), 3.4 if cfg.endswith(":tuned") else None))
        out += [f"### {title}", ""]
        out += table(["target", "read, MiB/s (spread)", "written, MiB/s (spread)", "IOPS", "× backing alone",
                      "× untuned", "p95 latency ms"], rows)
    for mode, name in (("wt", "writethrough"), ("wb", "writeback")):
        v = [x for x in (per_repeat(f"{mode}:tuned", "sysbench48", "backing")) if x]
        if v:
            m = med(v)
            out += [f"{name}, tuned, sysbench 48 threads: {f2(m)}× the backing device alone — target ≥ 3.4×: "
                    + ("PASS" if m >= 3.4 else "MISS"), ""]
            if mode == "wt":
                out += ["In writethrough every write waits for the spindle. With sysbench's 1.5 : 1 read/write mix "
                        "(40 % writes), even reads that cost nothing leave the spindle all the writes, so the "
                        "ceiling is about 1 / 0.4 = 2.5× the backing device alone's mixed rate; the report's 3.9× "
                        "needs writes absorbed by the cache (writeback).", ""]
    # Issue 13: ubcache as shipped (the auto policies) against hand tuning.
    for mode, name in (("wt", "writethrough"), ("wb", "writeback")):
        for tool, title in TUNE_TOOLS:
            v = per_repeat(f"{mode}:shipped", tool, f"{mode}:tuned")
            if v:
                m = med(v)
                u = per_repeat(f"{mode}:untuned", tool, f"{mode}:tuned")
                out += [f"{name}, {title}: as shipped {f2(m)}× hand-tuned ({fspread(v)}), bcache's defaults "
                        f"{f2(med(u)) if u else '—'}× — target (issue 13) ≥ 0.95×: "
                        + ("PASS" if m >= 0.95 else "MISS"), ""]
    # Issue 30: writeback as shipped (writeback_order flush, epoch order)
    # against the same with bcache's address order.
    for tool, title in TUNE_TOOLS:
        v = per_repeat("wb:shipped", tool, "wb:lba")
        if v:
            m = med(v)
            out += [f"writeback, {title}: as shipped (writeback_order flush) {f2(m)}× writeback_order lba "
                    f"(read + written MiB/s; per repeat: {', '.join(f2(x) for x in v)})"
                    + (" — target (issue 30) ≥ 0.9×: " + ("PASS" if m >= 0.9 else "MISS") if "48" in tool
                       else " — for reference"), ""]
    # Why: the counters of each ubcache configuration (first repeat).
    crow = []
    for cfg in d["configs"]:
        rr = runs.get(cfg) or []
        if ":" not in cfg or not rr:
            continue
        r = rr[0]
        pc = r.get("prepare_counters") or {}
        c = (r.get("counters") or {}).get("sysbench-48") or {}
        hits, miss = c.get("stats_total/cache_hits", 0), c.get("stats_total/cache_misses", 0)
        bh, bm = c.get("stats_total/cache_bypass_hits", 0), c.get("stats_total/cache_bypass_misses", 0)
        reads = hits + miss + bh + bm
        crow.append([tune_label(cfg), f0(r.get("prepare_s")), f0(pc.get("sequential_bypasses")),
                     f0(pc.get("congested_bypasses")), f0((pc.get("stats_total/bypassed") or 0) / (1 << 20)), f0(pc.get("dirty_data", 0) / (1 << 20)),
                     f"{100 * (hits + bh) / reads:.0f} %" if reads else "—", f0(bm + bh),
                     f0(c.get("congested_bypasses")), f0(c.get("congested_slow_ios")), f0(c.get("congested_min")),
                     f0(c.get("sequential_bypasses")), f0(c.get("auto_congested_bypasses")),
                     f0(pc.get("spare_admissions")), f0(c.get("ghost_admissions")), f0(c.get("cache_full_bypasses"))])
    if crow:
        out += ["### Why: ubcache's counters (first repeat)", "",
                "After the prepare: requests past sequential_cutoff, requests bypassed for congestion, MiB that "
                "bypassed the cache, dirty MiB. During "
                "the 48-thread sysbench run: the read hit rate, reads that bypassed the cache, and why — requests "
                "bypassed for congestion, cache completions slower than their congested threshold, the lowest "
                "congestion score seen (sampled each second; 0 = not congested, −1024 = fully congested) — and "
                "requests past sequential_cutoff; then the auto policies' decisions (as shipped): requests bypassed "
                "because the cache device measured clearly slower than the backing device, stream requests cached "
                "because there was space to spare or because they were read again (ghost list), and requests "
                "the full cache could not take.", ""]
        out += table(["configuration", "prepare s", "prepare: cutoff bypasses", "prepare: congested bypasses",
                      "prepare: bypassed MiB",
                      "prepare: dirty MiB", "run: read hit rate", "run: bypassed reads", "run: congested bypasses",
                      "run: slow cache I/Os", "run: lowest score", "run: cutoff bypasses",
                      "run: auto-congested bypasses", "prepare: spare admissions", "run: ghost admissions",
                      "run: cache-full bypasses"], crow)
    p = plots.ratio_bars("tuning", "tuning: sysbench rndrw 48 threads, × the backing device alone", bars)
    return out + ([f"![tuning]({p})", ""] if p else [])


def r_rbd(d, plots):
    cfg, rows = d["config"], d["rows"]
    out = [f"An SSD cache in front of Ceph RBD. Cluster: {cfg['cluster']} — the image alone is RAM over "
           "loopback, far faster than a real cluster's network and disks, so these ratios understate what a "
           f"cache gives a real one. fio {cfg['fio']}, {cfg['seconds']} s per run, {cfg['ws_bytes'] >> 20} MiB "
           f"working set, {cfg['repeat']} repeat(s), {cfg['order']}. image: `ubcache serve --backing rbd:` (no "
           "cache); cached: `--cache FILE --cache-mode writeback`, the working set warm; rbd bench: "
           f"`{cfg['rbd_bench']}` (librbd, no NBD). Cells: median [min–max].", ""]
    trows, bars = [], []
    for op, r in rows.items():
        trows.append([f"4 KiB {op} QD32", f"{f0(r['image_iops']['median'])} [{frange(r['image_iops']['range'], f0)}]",
                      f"{f0(r['cached_iops']['median'])} [{frange(r['cached_iops']['range'], f0)}]",
                      f"{f0(r['rbd_bench_iops']['median'])} [{frange(r['rbd_bench_iops']['range'], f0)}]",
                      f"{f2(r['ratio_cached_over_image']['median'])} [{frange(r['ratio_cached_over_image']['range'])}]",
                      f"{f2(r['ratio_cached_over_rbd_bench']['median'])} "
                      f"[{frange(r['ratio_cached_over_rbd_bench']['range'])}]",
                      f"{f0(r['image_p99_us']['median'])} / {f0(r['cached_p99_us']['median'])}"])
        bars.append((f"{op} cached/image", r["ratio_cached_over_image"]["median"],
                     r["ratio_cached_over_image"]["range"], None))
    out += table(["row", "image IOPS", "cached IOPS", "rbd bench IOPS", "cached / image", "cached / rbd bench",
                  "p99 µs image / cached"], trows)
    hp = [h for h in d.get("cached_read_hit_pct", []) if h is not None]
    out += [f"Cached runs' hit ratio (ubcache's counters): {', '.join(f1(h) + ' %' for h in hp) or 'unknown'}. "
            f"Cached randwrite: {cfg.get('cached_randwrite', '?')}.", ""]
    p = plots.ratio_bars("rbd", "cached / image alone, IOPS (4 KiB, QD32)", bars)
    return out + ([f"![rbd]({p})", ""] if p else [])


DP_LABEL = {"raw": "raw file, fio io_uring O_DIRECT", "file": "`serve --backing FILE`",
            "hit": "cache hit (`--cache`, warm)", "qemu-nbd": "qemu-nbd `--aio=io_uring --cache=none`",
            "min": "minimal io_uring responder", "minw": "minimal io_uring responder (--write)",
            "minw0": "minimal io_uring responder (--write, no poll)", "mem": "`serve --backing mem:`",
            "nbdkit": "nbdkit memory", "null": "nbdkit null",
            "wb": "ubcache writeback over a file"}


# The issues' bars that are ratios to the raw file (the red marks of the plot).
DP_TARGET = {("randread_4k_qd32", "hit"): 0.85, ("randread_4k_qd32", "file"): 0.85,
             ("randwrite_4k_qd32", "wb"): 0.85, ("write_1m_qd8", "wb"): 0.8}


def _dp_table(wl, rows_of):
    """One table, the workloads' configurations as columns (the issues' shape);
    rows_of: [(row label, workload, cell -> text)]."""
    configs = wl[rows_of[0][1]]["configs"]
    rows = [[label] + [fn(wl[w]["cells"][c], c) for c in configs] for label, w, fn in rows_of]
    return table(["", *(DP_LABEL.get(c, c) for c in configs)], rows)


def _dp_cell(key, f, unit=""):
    def fn(cell, c):
        m, r = cell["median"].get(key), cell["range"].get(key)
        if m is None:
            return "—"
        return f"{f(m)}{unit}" + (f" ({frange(r, f)})" if r and r[0] != r[1] else "")
    return fn


def _dp_ratio(cell, c):
    x = cell.get("ratio_to_raw")
    if c == "raw" or not x or x["median"] is None:
        return "1" if c == "raw" else "—"
    return f"{f2(x['median'])}×" + (f" ({frange(x['range'])})" if x["range"][0] != x["range"][1] else "")


def _dp_rate(metric):
    return _dp_cell("iops", lambda v: f"{v / 1e3:.1f}k") if metric == "iops" else _dp_cell("gbps", f2)


def _dp_rows(w, name, metric):
    us = _dp_cell("server_cpu_us_per_io", f1)
    return [(f"{name}: {'IOPS' if metric == 'iops' else 'GB/s'}", w, _dp_rate(metric)),
            (f"{name}: × raw file", w, _dp_ratio),
            (f"{name}: p50 µs", w, _dp_cell("p50_us", f0)),
            (f"{name}: p99 µs", w, _dp_cell("p99_us", f0)),
            (f"{name}: server CPU µs per request", w, lambda cell, c: "—" if c == "raw" else us(cell, c))]


def r_datapath(d, plots):
    cfg, wl = d["config"], d["workloads"]
    sv = cfg.get("servers", {})
    fresh_wb = bool(cfg.get("wb_cache_bytes"))  # session 29 on: a fresh writeback cache per run
    out = [f"fio against each configuration, {cfg['seconds']} s per run, {cfg['rounds']} round(s): each round drives "
           "every configuration of a workload once, the order rotated by one per round. "
           f"{cfg['size_bytes'] >> 20} MiB files of fio-written data; " +
           (f"the hit cache {cfg['cache_bytes'] >> 20} MiB, the writeback cache {cfg['wb_cache_bytes'] >> 20} MiB "
            "(formatted afresh before each of its runs). " if fresh_wb
            else f"caches {cfg['cache_bytes'] >> 20} MiB. ") +
           "NBD configurations through fio's nbd engine (libnbd, one connection over a Unix socket); latency is "
           "the total (submit to completion). Server CPU per request: the server process's utime+stime "
           "(/proc/PID/stat, 10 ms ticks) over the run ÷ fio's requests. × raw file: this configuration's "
           "rate over the raw file's in the same round. Cells: median (min–max over rounds).", "",
           "Servers (all up for the whole run" + ("; the writeback daemon restarted on a freshly formatted cache "
                                                  "before each of its runs" if fresh_wb else "") +
           "):", ""] + [f"- {k}: `{v}`" for k, v in sv.items()] + [
           "", "### 4 KiB random read", ""]
    out += _dp_table(wl, _dp_rows("randread_4k_qd1", "QD1", "iops") + _dp_rows("randread_4k_qd32", "QD32", "iops"))
    out += ["### 1 MiB sequential read, QD8", ""]
    out += _dp_table(wl, _dp_rows("read_1m_qd8", "QD8", "gbps"))
    out += ["### Writes: 4 KiB random write QD32, 1 MiB sequential write QD8", "",
            "The raw file here is a file of its own (the data file is being served); ubcache's writeback "
            "configuration writes into " + (
                "a cache formatted afresh before each of its runs, eight times the data's size, over a file "
                "backing device (sequential cutoff and congestion thresholds 0, so every write goes to the cache, "
                "and a run stays under cutoff_writeback: the counters below say whether any write went past the "
                "cache); its background writeback runs during its own runs, sharing the disk with the writes it "
                "measures" if fresh_wb else
                "a formatted cache over a file backing device (sequential cutoff and congestion thresholds 0, so "
                "every write goes to the cache); its background writeback runs as it would during its own runs "
                "(at full speed once the cache is near cutoff_writeback, sharing the disk with the writes it "
                "measures)") +
            ", and is paused (writeback_running 0) during the other configurations' write runs, which it would "
            "slow.", ""]
    out += _dp_table(wl, _dp_rows("randwrite_4k_qd32", "4 KiB QD32", "iops") + _dp_rows("write_1m_qd8", "1 MiB QD8", "gbps"))
    busy = [r["machine"] for x in wl.values() for cell in x["cells"].values() for r in cell["runs"]
            if r and r.get("machine")]
    if busy:
        out += [f"Machine during the runs (median over runs): {f0(med([b['busy_pct'] for b in busy]))}% of all CPUs "
                f"busy, steal {f1(med([b['steal_pct'] for b in busy]))}%, iowait "
                f"{f1(med([b['iowait_pct'] for b in busy]))}%.", ""]
    h, wb = d.get("hit_counters"), d.get("writeback_counters")
    if h:
        out += [f"The cache-hit daemon's counters over the measured reads: {h.get('stats_total/cache_hits', 0)} hits, "
                f"{h.get('stats_total/cache_misses', 0)} misses (hit ratio {f1(h.get('hit_pct'))} %); a ratio below "
                "~100 % means its row measured misses too.", ""]
    else:
        out += ["The cache-hit daemon's counters could not be read: its hit ratio is unknown.", ""]
    if wb and wb.get("runs"):
        out += ["The writeback daemon after each of its runs (a fresh daemon and cache per run): " + "; ".join(
            f"{tag}: {f0((c.get('stats_total/bypassed') or 0) / (1 << 20))} MiB bypassed the cache, "
            f"{c.get('cutoff_writethroughs', 0)} cutoff write-throughs, {c.get('cache_full_bypasses', 0)} "
            f"cache-full bypasses, {f0((c.get('writeback_written') or 0) / (1 << 20))} MiB written back, "
            f"{f0((c.get('dirty_data') or 0) / (1 << 20))} MiB dirty, {c.get('free_buckets', '?')} free buckets"
            for tag, c in wb["runs"].items()) + ".", ""]
    elif wb and "end" in wb:  # results from before session 29: one daemon for the whole suite
        e = wb["end"]
        out += [f"The writeback daemon over the runs: {f0((wb.get('stats_total/bypassed') or 0) / (1 << 20))} MiB "
                f"bypassed the cache, {wb.get('cache_full_bypasses', 0)} requests bypassed for a full cache; "
                f"{f0((wb.get('writeback_written') or 0) / (1 << 20))} MiB written back; at the end "
                f"{f0((e.get('dirty_data') or 0) / (1 << 20))} MiB dirty, {e.get('cache_available_percent', '?')} % "
                "of the cache available.", ""]
    elif wb is not None:
        out += ["The writeback daemon's counters could not be read.", ""]
    for w, group in cfg.get("set_of", {}).items():
        sv = wl.get(w, {}).get("sets")
        if not sv:
            continue
        k, unit = ("p50_us", "µs p50") if w == "randread_4k_qd1" else ("gbps", "GB/s")

        def row(c):
            return ", ".join("—" if not r else f1(r.get(k)) if k == "p50_us" else f"{r[k]:.2f}" for r in sv[c])
        out += [f"Back-to-back sets, {w}: {cfg['sets']} sets of one {cfg['set_seconds']} s run of each of "
                f"{', '.join(group)}, after the rounds, the order rotated by one per set. " +
                "; ".join(f"{c}: {row(c)}" for c in group) + f" ({unit}).", ""]
    out += ["### Acceptance (issues 28 and 29), judged from this run's medians (bars between servers: from the sets)",
            ""]
    for b in d.get("bars", []):
        v = "INFO" if b.get("info") else ("—" if b["pass"] is None else ("PASS" if b["pass"] else "MISS"))
        out.append(f"    {v} issue {b['issue']}: {b['bar']} — {b['shown'] or 'not measured'}")
    out += [""]
    if cfg.get("quick") or cfg["rounds"] < 2:
        out += [f"{'--quick: ' if cfg.get('quick') else ''}{cfg['rounds']} round(s) of {cfg['seconds']} s on "
                f"{cfg['size_bytes'] >> 20} MiB files: a check that the suite runs end to end; the verdicts above "
                "are not the issues' measurement, which is the full suite (1 GiB files, 10 s runs, two rounds "
                "alternated) on a quiet machine.", ""]
    out += _dp_ublk(d)
    bars = [(f"{c} {w.split('_')[0]} {w.split('_', 1)[1]}", x["cells"][c]["ratio_to_raw"]["median"],
             x["cells"][c]["ratio_to_raw"]["range"], DP_TARGET.get((w, c)))
            for w, x in wl.items() for c in x["configs"][1:] if c in ("file", "hit", "wb")]
    p = plots.ratio_bars("datapath", "datapath: × the raw file in the same round", bars)
    return out + ([f"![datapath]({p})", ""] if p else [])


UB_LABEL = {"ublk-mem": "`serve --ublk`, mem:", "ublk-file": "`serve --ublk`, file (a virtio disk)",
            "nbd-mem": "`serve --nbd`, mem:", "nbd-file": "`serve --nbd`, file (a virtio disk)"}


def _dp_ublk(d):
    u = d.get("ublk")
    if not d.get("ublk_requested"):
        return ["ublk frontend: not run (DATAPATH_UBLK=1 runs bench/ublk_datapath.sh: the same requests on "
                "`serve --ublk` beside `serve --nbd` in a qemu guest).", ""]
    if not u:
        return ["ublk frontend: requested, but bench/ublk_datapath.sh left no result (see the log).", ""]
    out = ["### ublk frontend in a qemu guest — functional timings only", "",
           f"{u.get('note', '')} fio inside the guest: {u.get('fio', '')}; {u.get('seconds')} s per run, "
           f"{u.get('rounds')} round(s), configurations alternated. Server CPU per request as above, measured in "
           "the guest. Cells: median (min–max).", ""]
    configs = u["configs"]
    rows = []
    for w, label in (("randread_4k_qd1", "4 KiB randread QD1"), ("randread_4k_qd32", "4 KiB randread QD32"),
                     ("randwrite_4k_qd32", "4 KiB randwrite QD32")):
        cells = u["workloads"].get(w, {})
        for key, name, f in (("iops", "IOPS", f0), ("p50_us", "p50 µs", f0),
                             ("server_cpu_us_per_io", "server CPU µs per request", f1)):
            row = [f"{label}: {name}"]
            for c in configs:
                x = cells.get(c)
                m, r = (x["median"].get(key), x["range"].get(key)) if x else (None, None)
                row.append("—" if m is None else f"{f(m)}" + (f" ({frange(r, f)})" if r and r[0] != r[1] else ""))
            rows.append(row)
    out += table(["", *(UB_LABEL.get(c, c) for c in configs)], rows)
    return out


ORDER_LABEL = {"flush": "flush (epoch order, the default)", "lba": "lba (address order, bcache's)"}


def _time_lines(plots, name, title, series, ylabel, marks=(), hlines=(), log=False):
    """series: [(label, [(seconds, value)])]; marks: [(seconds, label)], dotted verticals;
    hlines: [(value, label)], dashed horizontals."""
    series = [(l, [p for p in pts if p[1] is not None]) for l, pts in series]
    series = [s for s in series if s[1]]
    if not plots.plt or not series:
        return None
    fig, ax = plots.plt.subplots(figsize=(7, 4))
    for label, pts in series:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label, linewidth=1)
    for x, label in marks:
        ax.axvline(x, color="grey", linewidth=0.8, linestyle=":")
        ax.annotate(label, (x, 0), xycoords=("data", "axes fraction"), xytext=(2, 4), textcoords="offset points",
                    fontsize=7, color="grey")
    for y, label in hlines:
        ax.axhline(y, color="#c44e52", linewidth=0.8, linestyle="--", label=label)
    if hlines and not log:
        ax.set_ylim(0, max(ax.get_ylim()[1], 1.05 * max(y for y, _ in hlines)))
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("seconds since fio's start")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    return plots._save(fig, name)


def r_ordered(d, plots):
    o = d.get("orders", {})
    mib = 1 << 20
    out = [f"fio 4 KiB randwrite, one job at QD{d['iodepth']} (nbd engine, one connection), fsync={d['fsync']} (an "
           f"NBD FLUSH after every {d['fsync']}th write; fio sends them in bursts at QD>1), over {d['region']} of a "
           f"{d['backing_size']} `sas:` backing file behind a {d['cache_size']} cache in writeback, {d['seconds']} s "
           "in each order (flush first, then lba; a fresh format each), the daemon sampled once a second; then "
           f"`ctl flush`, timed (stopped after {d['flush_max_s']} s: a capped drain's rate is what it drained by "
           "then). Between the two, one 4 KiB discard past the written region is timed (stopped after "
           f"{d.get('trim_max_s', '?')} s): in flush order a discard reaches the backing device only after every "
           "older epoch (doc/design.md rule 14). One run per order: on a shared 2-core machine read the ratios, "
           "not the third digit.", ""]

    def cell(k, order, f=f0, scale=1):
        v = o.get(order, {}).get(k)
        return "—" if v is None else f(v / scale)

    def drain(order):
        fl = o.get(order, {}).get("flush") or {}
        if fl.get("rate_mib_s") is None:
            return "—"
        return (f"{f2(fl['rate_mib_s'])} ({f0((fl.get('drained') or 0) / mib)} MiB in {f0(fl['seconds'])} s"
                + ("" if fl.get("completed") else f", capped: {f0((fl.get('dirty_end') or 0) / mib)} MiB left") + ")")

    def trim(order):
        t = o.get(order, {}).get("trim")
        if not t:
            return "—"
        return f1(t["seconds"]) if t.get("completed") else f"≥ {f0(t['seconds'])} (stopped, still waiting)"

    def pct_of_cache(order, k):
        x = o.get(order, {})
        v, c = x.get(k), x.get("cache_data_bytes")
        return "—" if v is None else f"{f0(v / mib)} ({100 * v / c:.0f} %)" if c else f0(v / mib)

    rows = [
        ("client write IOPS, mean of seconds", lambda q: cell("iops_mean", q)),
        ("client write IOPS, median of seconds", lambda q: cell("iops_median", q)),
        ("client write IOPS, mean of the second half", lambda q: cell("iops_second_half_mean", q)),
        ("write latency p50 / p99 / max, ms", lambda q: "—" if q not in o else
         f"{f2(o[q]['fio']['clat_p50_us'] / 1e3)} / {f1(o[q]['fio']['clat_p99_us'] / 1e3)} / "
         f"{f0(o[q]['fio']['clat_max_us'] / 1e3)}"),
        ("client writes / FLUSHes (daemon's counts)", lambda q: "—" if q not in o else
         f"{o[q].get('client_writes')} / {o[q].get('client_flushes')}"),
        ("writeback lag max, s", lambda q: cell("lag_max_s", q, f1)),
        ("writeback lag p50 / p99, s", lambda q: f"{cell('lag_p50_s', q, f1)} / {cell('lag_p99_s', q, f1)}"),
        ("writeback lag at fio's end, s", lambda q: cell("lag_end_s", q, f1)),
        ("dirty epochs, most", lambda q: cell("epochs_max", q)),
        ("free buckets, fewest / cache_available_percent, lowest",
         lambda q: f"{cell('free_buckets_min', q)} / {cell('cache_available_min', q)}"),
        ("dirty MiB at the cutoff (most; % of the cache's data buckets)", lambda q: pct_of_cache(q, "dirty_max")),
        ("dirty MiB, median of the second half", lambda q: pct_of_cache(q, "dirty_second_half_median")),
        ("cutoff reached after, s (dirty within 5 % of its most)", lambda q: cell("cutoff_reached_s", q)),
        ("writes turned to write-through at the cutoff", lambda q: cell("cutoff_writethroughs", q)),
        ("ordered waits during fio (writes that waited for older epochs)", lambda q: cell("ordered_waits", q)),
        ("ordered wait, s in all / ms each", lambda q: "—" if q not in o or o[q].get("ordered_wait_us") is None else
         f"{f1(o[q]['ordered_wait_us'] / 1e6)} / "
         + (f2(o[q]['ordered_wait_us'] / 1e3 / o[q]['ordered_waits']) if o[q].get("ordered_waits") else "—")),
        ("written back during fio, MiB", lambda q: cell("writeback_written", q, f0, mib)),
        ("one 4 KiB discard at fio's end, s", trim),
        ("`ctl flush` drain rate, MiB/s", drain),
    ]
    orders = [q for q in ("flush", "lba") if q in o] + [q for q in o if q not in ("flush", "lba")]
    out += table(["", *(ORDER_LABEL.get(q, q) for q in orders)], [[name, *(fn(q) for q in orders)] for name, fn in rows],
                 ["---"] + ["---:"] * len(orders))

    def ratio(get):
        a, b = get(o.get("flush", {})), get(o.get("lba", {}))
        return a / b if a is not None and b else None

    if "flush" in o and "lba" in o:
        fl = lambda k: (lambda x: (x.get("flush") or {}).get(k))
        rs = [("client write IOPS, mean", ratio(lambda x: x.get("iops_mean"))),
              ("client write IOPS, median", ratio(lambda x: x.get("iops_median"))),
              ("client write IOPS, second half", ratio(lambda x: x.get("iops_second_half_mean"))),
              ("`ctl flush` drain rate", ratio(fl("rate_mib_s"))),
              ("one discard's wait" + ("" if all((o[q].get("trim") or {}).get("completed", True) for q in ("flush", "lba"))
                                      else " (at least: stopped)"),
               ratio(lambda x: (x.get("trim") or {}).get("seconds"))),
              ("writeback lag, max", ratio(lambda x: x.get("lag_max_s"))),
              ("writeback lag, p50", ratio(lambda x: x.get("lag_p50_s"))),
              ("dirty at the cutoff (most)", ratio(lambda x: x.get("dirty_max")))]
        out += ["flush / lba:", ""] + table(["", "flush / lba"], [[n, f2(v)] for n, v in rs])
        capped = [q for q in orders if not (o[q].get("flush") or {}).get("completed", True)]
        if capped:
            out += [f"The drain was capped in {' and '.join(capped)} order: its rate is over the first "
                    f"{d['flush_max_s']} s only (ORD_FLUSH_MAX).", ""]
    tgt = {o[q].get("lag_target_s") for q in orders} - {None, 0}
    # The cutoffs, as shares of the data buckets (they count metadata too).
    cut = sorted({(x[k] * x["cache_data_bytes"] / 100 / mib, f"{k} {x[k]} % (counts dirty buckets + metadata)") for x in o.values()
                  for k in ("cutoff_writeback", "cutoff_writeback_sync") if x.get(k) and x.get("cache_data_bytes")})
    secs = max((o[q].get("fio_seconds") or 0 for q in orders), default=0)
    marks = [(secs, "fio stops: discard, ctl flush")] if secs else []
    series = lambda k, scale=1: [(ORDER_LABEL.get(q, q), [(s["t"], s[k] / scale if s.get(k) is not None else None)
                                                        for s in o[q]["samples"]]) for q in orders]
    plots_made = [
        ("writeback lag", _time_lines(plots, "ordered_lag", "writeback_lag_seconds over time (fio, then ctl flush)",
                                      series("writeback_lag_seconds"), "lag, s", marks,
                                      [(t, f"writeback_lag_target {t} s") for t in sorted(tgt)])),
        ("dirty data", _time_lines(plots, "ordered_dirty", "dirty data over time (fio, then ctl flush)",
                                   series("dirty_data", mib), "dirty, MiB", marks, cut)),
        ("client IOPS", _time_lines(plots, "ordered_iops", "client write IOPS over time (fio's log, 1 s means)",
                                    [(ORDER_LABEL.get(q, q), o[q]["iops_series"]) for q in orders], "write IOPS (log)",
                                    log=True)),
    ]
    out += [f"![{n}]({p})" for n, p in plots_made if p] + [""]

    db = (d.get("dbench") or {}).get("orders") or {}
    if db:
        dd = d["dbench"]
        counts = sorted({p["clients"] for pts in db.values() for p in pts})
        by = {q: {p["clients"]: p for p in pts} for q, pts in db.items()}
        dorders = [q for q in ("flush", "lba") if q in db] + [q for q in db if q not in ("flush", "lba")]
        head, rws = ["clients"], []
        for q in dorders:
            head += [f"{q}: MB/s", f"{q}: max latency ms (slowest op)", f"{q}: ordered waits (s waited)",
                     f"{q}: discards + write-zeroes", f"{q}: dirty after MiB"]
        for c in counts:
            r = [str(c)]
            for q in dorders:
                p = by[q].get(c)
                if not p:
                    r += ["—"] * 5
                    continue
                op = p.get("op_max_latency_ms")
                ou = p.get("ordered_wait_us")
                dz = p.get("discards_and_zeroes")
                r += [f1(p["mb_s"]), f0(p["max_latency_ms"]) + (f" ({f0(op)})" if op is not None else ""),
                      str(p["ordered_waits"]) + (f" ({f1(ou / 1e6)})" if ou is not None else "")
                      + (f", {p['ordered_room_retries']} into the cache" if p.get("ordered_room_retries") else ""),
                      "—" if dz is None else str(dz), f0(p["dirty_after"] / mib)]
            rws.append(r)
        out += [f"dbench 4 (client.txt) on ext4 ({dd['fs_size']}) over ubcache in writeback ({dd['cache_size']} "
                f"cache, `sas:` backing; nbdfuse + losetup), {dd['seconds']} s per point, one sweep per order, each "
                "order on a fresh format and mkfs. Max latency is dbench's (the worst of its per-second "
                "intervals); in brackets the slowest single operation of its table, which can be far longer "
                "(one that outlasted the run holds up dbench's cleanup). Ordered waits: client writes and "
                "discards that waited for writeback — to go to the backing device after every older epoch, or, "
                "turned away for space, into the cache once it had room again (how many: 'into the cache') — "
                "with the seconds they waited in all.", ""] + table(head, rws)
        for q in dorders:
            u = by[q]
            peak = max(u.values(), key=lambda p: p["mb_s"])
            last = u[max(u)]
            r = last["mb_s"] / peak["mb_s"] if peak["mb_s"] else None
            verdict_ = ("PASS" if r is not None and r >= 0.9 else "MISS") if q == "flush" else "for reference"
            out += [f"{q} order: {max(u)} clients {f1(last['mb_s'])} MB/s, {f2(r)}× its peak ({f1(peak['mb_s'])} MB/s "
                    f"at {peak['clients']}); target (issue 30, flush order) ≥ 0.9× — {verdict_}"
                    + (" (one sweep; the scaling suite's fresh-start pairs are the careful verdict)" if q == "flush"
                       else ""), ""]
        if "flush" in by and "lba" in by:
            lc = max(set(by["flush"]) & set(by["lba"]), default=None)
            if lc is not None and by["lba"][lc]["mb_s"]:
                out += [f"dbench at {lc} clients, flush / lba: {f2(by['flush'][lc]['mb_s'] / by['lba'][lc]['mb_s'])}×",
                        ""]
        p = plots.scaling_lines("ordered_dbench", "dbench over writeback, by writeback_order",
                                [(ORDER_LABEL.get(q, q), [(p["clients"], p["mb_s"]) for p in db[q]]) for q in dorders],
                                "MB/s (dbench)")
        if p:
            out += [f"![ordered dbench]({p})", ""]
    return out


RENDER = {"observability": r_observability, "datapath": r_datapath, "writeback": r_writeback, "peers": r_peers, "latency": r_latency,
          "fairness": r_fairness, "scaling": r_scaling,
          "tuning": r_tuning, "rbd": r_rbd, "ordered": r_ordered}


def fmt_bytes(n):
    return "—" if n is None else f"{n / (1 << 30):.1f} GiB"


def machine_lines(m):
    if not m:
        return ["machine.json is missing: the machine is not recorded.", ""]
    dk, g, u = m.get("disk", {}), m.get("git", {}), m.get("ubcache", {})
    disk = (f"{dk.get('source', '?')} ({dk.get('fstype', '?')}), device {dk.get('device', '?')}: "
            f"model {dk.get('model') or 'not reported'}, {dk.get('size') or '?'}, "
            f"{'rotational' if dk.get('rotational') else 'non-rotational'}"
            f"{', driver ' + dk['driver'] if dk.get('driver') else ''}, scheduler {dk.get('scheduler') or '?'}")
    pk = ", ".join(f"{k} {v or 'not installed'}" for k, v in m.get("packages", {}).items())
    rows = [["host", m.get("host")],
            ["CPU", f"{m.get('cpus')} × {m.get('cpu_model')}"],
            ["memory", fmt_bytes(m.get("memory_bytes"))],
            ["kernel", f"{m.get('kernel')} ({m.get('os')}, virtualization: {m.get('virtualization') or 'none'})"],
            ["disk under the device files", disk],
            ["packages", pk],
            ["git", f"{g.get('commit')} ({g.get('describe')}, {'dirty' if g.get('dirty') else 'clean'} tree)"],
            ["ubcache", f"{u.get('path')} ({'built by this run' if u.get('built_by_run') else 'given with --ubcache'},"
                        f" {u.get('version')}, sha256 {str(u.get('sha256'))[:16]}…, mtime {u.get('mtime')})"],
            ["load average at start", ", ".join(f"{x:.2f}" for x in m.get("load_avg_at_start", []))]]
    return table(["machine", ""], rows, ["---", "---"])


def cmd_report(a):
    m = load(os.path.join(a.dir, "machine.json")) or {}
    run = m.get("run", {})
    suites = run.get("suites") or sorted(f[:-5] for f in os.listdir(a.dir) if f.endswith(".json") and f != "machine.json")
    plots = Plots(a.dir)
    recs = {s: load(os.path.join(a.dir, s + ".json")) for s in suites}
    lines = [f"# ubcache bench — this machine's numbers", "",
             f"`{run.get('command', 'bench/run')}`{' (--quick: short runs, small files)' if run.get('quick') else ''}, "
             f"started {run.get('started', '?')}, report written {now()}"
             + (f", {int(a.wall) // 60} min {int(a.wall) % 60} s in all" if a.wall else "") + ".", "",
             "These numbers were measured on the machine below in this one run; they say what this machine "
             "did, not what ubcache does everywhere. Ratios are measured within the run (configurations "
             "alternated); the spread is the min–max over the repeats or pairs.", ""]
    lines += machine_lines(m)
    srows = []
    for s in suites:
        r = recs[s]
        if not r:
            srows.append([s, "did not run (no record)", "—", ""])
            continue
        st = {"ok": "ok", "failed": f"**FAILED** ({r.get('reason')})", "not_implemented": "not implemented yet"}[r["status"]]
        if r.get("leftover_processes"):
            st += f"; left {len(r['leftover_processes'])} process(es), stopped by bench/run"
        srows.append([s, st, f"{r['wall_s']:.0f} s", f"`{r['log']}`"])
    lines += ["## Suites", ""] + table(["suite", "status", "wall", "log"], srows, ["---", "---", "---:", "---"])
    missing = [s for s in suites if not recs[s] or recs[s]["status"] != "ok"]
    if missing:
        lines += [f"Missing from this report (no numbers): {', '.join(missing)}.", ""]
    for s in suites:
        r = recs[s]
        lines += [f"## {s}", ""]
        if not r:
            lines += ["Did not run: no record.", ""]
            continue
        if r["status"] == "not_implemented":
            plan = (r.get("data") or {}).get("plan", "")
            lines += [f"Not implemented yet — no numbers. Planned: {plan}.", ""]
            continue
        if r["status"] == "failed":
            lines += [f"**FAILED**: {r.get('reason')}; see `{r['log']}`. Last lines of the log:", "", "```"]
            lines += (r.get("log_tail") or [])[-12:] + ["```", ""]
        if r.get("data") and s in RENDER:
            if r["status"] == "failed":
                lines += ["What it did record before failing (partial; do not read it as a complete result):", ""]
            try:
                lines += RENDER[s](r["data"], plots)
            except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
                lines += [f"summary.py could not render this suite's data ({type(e).__name__}: {e}); "
                          f"the raw data is in `{s}.json`.", ""]
        elif r["status"] == "ok":
            lines += [f"No renderer for this suite; data in `{s}.json`.", ""]
        if r.get("leftover_processes"):
            lines += ["Processes the suite left running (stopped by bench/run):", ""]
            lines += [f"- `{x}`" for x in r["leftover_processes"]] + [""]
    if plots.error:
        lines += [f"Plots: none ({plots.error}).", ""]
    md = "\n".join(lines)
    with open(os.path.join(a.dir, "summary.md"), "w") as f:
        f.write(md)
    print(md)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("machine")
    m.add_argument("dir")
    for k in ("--ubcache", "--bin", "--built", "--repo", "--work", "--quick", "--command", "--suites"):
        m.add_argument(k, required=True)
    r = sub.add_parser("record")
    for k in ("dir", "suite", "rc", "t0", "t1", "quick"):
        r.add_argument(k)
    r.add_argument("leftover", nargs="?", default="")
    p = sub.add_parser("report")
    p.add_argument("dir")
    p.add_argument("--wall", type=float, default=None)
    a = ap.parse_args()
    {"machine": cmd_machine, "record": cmd_record, "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
