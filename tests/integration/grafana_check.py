#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks a Grafana dashboard against a Prometheus exposition (test 162).

    grafana_check.py DASHBOARD.json METRICS.txt
        Static check. Fails (exit 1), one line per problem, when:
        - the JSON is not a dashboard (schemaVersion >= 36, title, uid, panels);
        - a panel has no datasource, no target, a target without an expr, a
          datasource that is not a defined datasource variable, a duplicate id,
          or overlaps another panel on the grid;
        - an expression uses an undefined Grafana variable, does not parse as
          PromQL, or calls an unknown function;
        - a metric name an expression (or a variable's label_values()) selects
          is not in the exposition — histogram and summary series
          (NAME_bucket, NAME_sum, NAME_count) resolve through their family;
        - a label matcher names a label that metric does not have, or its
          fixed value (or regex) matches none of the exposed series;
        - rate()/irate()/increase() is taken of a gauge, delta()/deriv() of a
          counter, histogram_quantile() of something without an `le` label;
        - by()/without()/on()/ignoring()/group_left() names a label the
          operand lacks, two vectors are combined one-to-one with different
          label sets (the result would always be empty), or a legend's
          {{label}} is not a label of the expression's result.
        Prometheus adds `instance` and `job` to every scraped series and
        makes `up`; those are the only names allowed beyond the exposition.

    grafana_check.py DASHBOARD.json --prometheus URL --var NAME=VALUE ...
        Live check: each expression, variables replaced (VALUE regex-escaped
        as Grafana does), is run as an instant query by a real Prometheus
        that scrapes the daemon; fails on a query error or an empty result.
"""
import json
import re
import sys
import urllib.parse
import urllib.request

TARGET_LABELS = {"instance", "job"}  # added by Prometheus at scrape time
SYNTHETIC = {"up": "gauge"}  # series Prometheus itself makes for each target
GRAFANA_BUILTINS = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h",
                    "__interval_ms": "60000", "__range_s": "3600", "__range_ms": "3600000",
                    "__rate_interval_ms": "300000"}
VAR_RE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")

errors = []


def err(where, msg):
    errors.append(f"{where}: {msg}")


# ----------------------------------------------------------------- exposition

def parse_exposition(text):
    """{sample name: (type, [label dicts])} — histogram/summary components
    under their own sample names, typed 'histogram_bucket', 'counter' (sum,
    count) and so on."""
    types, series = {}, {}
    sample = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+(?: \S+)?$')
    label = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
    for line in text.splitlines():
        if m := re.match(r"# TYPE (\S+) (\S+)", line):
            types[m[1]] = m[2]
            continue
        if not line or line.startswith("#"):
            continue
        m = sample.match(line)
        if not m:
            continue
        labels = {k: v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
                  for k, v in label.findall(m[2] or "")}
        series.setdefault(m[1], []).append(labels)
    out = {}
    for name, ls in series.items():
        t = types.get(name)
        if t is None:
            for suffix in ("_bucket", "_sum", "_count"):
                base = name[:-len(suffix)]
                if name.endswith(suffix) and types.get(base) in ("histogram", "summary"):
                    t = "histogram_bucket" if suffix == "_bucket" else "counter"
        out[name] = (t or "untyped", ls)
    for name, t in types.items():  # a family with no sample still exists
        if name not in out and t not in ("histogram", "summary"):
            out[name] = (t, [])
    return out


# -------------------------------------------------------------------- PromQL

TOKEN = re.compile(r"""
  (?P<ws>\s+|\#[^\n]*)
| (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
| (?P<dur>(?:\d+(?:ms|s|m|h|d|w|y))+)(?![\w.])
| (?P<num>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)
| (?P<ident>[a-zA-Z_][a-zA-Z0-9_:]*)
| (?P<op>==|!=|<=|>=|=~|!~|[-+*/%^<>=(){}\[\],:@])
""", re.X)
KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
            "group_right", "bool", "offset", "atan2"}
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
                "count_values", "bottomk", "topk", "quantile"}
PRECEDENCE = {"or": 1, "and": 2, "unless": 2, "==": 3, "!=": 3, "<=": 3, ">=": 3, "<": 3,
              ">": 3, "+": 4, "-": 4, "*": 5, "/": 5, "%": 5, "atan2": 5, "^": 6}
COMPARISONS = {"==", "!=", "<=", ">=", "<", ">"}
SET_OPS = {"and", "or", "unless"}
# name: (argument kinds, result kind); v vector, m matrix (range), s scalar,
# S string, "?" optional from there on, "*" any number of the last.
FUNCTIONS = {
    **{f: ("v", "v") for f in ("abs", "ceil", "floor", "exp", "ln", "log2", "log10", "sqrt",
                               "sgn", "sort", "sort_desc", "timestamp", "absent",
                               "acos", "acosh", "asin", "asinh", "atan", "atanh", "cos", "cosh",
                               "sin", "sinh", "tan", "tanh", "deg", "rad")},
    **{f: ("?v", "v") for f in ("day_of_month", "day_of_week", "day_of_year", "days_in_month",
                                "hour", "minute", "month", "year")},
    **{f: ("m", "v") for f in ("rate", "irate", "increase", "delta", "idelta", "deriv",
                               "changes", "resets", "absent_over_time", "avg_over_time",
                               "min_over_time", "max_over_time", "sum_over_time",
                               "count_over_time", "stddev_over_time", "stdvar_over_time",
                               "last_over_time", "present_over_time")},
    "quantile_over_time": ("sm", "v"), "predict_linear": ("ms", "v"),
    "holt_winters": ("mss", "v"), "round": ("v?s", "v"), "clamp": ("vss", "v"),
    "clamp_min": ("vs", "v"), "clamp_max": ("vs", "v"), "histogram_quantile": ("sv", "v"),
    "label_replace": ("vSSSS", "v"), "label_join": ("vSSS*", "v"), "vector": ("s", "v"),
    "scalar": ("v", "s"), "time": ("", "s"), "pi": ("", "s"),
}
COUNTER_ONLY = {"rate", "irate", "increase", "resets"}
GAUGE_ONLY = {"delta", "idelta", "deriv", "predict_linear", "holt_winters"}


class ParseError(Exception):
    pass


def tokenize(s):
    out, pos = [], 0
    while pos < len(s):
        m = TOKEN.match(s, pos)
        if not m:
            raise ParseError(f"unexpected character {s[pos]!r} at {pos}")
        pos = m.end()
        kind = m.lastgroup
        if kind == "ws":
            continue
        text = m.group()
        if kind == "ident" and text.lower() in KEYWORDS:
            kind, text = "kw", text.lower()
        if kind == "ident" and text in ("Inf", "NaN", "inf", "nan"):
            kind = "num"
        out.append((kind, text))
    out.append(("eof", ""))
    return out


def unquote(tok):
    body = tok[1:-1]
    if tok[0] == "`":
        return body
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m[1], m[1]), body)


class Parser:
    def __init__(self, text):
        self.t = tokenize(text)
        self.i = 0

    def peek(self, k=0):
        return self.t[self.i + k]

    def next(self):
        tok = self.t[self.i]
        self.i += 1
        return tok

    def expect(self, text):
        tok = self.next()
        if tok[1] != text:
            raise ParseError(f"expected {text!r}, got {tok[1] or 'end'!r}")
        return tok

    def parse(self):
        e = self.expr(0)
        if self.peek()[0] != "eof":
            raise ParseError(f"unexpected {self.peek()[1]!r}")
        return e

    def binop(self):
        kind, text = self.peek()
        if (kind == "op" and text in PRECEDENCE) or (kind == "kw" and text in PRECEDENCE):
            return text
        return None

    def expr(self, min_prec):
        """Precedence climbing: binary operators binding at least min_prec."""
        lhs = self.unary()
        while (op := self.binop()) and PRECEDENCE[op] >= min_prec:
            self.next()
            mods = {"bool": False, "match": None, "labels": [], "group": None, "include": []}
            if self.peek()[1] == "bool":
                self.next()
                mods["bool"] = True
            if self.peek()[1] in ("on", "ignoring"):
                mods["match"] = self.next()[1]
                mods["labels"] = self.label_list()
                if self.peek()[1] in ("group_left", "group_right"):
                    mods["group"] = self.next()[1]
                    if self.peek()[1] == "(":
                        mods["include"] = self.label_list()
            # ^ is right-associative, the others left.
            rhs = self.expr(PRECEDENCE[op] + (0 if op == "^" else 1))
            lhs = ("bin", op, lhs, rhs, mods)
        return lhs

    def unary(self):
        if self.peek()[1] in ("-", "+"):
            op = self.next()[1]
            return ("unary", op, self.expr(PRECEDENCE["^"]))
        return self.postfix(self.primary())

    def postfix(self, e):
        while True:
            if self.peek()[1] == "[":
                self.next()
                rng = self.duration()
                if self.peek()[1] == ":":
                    self.next()
                    step = self.duration() if self.peek()[1] != "]" else None
                    self.expect("]")
                    e = ("subquery", e, rng, step)
                else:
                    self.expect("]")
                    if e[0] != "sel" or e[3] is not None:
                        raise ParseError("a range [..] applies only to a plain selector")
                    e = ("sel", e[1], e[2], rng)
            elif self.peek()[1] == "offset":
                self.next()
                if self.peek()[1] == "-":
                    self.next()
                self.duration()
            elif self.peek()[1] == "@":
                self.next()
                tok = self.next()
                if tok[1] in ("start", "end"):
                    self.expect("(")
                    self.expect(")")
                elif tok[0] != "num":
                    raise ParseError("@ needs a timestamp")
            else:
                return e

    def duration(self):
        tok = self.next()
        if tok[0] == "dur" or (tok[0] == "num" and re.fullmatch(r"\d+", tok[1])):
            return tok[1]
        raise ParseError(f"expected a duration, got {tok[1] or 'end'!r}")

    def label_list(self):
        self.expect("(")
        out = []
        while self.peek()[1] != ")":
            tok = self.next()
            if tok[0] not in ("ident", "kw"):
                raise ParseError(f"expected a label name, got {tok[1]!r}")
            out.append(tok[1])
            if self.peek()[1] == ",":
                self.next()
            elif self.peek()[1] != ")":
                raise ParseError("expected ',' or ')' in a label list")
        self.next()
        return out

    def matchers(self):
        self.expect("{")
        out = []
        while self.peek()[1] != "}":
            tok = self.next()
            if tok[0] not in ("ident", "kw"):
                raise ParseError(f"expected a label name in a matcher, got {tok[1]!r}")
            op = self.next()[1]
            if op not in ("=", "!=", "=~", "!~"):
                raise ParseError(f"bad matcher operator {op!r}")
            val = self.next()
            if val[0] != "str":
                raise ParseError(f"a matcher value must be a string, got {val[1]!r}")
            out.append((tok[1], op, unquote(val[1])))
            if self.peek()[1] == ",":
                self.next()
            elif self.peek()[1] != "}":
                raise ParseError("expected ',' or '}' in matchers")
        self.next()
        return out

    def primary(self):
        kind, text = self.peek()
        if kind == "num":
            self.next()
            return ("num", text)
        if kind == "str":
            self.next()
            return ("str", unquote(text))
        if text == "(":
            self.next()
            e = self.expr(0)
            self.expect(")")
            return ("paren", e)
        if text == "{":
            return ("sel", None, self.matchers(), None)
        if kind == "ident" and text in AGGREGATIONS:
            self.next()
            grouping = None
            if self.peek()[1] in ("by", "without"):
                grouping = (self.next()[1], self.label_list())
            self.expect("(")
            args = [self.expr(0)]
            while self.peek()[1] == ",":
                self.next()
                args.append(self.expr(0))
            self.expect(")")
            if self.peek()[1] in ("by", "without"):
                if grouping:
                    raise ParseError("two grouping clauses")
                grouping = (self.next()[1], self.label_list())
            param = args[0] if len(args) == 2 else None
            if len(args) > 2 or (param is None) != (text not in ("count_values", "bottomk", "topk", "quantile")):
                raise ParseError(f"{text}: wrong number of arguments")
            return ("agg", text, grouping, param, args[-1])
        if kind == "ident" and self.peek(1)[1] == "(":
            self.next()
            self.next()
            args = []
            while self.peek()[1] != ")":
                args.append(self.expr(0))
                if self.peek()[1] == ",":
                    self.next()
                elif self.peek()[1] != ")":
                    raise ParseError(f"{text}(): expected ',' or ')'")
            self.next()
            return ("call", text, args)
        if kind in ("ident", "kw"):
            self.next()
            m = self.matchers() if self.peek()[1] == "{" else []
            return ("sel", text, m, None)
        raise ParseError(f"unexpected {text or 'end'!r}")


# ------------------------------------------------------------ type checking

class Checker:
    """Infers each subexpression's kind (scalar, string, vector, matrix) and
    the label names of its result, reporting what cannot be right."""

    def __init__(self, expo, where):
        self.expo = expo
        self.where = where
        self.metrics = set()

    def e(self, msg):
        err(self.where, msg)

    def family(self, name):
        if name in self.expo:
            return self.expo[name]
        if name in SYNTHETIC:
            return (SYNTHETIC[name], [dict.fromkeys(TARGET_LABELS, "")])
        return None

    def selector(self, node):
        _, name, matchers, rng = node
        if name is None:
            name = next((v for k, op, v in matchers if k == "__name__" and op == "="), None)
            if name is None:
                self.e(f"a selector without a metric name: {matchers}")
                return ("matrix" if rng else "vector", set(), None)
        self.metrics.add(name)
        fam = self.family(name)
        if fam is None:
            self.e(f"metric {name} is not in the exposition")
            return ("matrix" if rng else "vector", None, None)
        mtype, series = fam
        labels = set().union(*[set(s) for s in series]) if series else set()
        labels |= TARGET_LABELS
        fixed = []
        for k, op, v in matchers:
            if k == "__name__":
                continue
            if k not in labels:
                self.e(f"{name} has no label {k!r} (it has: {', '.join(sorted(labels - TARGET_LABELS)) or 'none'})")
                continue
            if k in TARGET_LABELS or op in ("!=", "!~") or (op == "=~" and v == ".*"):
                continue
            fixed.append((k, op, v))
        if fixed and series:
            def ok(s, ms):
                for k, op, v in ms:
                    if op == "=" and s.get(k, "") != v:
                        return False
                    if op == "=~":
                        try:
                            if not re.fullmatch(v, s.get(k, "")):
                                return False
                        except re.error as ex:
                            self.e(f"{name}: bad regex {v!r}: {ex}")
                            return True
                return True

            def show(ms):
                return name + "{" + ",".join(f'{k}{op}"{v}"' for k, op, v in ms) + "}"
            alone = [m for m in fixed if not any(ok(s, [m]) for s in series)]
            for m in alone:
                self.e(f"{show([m])} matches no exposed series")
            if not alone and not any(ok(s, fixed) for s in series):
                self.e(f"{show(fixed)} matches no exposed series")
        return ("matrix" if rng else "vector", labels, mtype)

    def infer(self, node):
        """(kind, labels or None when unknown, metric type of a plain selector)"""
        tag = node[0]
        if tag == "num":
            return ("scalar", set(), None)
        if tag == "str":
            return ("string", set(), None)
        if tag == "paren":
            k, l, _ = self.infer(node[1])
            return (k, l, None)
        if tag == "sel":
            return self.selector(node)
        if tag == "subquery":
            k, l, _ = self.infer(node[1])
            if k != "vector":
                self.e("a subquery needs an instant vector")
            return ("matrix", l, None)
        if tag == "unary":
            k, l, _ = self.infer(node[2])
            return (k, l, None)
        if tag == "agg":
            return self.agg(node)
        if tag == "call":
            return self.call(node)
        if tag == "bin":
            return self.binary(node)
        raise AssertionError(tag)

    def agg(self, node):
        _, op, grouping, param, arg = node
        if param is not None:
            pk, _, _ = self.infer(param)
            want = "string" if op == "count_values" else "scalar"
            if pk != want:
                self.e(f"{op}: its parameter must be a {want}")
        k, labels, _ = self.infer(arg)
        if k != "vector":
            self.e(f"{op}() needs an instant vector, got a {k}")
        out = set()
        if grouping and labels is not None:
            kind, names = grouping
            missing = [n for n in names if n not in labels]
            if missing:
                self.e(f"{op} {kind} ({', '.join(names)}): the operand has no label {', '.join(missing)}")
            out = set(names) if kind == "by" else labels - set(names)
        elif labels is None:
            out = None
        if op == "count_values" and out is not None and param and param[0] == "str":
            out.add(param[1])
        return ("vector", out, None)

    def call(self, node):
        _, name, args = node
        if name not in FUNCTIONS:
            self.e(f"unknown function {name}()")
            for a in args:
                self.infer(a)
            return ("vector", None, None)
        spec, result = FUNCTIONS[name]
        kinds = {"v": "vector", "m": "matrix", "s": "scalar", "S": "string"}
        want, optional = [], False
        i = 0
        while i < len(spec):
            c = spec[i]
            if c == "?":
                optional = True
            elif c == "*":
                want.append(("*", want[-1][1]))
            else:
                want.append((optional, kinds[c]))
            i += 1
        infos = [self.infer(a) for a in args]
        required = sum(1 for o, _ in want if o is False)
        variadic = any(o == "*" for o, _ in want)
        if len(args) < required or (not variadic and len(args) > len(want)):
            self.e(f"{name}() takes {required}{'+' if variadic else ''} argument(s), got {len(args)}")
            return (kinds[result], None, None)
        for j, info in enumerate(infos):
            kind = want[min(j, len(want) - 1)][1]
            if info[0] != kind:
                self.e(f"{name}() argument {j + 1} must be a {kind}, got a {info[0]}")
        labels = None
        for arg, info in zip(args, infos):
            if info[0] in ("vector", "matrix"):  # the first vector argument gives the labels
                labels, mtype = info[1], info[2]
                if name in COUNTER_ONLY and mtype and mtype not in ("counter", "histogram_bucket", "untyped"):
                    self.e(f"{name}() of {self.metric_name(arg)}, a {mtype}: {name} is for counters")
                if name in GAUGE_ONLY and mtype in ("counter", "histogram_bucket"):
                    self.e(f"{name}() of {self.metric_name(arg)}, a counter: use rate() or increase()")
                break
        if name == "histogram_quantile" and labels is not None:
            if "le" not in labels:
                self.e("histogram_quantile() of a vector without an 'le' label "
                       "(a histogram's _bucket series, aggregated keeping le)")
            labels = labels - {"le"}
        if name in ("label_replace", "label_join") and labels is not None and len(args) > 1 and args[1][0] == "str":
            labels = labels | {args[1][1]}
        if result == "s":
            return ("scalar", set(), None)
        if name in ("vector", "time", "pi"):
            labels = set()
        return ("vector", labels if labels is not None else None, None)

    @staticmethod
    def metric_name(node):
        while node[0] == "paren":
            node = node[1]
        return node[1] if node[0] == "sel" else "an expression"

    def binary(self, node):
        _, op, lhs, rhs, mods = node
        lk, ll, _ = self.infer(lhs)
        rk, rl, _ = self.infer(rhs)
        for k in (lk, rk):
            if k not in ("scalar", "vector"):
                self.e(f"operator {op} on a {k}")
        if op in SET_OPS and "scalar" in (lk, rk):
            self.e(f"{op} needs vectors on both sides")
        if lk == "scalar" and rk == "scalar":
            if op in COMPARISONS and not mods["bool"]:
                self.e(f"comparison {op} between scalars needs bool")
            return ("scalar", set(), None)
        if lk == "scalar":
            return ("vector", rl, None)
        if rk == "scalar":
            return ("vector", ll, None)
        if ll is None or rl is None:
            return ("vector", None, None)
        match, names = mods["match"], set(mods["labels"])
        if match == "on":
            for side, labels in (("left", ll), ("right", rl)):
                missing = names - labels
                if missing:
                    self.e(f"{op} on ({', '.join(mods['labels'])}): the {side} side has no label "
                           f"{', '.join(sorted(missing))}")
        if op in SET_OPS:
            return ("vector", ll if op != "or" else ll & rl, None)
        if mods["group"]:
            one = rl if mods["group"] == "group_left" else ll
            many = ll if mods["group"] == "group_left" else rl
            missing = set(mods["include"]) - one
            if missing:
                self.e(f"{mods['group']}({', '.join(mods['include'])}): the 'one' side has no label "
                       f"{', '.join(sorted(missing))}")
            if match == "ignoring" and (one - names) - (many - names):
                self.e(f"{op} ignoring ({', '.join(mods['labels'])}) {mods['group']}: the 'one' side's labels "
                       f"{sorted(one - names)} are not all on the 'many' side {sorted(many - names)}: "
                       "nothing would match")
            return ("vector", many | set(mods["include"]), None)
        if match == "on":
            return ("vector", names, None)
        ignored = names if match == "ignoring" else set()
        if ll - ignored != rl - ignored:
            self.e(f"{op} between vectors with different labels: {sorted(ll - ignored)} vs "
                   f"{sorted(rl - ignored)} (add on(...) or ignoring(...)): nothing would match")
        return ("vector", ll - ignored, None)


# ------------------------------------------------------------- the dashboard

def all_panels(dash):
    for p in dash.get("panels", []):
        yield p
        for q in p.get("panels", []) or []:
            yield q


def substitute(expr, values, where):
    def repl(m):
        name = m[1] or m[2] or m[3]
        if name in values:
            return values[name]
        if name in GRAFANA_BUILTINS:
            return GRAFANA_BUILTINS[name]
        if name.isdigit():  # label_replace's $1: not a Grafana variable
            return m[0]
        err(where, f"undefined variable ${name}")
        return ".*"
    return VAR_RE.sub(repl, expr)


def check_expr(expr, expo, where, defined, legend=None):
    values = {v: ".*" for v in defined}
    text = substitute(expr, values, where)
    try:
        tree = Parser(text).parse()
    except ParseError as ex:
        err(where, f"does not parse as PromQL ({ex}): {expr}")
        return set()
    c = Checker(expo, where)
    kind, labels, _ = c.infer(tree)
    if kind not in ("vector", "scalar"):
        err(where, f"a panel query must give an instant vector or a scalar, not a {kind}")
    if legend and labels is not None:
        for name in re.findall(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}", legend):
            if name not in labels:
                err(where, f"legend {legend!r} uses {{{{{name}}}}}, not a label of the result "
                           f"({', '.join(sorted(labels)) or 'none'})")
    return c.metrics


def check_static(dash_path, metrics_path):
    try:
        dash = json.load(open(dash_path))
    except (OSError, ValueError) as ex:
        print(f"{dash_path}: not valid JSON: {ex}")
        return 1
    expo = parse_exposition(open(metrics_path).read())
    if not expo:
        err(metrics_path, "no metric in the exposition")
    if not isinstance(dash, dict):
        err(dash_path, "not a JSON object")
        return report()
    for key in ("title", "uid", "panels", "templating", "schemaVersion"):
        if key not in dash:
            err(dash_path, f"no {key!r}")
    if not isinstance(dash.get("schemaVersion"), int) or dash["schemaVersion"] < 36:
        err(dash_path, f"schemaVersion {dash.get('schemaVersion')!r}: want 36 or later")

    variables = dash.get("templating", {}).get("list", [])
    defined = {v.get("name") for v in variables}
    ds_vars = {v["name"] for v in variables if v.get("type") == "datasource"}
    for v in variables:
        if v.get("type") == "datasource" and v.get("query") != "prometheus":
            err(f"variable {v['name']}", f"datasource variable of type {v.get('query')!r}, want prometheus")
    ds_refs = {f"${{{n}}}" for n in ds_vars} | {f"${n}" for n in ds_vars}

    def check_ds(where, ds):
        uid = ds.get("uid") if isinstance(ds, dict) else ds
        if not uid:
            err(where, "no datasource")
        elif uid not in ds_refs:
            err(where, f"datasource {uid!r} is not a datasource variable ({', '.join(sorted(ds_refs)) or 'none defined'})")
        elif isinstance(ds, dict) and ds.get("type") not in (None, "prometheus"):
            err(where, f"datasource type {ds.get('type')!r}")

    metrics = set()
    for v in variables:
        if v.get("type") != "query":
            continue
        where = f"variable ${v.get('name')}"
        check_ds(where, v.get("datasource"))
        q = v.get("query")
        q = q.get("query", "") if isinstance(q, dict) else (q or "")
        if m := re.fullmatch(r"\s*label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*", q):
            sel, label = m[1], m[2]
            metrics |= check_expr(f"count by ({label}) ({sel})", expo, where, defined)
        elif m := re.fullmatch(r"\s*query_result\((.*)\)\s*", q):
            metrics |= check_expr(m[1], expo, where, defined)
        else:
            err(where, f"unsupported variable query {q!r}")

    ids, rects, nexprs = set(), [], 0
    panels = list(all_panels(dash))
    if not any(p.get("type") != "row" for p in panels):
        err(dash_path, "no panel")
    for p in panels:
        where = f"panel {p.get('id')} {p.get('title')!r}"
        if p.get("id") in ids:
            err(where, "duplicate panel id")
        ids.add(p.get("id"))
        g = p.get("gridPos") or {}
        if not all(isinstance(g.get(k), int) for k in ("x", "y", "w", "h")):
            err(where, f"bad gridPos {g}")
        else:
            if g["x"] < 0 or g["w"] <= 0 or g["x"] + g["w"] > 24 or g["h"] <= 0:
                err(where, f"gridPos {g} outside the 24-column grid")
            for other, og in rects:
                if (g["x"] < og["x"] + og["w"] and og["x"] < g["x"] + g["w"] and
                        g["y"] < og["y"] + og["h"] and og["y"] < g["y"] + g["h"]):
                    err(where, f"overlaps {other}")
            if p in dash.get("panels", []):
                rects.append((where, g))
        if p.get("type") == "row":
            continue
        if not p.get("title"):
            err(where, "no title")
        check_ds(where, p.get("datasource"))
        targets = p.get("targets") or []
        if not targets:
            err(where, "no target")
        refs = set()
        for t in targets:
            tw = f"{where} target {t.get('refId')}"
            if t.get("refId") in refs:
                err(tw, "duplicate refId")
            refs.add(t.get("refId"))
            if "datasource" in t:
                check_ds(tw, t["datasource"])
            expr = t.get("expr")
            if not expr or not expr.strip():
                err(tw, "no expr")
                continue
            nexprs += 1
            metrics |= check_expr(expr, expo, tw, defined, t.get("legendFormat"))
    return report(f"{nexprs} expressions in {len(ids)} panels query {len(metrics)} metrics, "
                  f"all in the exposition ({len(expo)} series names)")


def report(ok_line=""):
    if errors:
        for e in errors:
            print(e)
        print(f"{len(errors)} problem(s)")
        return 1
    print(ok_line)
    return 0


def check_live(dash_path, url, values):
    dash = json.load(open(dash_path))
    # Grafana escapes a variable's regex metacharacters in PromQL; inside a
    # double-quoted PromQL string each backslash is doubled.
    subst = {k: re.escape(v).replace("\\", "\\\\") for k, v in values.items()}
    n = 0
    for p in all_panels(dash):
        for t in p.get("targets", []) or []:
            where = f"panel {p.get('id')} {p.get('title')!r} target {t.get('refId')}"
            expr = substitute(t.get("expr", ""), subst, where)
            q = urllib.parse.urlencode({"query": expr})
            try:
                with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=10) as r:
                    body = json.load(r)
            except urllib.error.HTTPError as ex:
                body = json.load(ex)
            except OSError as ex:
                err(where, f"query failed: {ex}")
                continue
            n += 1
            if body.get("status") != "success":
                err(where, f"Prometheus: {body.get('errorType')}: {body.get('error')}: {expr}")
            elif not body["data"]["result"]:
                err(where, f"empty result: {expr}")
    return report(f"{n} expressions evaluated by Prometheus, none empty")


def main():
    a = sys.argv[1:]
    if len(a) >= 3 and a[1] == "--prometheus":
        values = {}
        rest = a[3:]
        while rest:
            if rest[0] != "--var" or len(rest) < 2 or "=" not in rest[1]:
                sys.exit(__doc__)
            k, v = rest[1].split("=", 1)
            values[k] = v
            rest = rest[2:]
        sys.exit(check_live(a[0], a[2], values))
    if len(a) != 2:
        sys.exit(__doc__)
    sys.exit(check_static(a[0], a[1]))


main()
