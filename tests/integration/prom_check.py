#!/usr/bin/env python3
"""Strict check of Prometheus text exposition format 0.0.4 (stdin or FILE).

Every line is a HELP, a TYPE or a sample; a family's HELP and TYPE come once,
before its samples; names and label names are valid; label values are quoted
with only \\\\, \\" and \\n escapes; values are floats (or NaN, +Inf, -Inf);
no duplicate series. Exits 1 naming the first bad line."""
import re
import sys

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
VALUE = r"(?:[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|NaN|[-+]Inf)"
HELP = re.compile(rf"# HELP ({NAME}) (.*)")
TYPE = re.compile(rf"# TYPE ({NAME}) (counter|gauge|histogram|summary|untyped)")
SAMPLE = re.compile(rf"({NAME})(\{{(?:{LABEL}(?:,{LABEL})*)?\}})? ({VALUE})(?: -?[0-9]+)?")


def main():
    text = open(sys.argv[1]).read() if len(sys.argv) > 1 else sys.stdin.read()
    if not text.endswith("\n"):
        sys.exit("last line has no newline")
    helped, typed, series = set(), {}, set()
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
        if m[1] != current:
            sys.exit(f"line {n}: sample of {m[1]} outside its family ({current})")
        key = (m[1], m[2] or "")
        if key in series:
            sys.exit(f"line {n}: duplicate series {m[1]}{m[2] or ''}")
        series.add(key)
        if typed[m[1]] == "counter" and not m[1].endswith("_total"):
            sys.exit(f"line {n}: counter {m[1]} does not end in _total")
        samples += 1
    if samples == 0:
        sys.exit("no samples")
    print(f"{samples} samples in {len(typed)} families: valid")


main()
