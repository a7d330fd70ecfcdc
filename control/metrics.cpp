#include "control/metrics.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>

namespace ubcache::control {

namespace {

std::string EscapeLabel(const std::string& v) {
  std::string out;
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
  return out;
}

std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[40];
  if (v == std::floor(v) && std::fabs(v) < 9e15)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

struct Family {
  std::string help;
  MetricType type;
  std::string samples;
};

class Exposition {
 public:
  void Add(const Attribute& a, const Target* t, Reading& r) {
    std::string name = "ubcache_" + a.metric;
    auto [it, fresh] = families_.try_emplace(name);
    if (fresh) {
      order_.push_back(name);
      it->second.help = a.help;
      it->second.type = a.type;
    }
    std::string labels;
    auto label = [&](const std::string& k, const std::string& v) {
      labels += (labels.empty() ? "" : ",") + k + "=\"" + EscapeLabel(v) + "\"";
    };
    if (t) label("device", t->name);
    if (!a.labels.empty()) labels += (labels.empty() ? "" : ",") + a.labels;
    Value v = a.get(r);
    std::string& out = it->second.samples;
    auto sample = [&](const std::string& extra, double x) {
      std::string l = labels;
      if (!extra.empty()) l += (l.empty() ? "" : ",") + extra;
      out += name + (l.empty() ? "" : "{" + l + "}") + " " + Number(x * a.scale) + "\n";
    };
    switch (v.kind) {
      case Value::Kind::kInt: sample("", static_cast<double>(v.i)); break;
      case Value::Kind::kReal: sample("", v.r); break;
      case Value::Kind::kText:
        for (const std::string& c : a.choices)
          sample(a.enum_label + "=\"" + EscapeLabel(c) + "\"", c == v.text ? 1 : 0);
        break;
      case Value::Kind::kList:
        for (size_t i = 0; i < v.list.size(); i++)
          sample("quantile=\"" + Number(static_cast<double>(i + 1) / static_cast<double>(v.list.size() + 1)) +
                     "\"",
                 v.list[i]);
        break;
    }
  }

  std::string Render() const {
    std::string out;
    for (const std::string& name : order_) {
      const Family& f = families_.at(name);
      out += "# HELP " + name + " " + f.help + "\n";
      out += "# TYPE " + name + (f.type == MetricType::kCounter ? " counter\n" : " gauge\n");
      out += f.samples;
    }
    return out;
  }

 private:
  std::vector<std::string> order_;
  std::map<std::string, Family> families_;
};

}  // namespace

std::string RenderMetrics(const std::vector<Target>& targets) {
  if (targets.empty()) return "";
  std::vector<std::unique_ptr<Reading>> readings;
  for (const Target& t : targets) readings.push_back(std::make_unique<Reading>(t));
  Exposition e;
  for (const Attribute& a : Attributes()) {
    if (a.type == MetricType::kNone || a.metric.empty()) continue;
    if (PerDevice(a.group)) {
      for (size_t i = 0; i < targets.size(); i++) e.Add(a, &targets[i], *readings[i]);
    } else {
      e.Add(a, nullptr, *readings[0]);  // the set's, once
    }
  }
  return e.Render();
}

}  // namespace ubcache::control
