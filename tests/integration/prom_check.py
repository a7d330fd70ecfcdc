#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Strict check of Prometheus text exposition format 0.0.4 (stdin or FILE).

Every line is a HELP, a TYPE or a sample; a family's HELP and TYPE come once,
before its samples; names and label names are valid; label values are quoted
with only \\\\, \\" and \\n escapes; values are floats (or NaN, +Inf, -Inf);
no duplicate series. A histogram's samples are NAME_bucket (with an `le`
label), NAME_sum and NAME_count; per series (its labels but `le`) the bucket
bounds rise, the counts never fall, the last bound is +Inf and its count is
NAME_count. Exits 1 naming the first bad line."""
import re
import sys

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
VALUE = r"(?:[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|NaN|[-+]Inf)"
HELP = re.compile(rf"# HELP ({NAME}) (.*)")
TYPE = re.compile(rf"# TYPE ({NAME}) (counter|gauge|histogram|summary|untyped)")
LABEL_KV = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')
SAMPLE = re.compile(rf"({NAME})(\{{(?:{LABEL}(?:,{LABEL})*)?\}})? ({VALUE})(?: -?[0-9]+)?")


def main():
    text = open(sys.argv[1]).read() if len(sys.argv) > 1 else sys.stdin.read()
    if not text.endswith("\n"):
        sys.exit("last line has no newline")
    helped, typed, series = set(), {}, set()
    histograms = {}  # (family, labels but le): its buckets in order and its count
    current = None
    samples = 0
    for n, line in enumerate(text.split("\n")[:-1], 1):
        if m := HELP.fullmatch(line):
            if m[1] in helped:
                sys.exit(f"line {n}: second HELP for {m[1]}")
            helped.add(m[1])
            continue
        if m := TYPE.fullmatch(line):
            if m[1] in typed:
                sys.exit(f"line {n}: second TYPE for {m[1]}")
            typed[m[1]] = m[2]
            current = m[1]
            continue
        m = SAMPLE.fullmatch(line)
        if not m:
            sys.exit(f"line {n}: not a HELP, TYPE or sample: {line!r}")
        suffix = ""
        if current is not None and typed[current] == "histogram" and m[1] != current:
            suffix = m[1][len(current):] if m[1].startswith(current) else ""
            if suffix not in ("_bucket", "_sum", "_count"):
                sys.exit(f"line {n}: sample of {m[1]} in histogram {current}: want _bucket, _sum or _count")
        elif m[1] != current:
            sys.exit(f"line {n}: sample of {m[1]} outside its family ({current})")
        key = (m[1], m[2] or "")
        if key in series:
            sys.exit(f"line {n}: duplicate series {m[1]}{m[2] or ''}")
        series.add(key)
        if typed[current] == "counter" and not m[1].endswith("_total"):
            sys.exit(f"line {n}: counter {m[1]} does not end in _total")
        if suffix:
            labels = dict(LABEL_KV.findall(m[2] or ""))
            le = labels.pop("le", None)
            h = histograms.setdefault((current, tuple(sorted(labels.items()))), {"buckets": [], "count": None})
            value = float(m[3])
            if suffix == "_bucket":
                if le is None:
                    sys.exit(f"line {n}: {m[1]} without an le label")
                bound = float(le)
                if h["buckets"] and (bound <= h["buckets"][-1][0] or value < h["buckets"][-1][1]):
                    sys.exit(f"line {n}: bucket le={le} {value:g} after le={h['buckets'][-1][0]:g} "
                             f"{h['buckets'][-1][1]:g}: bounds must rise and counts never fall")
                h["buckets"].append((bound, value, n))
            elif le is not None:
                sys.exit(f"line {n}: {m[1]} with an le label")
            elif suffix == "_count":
                h["count"] = (value, n)
        samples += 1
    for (name, labels), h in histograms.items():
        where = f"{name}{{{','.join(f'{k}={v!r}' for k, v in labels)}}}"
        if not h["buckets"] or h["buckets"][-1][0] != float("inf"):
            sys.exit(f"histogram {where}: no le=\"+Inf\" bucket last")
        if h["count"] is None or h["count"][0] != h["buckets"][-1][1]:
            sys.exit(f"histogram {where}: _count {h['count'] and h['count'][0]} is not the +Inf bucket's "
                     f"{h['buckets'][-1][1]:g}")
    if samples == 0:
        sys.exit("no samples")
    print(f"{samples} samples in {len(typed)} families: valid")


main()
