// Report::html: one self-contained page (inline CSS and SVG; no script, no
// font or image fetched): the verdict, the pass-rule numbers, the hints and,
// per part (out, den, each gradient and state part), a heatmap of the worst
// score per (row, block of positions) on a log scale with rule 3's line
// marked, the worst score per position beside our worst order's, both score
// histograms and the worst elements. Every number printed with a fixed
// format: the same report gives the same bytes.
#include "hla/check/check.hpp"
#include "hla/io/atomic_file.hpp"
#include "score_map.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace hla::check {
namespace html_page {

std::string esc(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string g4(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", x);
  return b;
}

std::string f1(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", x);
  return b;
}

// The log scale of a part's plots: decades [lo, hi] around rule 3's line and the worst score.
struct Scale {
  double lo = -2, hi = 2, line = 1;
  double at(double s) const { return std::clamp((std::log10(s) - lo) / (hi - lo), 0.0, 1.0); }
};

Scale scale_of(const ScoreMap& m) {
  Scale s;
  s.line = m.limit > 0 ? m.limit : 1;
  double worst = 0;
  for (const auto* v : {&m.cand_blocks, &m.ours_blocks})
    for (float x : *v)
      if (std::isfinite(x)) worst = std::max(worst, static_cast<double>(x));
  const double l = std::log10(s.line);
  s.hi = std::ceil(std::max({l + 1, worst > 0 ? std::log10(worst) + 0.05 : l, std::log10(std::max(m.bound, 1e-300))}));
  s.lo = std::floor(std::min(l - 3, s.hi - 5));
  return s;
}

// A cell's colour: grey where nothing was scored, white at 0, black for
// non-finite; below the line pale to dark blue, above it orange to dark red.
std::string colour(const Scale& sc, double s) {
  if (s < 0) return "#e6e6e6";
  if (s == 0) return "#ffffff";
  if (!std::isfinite(s)) return "#000000";
  auto mix = [](const int a[3], const int b[3], double t) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "#%02x%02x%02x", static_cast<int>(std::lround(a[0] + (b[0] - a[0]) * t)),
                  static_cast<int>(std::lround(a[1] + (b[1] - a[1]) * t)), static_cast<int>(std::lround(a[2] + (b[2] - a[2]) * t)));
    return std::string(buf);
  };
  static const int pale[3] = {238, 243, 250}, blue[3] = {49, 97, 160}, orange[3] = {253, 174, 97}, red[3] = {165, 0, 38};
  const double t = sc.at(s), tl = sc.at(sc.line);
  if (s <= sc.line) return mix(pale, blue, tl > 0 ? t / tl : 1);
  return mix(orange, red, tl < 1 ? (t - tl) / (1 - tl) : 1);
}

// The colour bar: decades ticked, rule 3's line marked.
void legend(std::ostringstream& o, const Scale& sc, double x0, double y0, double w) {
  const int steps = 60;
  for (int i = 0; i < steps; ++i) {
    const double s = std::pow(10.0, sc.lo + (sc.hi - sc.lo) * (i + 0.5) / steps);
    o << "<rect x=\"" << f1(x0 + w * i / steps) << "\" y=\"" << f1(y0) << "\" width=\"" << f1(w / steps + 0.5)
      << "\" height=\"10\" fill=\"" << colour(sc, s) << "\"/>";
  }
  for (int d = static_cast<int>(sc.lo); d <= static_cast<int>(sc.hi); ++d) {
    const double x = x0 + w * (d - sc.lo) / (sc.hi - sc.lo);
    o << "<text x=\"" << f1(x) << "\" y=\"" << f1(y0 + 22) << "\" class=\"tick\">1e" << d << "</text>";
  }
  const double xl = x0 + w * sc.at(sc.line);
  o << "<line class=\"limit\" x1=\"" << f1(xl) << "\" x2=\"" << f1(xl) << "\" y1=\"" << f1(y0 - 4) << "\" y2=\"" << f1(y0 + 12)
    << "\"/><text x=\"" << f1(xl + 3) << "\" y=\"" << f1(y0 - 5) << "\" class=\"tick\">limit " << g4(sc.line) << "</text>";
}

