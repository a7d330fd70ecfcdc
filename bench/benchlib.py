# SPDX-License-Identifier: Apache-2.0
"""What the bench scripts' report steps share: reading fio JSON, the CPU
accounting left by lib.sh's `measured`, the machine summary line, and
writing the .json/.md results. Import with sys.path.insert(0, <bench dir>)."""
import json
import os
import statistics
import sys


def load(path, who):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"{who}: cannot read {os.path.basename(path)}: {e}", file=sys.stderr)
        return None


def _cpu_stat(line):
    v = [int(x) for x in line.split()[1:]]
    return v + [0] * (10 - len(v))


def cpu_of(raw, tag, server=True):
    """wall_s, server_cpu_pct (None without a server) and machine-wide
    busy/steal/iowait for the run `measured TAG ...` recorded; {} if absent."""
    out = {}
    try:
        t0, t1, c0, c1, hz = open(f"{raw}/cpu-{tag}.tsv").read().split()
        wall = float(t1) - float(t0)
        out["wall_s"] = wall
        out["server_cpu_pct"] = 100.0 * (int(c1) - int(c0)) / int(hz) / wall if server else None
        a, b = (_cpu_stat(x) for x in open(f"{raw}/stat-{tag}.txt").read().splitlines()[:2])
        dd = [y - x for x, y in zip(a, b)]
        tot = sum(dd[:8]) or 1
        # user nice system idle iowait irq softirq steal
        out["machine"] = {"busy_pct": 100.0 * (tot - dd[3] - dd[4]) / tot,
                          "steal_pct": 100.0 * dd[7] / tot, "iowait_pct": 100.0 * dd[4] / tot}
    except (OSError, ValueError):
        pass
    return out


def machine_lines(busy):
    """The 'Machine during the runs' paragraph over runs' machine dicts."""
    if not busy:
        return []
    return [f"Machine during the runs (median over runs): "
            f"{statistics.median(x['busy_pct'] for x in busy):.0f}% of all CPUs busy, "
            f"steal {statistics.median(x['steal_pct'] for x in busy):.1f}%, "
            f"iowait {statistics.median(x['iowait_pct'] for x in busy):.1f}%; "
            f"load average at the end {os.getloadavg()[0]:.2f}.", ""]


def write_results(base, doc, md):
    """BASE.json and BASE.md, then the Markdown on stdout."""
    with open(base + ".json", "w") as f:
        json.dump(doc, f, indent=2)
    with open(base + ".md", "w") as f:
        f.write(md)
    print(md, end="")
    print(f"\nwrote {base}.json and {base}.md")
