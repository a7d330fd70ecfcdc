// SPDX-License-Identifier: Apache-2.0
#include "control/metrics.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <memory>

namespace ubcache::control {

namespace {

void AppendEscaped(std::string& out, const std::string& v) {
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
}

// A sample value as Prometheus reads it: integers exactly, other values
// in the shortest form that reads back as the same double.
void AppendNumber(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
    return;
  }
  char buf[40];
  std::to_chars_result r = std::fabs(v) < 9e15 && v == std::floor(v)
                               ? std::to_chars(buf, buf + sizeof buf, static_cast<int64_t>(v))
                               : std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

// The metric families in the order the attribute table first names them,
// each with its HELP/TYPE header and its attributes. Built once: the table
// is immutable.
struct Family {
  std::string name;  // ubcache_<metric>
  std::string header;
  std::vector<const Attribute*> attributes;
};

const std::vector<Family>& Families() {
  static const std::vector<Family> families = [] {
    std::vector<Family> out;
    std::map<std::string, size_t> index;
    for (const Attribute& a : Attributes()) {
      if (a.type == MetricType::kNone || a.metric.empty()) continue;
      std::string name = "ubcache_" + a.metric;
      auto [it, fresh] = index.try_emplace(name, out.size());
      if (fresh) {
        out.push_back({name,
                       "# HELP " + name + " " + a.help + "\n# TYPE " + name +
                           (a.type == MetricType::kCounter ? " counter\n" : " gauge\n"),
                       {}});
      }
      out[it->second].attributes.push_back(&a);
    }
    return out;
  }();
  return families;
}

// Appends `name{labels} value` lines for one attribute of one target (or of
// the set, `t` null): name{device="…",<attribute labels>,<extra>} value,
// where `extra` is the enum choice or quantile label of text and list values.
void AppendSamples(std::string& out, const Family& f, const Attribute& a, const Target* t, Reading& r) {
  const Value v = a.get(r);
  size_t open = 0;
  auto begin = [&] {  // name{device="…",labels — then the caller's extra label, then end()
    out += f.name;
    out += '{';
    open = out.size();
    if (t) {
      out += "device=\"";
      AppendEscaped(out, t->name);
      out += '"';
    }
    if (!a.labels.empty()) {
      if (out.size() > open) out += ',';
      out += a.labels;
    }
  };
  auto extra = [&](const std::string& name) {
    if (out.size() > open) out += ',';
    out += name;
    out += "=\"";
  };
  auto end = [&](double x) {
    if (out.size() == open)
      out.back() = ' ';  // no labels: no braces
    else
      out += "} ";
    AppendNumber(out, x * a.scale);
    out += '\n';
  };
  switch (v.kind) {
    case Value::Kind::kInt:
    case Value::Kind::kReal:
      begin();
      end(v.kind == Value::Kind::kInt ? static_cast<double>(v.i) : v.r);
      break;
    case Value::Kind::kText:
      if (a.choices.empty()) {  // a number knob at "auto": no number to give
        begin();
        end(std::numeric_limits<double>::quiet_NaN());
        break;
      }
      for (const std::string& c : a.choices) {
        begin();
        extra(a.enum_label);
        AppendEscaped(out, c);
        out += '"';
        end(c == v.text ? 1 : 0);
      }
      break;
    case Value::Kind::kList:
      for (size_t i = 0; i < v.list.size(); i++) {
        begin();
        extra("quantile");
        AppendNumber(out, static_cast<double>(i + 1) / static_cast<double>(v.list.size() + 1));
        out += '"';
        end(v.list[i]);
      }
      break;
  }
}

// ubcache_request_duration_seconds{device,op}: a histogram per export and
// operation of the time from a request's entry into CachedDevice to its
// completion callback. The one metric that is not an attribute: an
// attribute is one value (`ctl get` prints it, a text or list value expands
// to samples by one label), while a histogram is 21 series per operation
// whose meaning is in their rates over a window (histogram_quantile over
// rate(…_bucket[5m])) — a since-start distribution in `ctl show` would say
// little about now. What ctl can usefully show, the count of requests (the
// histogram's _count), is the attribute requests/<op>; both come from the
// same Reading, so one scrape's _count and ubcache_requests_total agree.
void AppendRequestHistogram(std::string& out, const std::vector<Target>& targets,
                            const std::vector<std::unique_ptr<Reading>>& readings) {
  static const std::string kName = "ubcache_request_duration_seconds";
  out += "# HELP " + kName +
         " time from a client request's arrival at the cache to its answer, by operation\n"
         "# TYPE " + kName + " histogram\n";
  for (size_t i = 0; i < targets.size(); i++) {
    const RequestStats::Totals& totals = readings[i]->requests();
    for (int k = 0; k < RequestStats::kOps; k++) {
      const RequestStats::OpTotals& o = totals[k];
      auto labels = [&](const char* suffix) {
        out += kName;
        out += suffix;
        out += "{device=\"";
        AppendEscaped(out, targets[i].name);
        out += "\",op=\"";
        out += RequestStats::OpName(static_cast<RequestStats::Op>(k));
        out += '"';
      };
      uint64_t cumulative = 0;
      for (int b = 0; b < RequestStats::kBuckets; b++) {
        cumulative += o.buckets[b];
        labels("_bucket");
        out += ",le=\"";
        out += RequestStats::BucketLabel(b);
        out += "\"} ";
        AppendNumber(out, static_cast<double>(cumulative));
        out += '\n';
      }
      labels("_sum");
      out += "} ";
      AppendNumber(out, static_cast<double>(o.sum_ns) / 1e9);
      out += '\n';
      labels("_count");
      out += "} ";
      AppendNumber(out, static_cast<double>(o.requests));
      out += '\n';
    }
  }
}

}  // namespace

std::string RenderMetrics(const std::vector<Target>& targets) {
  if (targets.empty()) return "";
  std::vector<std::unique_ptr<Reading>> readings;
  for (const Target& t : targets) readings.push_back(std::make_unique<Reading>(t));
  std::string out;
  out.reserve(32768 * targets.size());  // ~29 KB for one export, the histogram a third of it
  for (const Family& f : Families()) {
    out += f.header;
    for (const Attribute* a : f.attributes) {
      if (PerDevice(a->group)) {
        for (size_t i = 0; i < targets.size(); i++) AppendSamples(out, f, *a, &targets[i], *readings[i]);
      } else {
        AppendSamples(out, f, *a, nullptr, *readings[0]);  // the set's, once
      }
    }
  }
  AppendRequestHistogram(out, targets, readings);
  return out;
}

}  // namespace ubcache::control