std::string row_label(const ScoreMap& m, Index row) {
  const bool kv = m.name == "dk" || m.name == "dv";
  return std::string(m.tokens ? "b" : "s") + std::to_string(row / m.heads) + (kv ? " kv" : " h") + std::to_string(row % m.heads);
}

// The heatmap: one cell per (row, block), class "cell", its score in data-s.
void heatmap(std::ostringstream& o, const ScoreMap& m, const Scale& sc) {
  const Index nb = m.blocks(), rows = m.rows;
  const double left = 70, width = 800, cw = width / static_cast<double>(std::max<Index>(nb, 1));
  const double ch = std::clamp(360.0 / static_cast<double>(std::max<Index>(rows, 1)), 0.25, 14.0);
  const double h = ch * static_cast<double>(rows);
  o << "<svg class=\"heatmap\" data-rows=\"" << rows << "\" data-blocks=\"" << nb << "\" data-block=\"" << m.block << "\" width=\""
    << left + width + 20 << "\" height=\"" << f1(h + 70) << "\" viewBox=\"0 0 " << left + width + 20 << " " << f1(h + 70)
    << "\" xmlns=\"http://www.w3.org/2000/svg\">";
  o << "<g transform=\"translate(" << left << " 10) scale(" << g4(cw) << " " << g4(ch) << ")\" shape-rendering=\"crispEdges\">";
  for (Index r = 0; r < rows; ++r)
    for (Index k = 0; k < nb; ++k) {
      const double s = m.cand_blocks.empty() ? -1 : m.cand_blocks[static_cast<size_t>(r * nb + k)];
      o << "<rect class=\"cell\" x=\"" << k << "\" y=\"" << r << "\" width=\"1\" height=\"1\" fill=\"" << colour(sc, s)
        << "\" data-s=\"" << g4(s) << "\"/>";
    }
  o << "</g>";
  const Index label_every = std::max<Index>(1, static_cast<Index>(std::ceil(11.0 / ch)));
  for (Index r = 0; r < rows; r += label_every)
    o << "<text x=\"" << left - 4 << "\" y=\"" << f1(10 + ch * (static_cast<double>(r) + 0.5) + 3) << "\" class=\"tick\" text-anchor=\"end\">"
      << row_label(m, r) << "</text>";
  o << "<text x=\"" << left << "\" y=\"" << f1(h + 22) << "\" class=\"tick\">" << (m.tokens ? "token " : "row ") << "0</text>"
    << "<text x=\"" << left + width << "\" y=\"" << f1(h + 22) << "\" class=\"tick\" text-anchor=\"end\">" << m.positions
    << " (blocks of " << m.block << ")</text>";
  legend(o, sc, left, h + 40, width * 0.6);
  o << "</svg>\n";
}

// A path through the per-position worst scores (pooled to at most 2048
// points by their maximum), broken where nothing was scored.
std::string profile_path(const std::vector<float>& v, const Scale& sc, double left, double top, double w, double h) {
  const size_t E = v.size(), q = std::max<size_t>(1, (E + 2047) / 2048), pts = (E + q - 1) / q;
  std::string d;
  bool pen = false;
  for (size_t i = 0; i < pts; ++i) {
    float s = -1;
    for (size_t j = i * q; j < std::min(E, (i + 1) * q); ++j) s = std::max(s, v[j]);
    if (s < 0) {
      pen = false;
      continue;
    }
    const double x = left + w * (static_cast<double>(i) + 0.5) / static_cast<double>(pts);
    const double y = top + h * (1 - (s == 0 ? 0.0 : sc.at(s)));
    d += (pen ? "L" : "M") + f1(x) + " " + f1(y);
    pen = true;
  }
  return d.empty() ? "M0 0" : d;
}

// The worst score per position: the candidate's, ours beside it, rule 3's line and the bound.
void profile(std::ostringstream& o, const ScoreMap& m, const Scale& sc) {
  const double left = 70, top = 10, w = 800, h = 200;
  o << "<svg class=\"profile\" width=\"" << left + w + 20 << "\" height=\"" << top + h + 40 << "\" viewBox=\"0 0 " << left + w + 20
    << " " << top + h + 40 << "\" xmlns=\"http://www.w3.org/2000/svg\">";
  o << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << w << "\" height=\"" << h << "\" class=\"frame\"/>";
  for (int d = static_cast<int>(sc.lo); d <= static_cast<int>(sc.hi); ++d) {
    const double y = top + h * (1 - sc.at(std::pow(10.0, d)));
    o << "<text x=\"" << left - 4 << "\" y=\"" << f1(y + 3) << "\" class=\"tick\" text-anchor=\"end\">1e" << d << "</text>";
  }
  for (const auto& [value, cls, name] : {std::tuple{sc.line, "limit", "limit"}, std::tuple{m.bound, "bound", "bound"}}) {
    if (!(value > 0)) continue;
    const double y = top + h * (1 - sc.at(value));
    o << "<line class=\"" << cls << "\" x1=\"" << left << "\" x2=\"" << left + w << "\" y1=\"" << f1(y) << "\" y2=\"" << f1(y)
      << "\"/><text x=\"" << left + w - 2 << "\" y=\"" << f1(y - 3) << "\" class=\"tick\" text-anchor=\"end\">" << name << " "
      << g4(value) << "</text>";
  }
  o << "<path class=\"ours\" d=\"" << profile_path(m.ours_positions, sc, left, top, w, h) << "\"/>";
  o << "<path class=\"cand\" d=\"" << profile_path(m.cand_positions, sc, left, top, w, h) << "\"/>";
  o << "<text x=\"" << left << "\" y=\"" << top + h + 16 << "\" class=\"tick\">" << (m.tokens ? "token 0" : "row 0")
    << (m.step > 1 ? " (per " + std::to_string(m.step) + " positions)" : std::string()) << "</text><text x=\"" << left + w << "\" y=\""
    << top + h + 16 << "\" class=\"tick\" text-anchor=\"end\">" << m.positions << "</text>";
  o << "<text x=\"" << left + 10 << "\" y=\"" << top + h + 34 << "\" class=\"tick\"><tspan class=\"cand-key\">&#9632; candidate</tspan>"
    << " <tspan class=\"ours-key\">&#9632; ours (" << esc(m.ours_form.empty() ? "none" : m.ours_form) << ")</tspan></text>";
  o << "</svg>\n";
}

// The score histograms side by side, counts on a log scale.
void histogram(std::ostringstream& o, const ScoreMap& m) {
  const double left = 70, top = 10, w = 800, h = 140, bw = w / 23;
  size_t most = 1;
  for (const auto* v : {&m.cand_bins, &m.ours_bins})
    for (size_t c : *v) most = std::max(most, c);
  const double lmost = std::log10(static_cast<double>(most) + 1);
  o << "<svg class=\"histogram\" width=\"" << left + w + 20 << "\" height=\"" << top + h + 30 << "\" viewBox=\"0 0 " << left + w + 20
    << " " << top + h + 30 << "\" xmlns=\"http://www.w3.org/2000/svg\">";
  o << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << w << "\" height=\"" << h << "\" class=\"frame\"/>";
  for (int i = 0; i < 23; ++i) {
    for (int side = 0; side < 2; ++side) {
      const std::vector<size_t>& v = side == 0 ? m.cand_bins : m.ours_bins;
      const size_t c = v.empty() ? 0 : v[static_cast<size_t>(i)];
      const double bh = h * std::log10(static_cast<double>(c) + 1) / lmost;
      o << "<rect class=\"" << (side == 0 ? "bar-cand" : "bar-ours") << "\" x=\"" << f1(left + bw * i + 1 + side * (bw / 2 - 1))
        << "\" y=\"" << f1(top + h - bh) << "\" width=\"" << f1(bw / 2 - 1) << "\" height=\"" << f1(bh) << "\" data-count=\"" << c
        << "\"/>";
    }
    const std::string label = i == 0 ? "0" : i == 1 ? "1" : i == 22 ? "&gt;2^20" : "2^" + std::to_string(i - 1);
    o << "<text x=\"" << f1(left + bw * (i + 0.5)) << "\" y=\"" << top + h + 14 << "\" class=\"tick\" text-anchor=\"middle\">" << label
      << "</text>";
  }
  o << "<text x=\"" << left << "\" y=\"" << top + h + 28 << "\" class=\"tick\">score bins (upper edge; counts on a log scale, most "
    << most << ")</text></svg>\n";
}

void worst_table(std::ostringstream& o, const std::vector<Element>& worst, bool state) {
  if (worst.empty()) {
    o << "<p>No element of this part among the worst listed.</p>\n";
    return;
  }
  o << "<table class=\"worst\"><tr><th>" << (state ? "sequence" : "batch") << "</th><th>head</th><th>" << (state ? "row" : "token")
    << "</th><th>column</th><th>candidate</th><th>reference</th><th>magnitude</th><th>score</th></tr>";
  for (const Element& e : worst)
    o << "<tr><td>" << e.b << "</td><td>" << e.h << "</td><td>" << e.t << "</td><td>" << (e.c < 0 ? std::string(state ? "" : "den") : std::to_string(e.c))
      << "</td><td>" << g4(e.candidate) << "</td><td>" << g4(e.reference) << "</td><td>" << g4(e.magnitude) << "</td><td>"
      << g4(e.score) << "</td></tr>";
  o << "</table>\n";
}

void numbers(std::ostringstream& o, const std::vector<std::pair<std::string, std::string>>& rows, const char* id) {
  o << "<table class=\"numbers\"" << (id ? std::string(" id=\"") + id + "\"" : std::string()) << ">";
  for (const auto& [k, v] : rows) o << "<tr><th>" << esc(k) << "</th><td>" << esc(v) << "</td></tr>";
  o << "</table>\n";
}

// One part: its numbers, heatmap, per-position plot, histograms and worst elements.
void part(std::ostringstream& o, const Report& r, const ScoreMap& m) {
  const GradientRow* g = nullptr;
  for (const GradientRow& x : r.gradients)
    if (x.name == m.name) g = &x;
  o << "<section class=\"part\" id=\"part-" << esc(m.name) << "\" data-fails=\"" << (m.fails ? 1 : 0) << "\"><h2>" << esc(m.name)
    << (m.fails ? " <span class=\"bad\">fails</span>" : " <span class=\"good\">within the rule</span>") << "</h2>\n";
  std::vector<Element> worst;
  if (g) {
    worst = g->worst;
    numbers(o, {{"elements", std::to_string(g->elements) + ", scored " + std::to_string(g->scored) + ", non-finite " +
                                 std::to_string(g->nonfinite) + ", over bound " + std::to_string(g->over_bound) + ", ill-conditioned " +
                                 std::to_string(g->ill_conditioned)},
                {"worst score", g4(g->max_score)},
                {"ours worst", g->baseline_applied ? g4(g->baseline_max_score) + " (" + g->baseline_worst_form + ")" : "rule 3 not applied"},
                {"ratio", g->baseline_applied ? g4(g->baseline_ratio) + " (limit " + g4(g->ratio_limit) + "x)" : "-"},
                {"bound K_g+1", g4(m.bound)}},
            nullptr);
  } else {
    for (const Element& e : r.worst)
      if ((e.c < 0) == (m.name == "den")) worst.push_back(e);
    numbers(o, {{"worst score", g4(std::max(0.0, map_worst(m)))},
                {"ours worst", g4(r.baseline_max_score) + " (" + r.baseline_worst_form + ")"},
                {"bound K+1", g4(m.bound)}},
            nullptr);
  }
  const Scale sc = scale_of(m);
  o << "<h3>Worst score per (" << (m.tokens ? "batch" : "sequence") << "&#183;head, " << (m.tokens ? "token" : "row")
    << " block), log scale; the limit line " << g4(sc.line) << " = rule 3's ratio limit &#215; ours worst (at least 1)</h3>\n";
  heatmap(o, m, sc);
  o << "<h3>Worst score per " << (m.tokens ? "token" : "row") << ", the candidate's and our worst order's</h3>\n";
  profile(o, m, sc);
  o << "<h3>Score histograms: candidate (red) and ours (blue)</h3>\n";
  histogram(o, m);
  o << "<h3>Worst elements</h3>\n";
  worst_table(o, worst, !m.tokens);
  o << "</section>\n";
}

const char* kStyle =
    "body{font-family:sans-serif;margin:1.5em;color:#222;max-width:960px}h1{font-size:1.3em}"
    ".verdict{font-size:2em;font-weight:bold;padding:.2em .5em;display:inline-block;border-radius:4px}"
    ".verdict.PASS{background:#d8f0d8;color:#165016}.verdict.FAIL{background:#f8d4d4;color:#7a0c0c}"
    ".verdict.INCONCLUSIVE{background:#f6ecc8;color:#6a5200}table{border-collapse:collapse;margin:.5em 0;font-size:.85em}"
    "th,td{border:1px solid #ccc;padding:2px 6px;text-align:left}td{font-family:monospace}.bad{color:#a50026}.good{color:#165016}"
    ".hint{background:#fff6d6;padding:.2em}.tick{font-size:10px;fill:#444}.frame{fill:none;stroke:#999}"
    ".limit{stroke:#a50026;stroke-dasharray:4 3}.bound{stroke:#555;stroke-dasharray:2 3}"
    ".cand{fill:none;stroke:#d7301f;stroke-width:1.2}.ours{fill:none;stroke:#3161a0;stroke-width:1.2;opacity:.8}"
    ".cand-key{fill:#d7301f}.ours-key{fill:#3161a0}.bar-cand{fill:#d7301f}.bar-ours{fill:#3161a0}"
    "section.part{border-top:2px solid #ddd;margin-top:1.5em}";

}  // namespace html_page

std::string Report::html(const std::string& title) const {
  using namespace html_page;
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>hla check: " << verdict()
    << (title.empty() ? "" : " &#8212; " + esc(title)) << "</title><style>" << kStyle << "</style></head><body>\n";
  o << "<h1>hla-oracle check report" << (title.empty() ? "" : ": " + esc(title)) << "</h1>\n";
  o << "<p id=\"verdict\" class=\"verdict " << verdict() << "\" data-verdict=\"" << verdict() << "\">" << verdict() << "</p>\n";
  if (!reasons.empty()) {
    o << "<ul id=\"reasons\">";
    for (const auto& why : reasons) o << "<li>" << esc(why) << "</li>";
    o << "</ul>\n";
  }
  if (!diagnosis.empty()) {
    o << "<section id=\"diagnosis\"><h2>Diagnosis</h2><p>Known mistakes it matches within the pass rule's bounds (the verdict does not "
         "depend on them).</p><ul>";
    for (const Diagnosis& d : diagnosis)
      o << "<li class=\"hint\" data-id=\"" << esc(d.id) << "\"><b>" << esc(d.id) << "</b> on " << g4(100 * d.fraction) << "% of "
        << esc(d.part) << ": " << esc(d.what) << ". Fix: " << esc(d.fix) << "</li>";
    o << "</ul></section>\n";
  }
  o << "<section id=\"hints\"><h2>Diagnosis hints</h2><p>From where the error lies; the verdict does not depend on them.</p><ul>";
  for (const auto& h : hints) o << "<li class=\"hint\">" << esc(h) << "</li>";
  if (hints.empty()) o << "<li>none</li>";
  o << "</ul></section>\n<h2>The pass rule</h2>\n";
  numbers(o, {{"precision", to_string(precision) + " (u = " + g4(u) + ")"}, {"form class", to_string(form_class)},
              {"elements", std::to_string(elements) + ", scored " + std::to_string(scored) + ", non-finite " + std::to_string(nonfinite) +
                               ", over bound " + std::to_string(over_bound)},
              {"rule 2: bound K+1", g4(bound)}, {"worst score", g4(max_score)},
              {"rule 3: ours worst", g4(baseline_max_score) + (baseline_worst_form.empty() ? "" : " (" + baseline_worst_form + ")")},
              {"rule 3: ratio", g4(baseline_ratio) + " (limit " + g4(ratio_limit) + "x, floor " + g4(noise_floor) + ")"},
              {"gradient bound K_g+1", gradients.empty() ? "-" : g4(gradient_bound)}},
          "rule");
  for (const ScoreMap& m : maps) part(o, *this, m);
  o << "</body></html>\n";
  return o.str();
}

void write_html_report(const std::string& path, const Report& r, const std::string& title) {
  io::write_file_atomically(path, r.html(title));
}

}  // namespace hla::check
