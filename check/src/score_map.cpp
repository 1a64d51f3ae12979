#include "score_map.hpp"

#include <algorithm>
#include <cmath>

namespace hla::check {

size_t score_bin(double s) {
  if (s == 0) return 0;
  if (s <= 1) return 1;
  if (!(s <= std::ldexp(1.0, 20))) return 22;  // also +inf (error where the magnitude is 0)
  int x = 0;
  const double m = std::frexp(s, &x);  // s = m·2^x, m in [0.5, 1): ceil(log2 s) = x, or x − 1 at m = 1/2
  const int e = m == 0.5 ? x - 1 : x;
  return static_cast<size_t>(std::min(e + 1, 22));
}

MapLayout map_layout(const BatchProblem& p, const std::string& name, Index rows, Index heads, Index group, Index positions,
                     bool tokens) {
  MapLayout l;
  ScoreMap& m = l.proto;
  m.name = name, m.tokens = tokens, m.rows = rows, m.heads = std::max<Index>(heads, 1), m.group = std::max<Index>(group, 1);
  m.positions = positions;
  const Index rows1 = std::max<Index>(rows, 1);
  const Index blocks = std::clamp<Index>(8192 / rows1, 1, ScoreMap::kMaxBlocks);
  m.block = std::max<Index>(1, (positions + blocks - 1) / blocks);
  const Index entries = std::clamp<Index>((Index(1) << 22) / rows1, 256, 65536);
  m.step = std::max<Index>(1, (positions + entries - 1) / entries);
  l.phase.assign(static_cast<size_t>(positions), 0);
  std::vector<Index> start(static_cast<size_t>(positions), 0);
  if (tokens && positions == p.n)
    for (const auto& [t0, t1] : p.sequences())
      for (Index t = t0; t < t1; ++t) start[static_cast<size_t>(t)] = t0;
  for (Index t = 0; t < positions; ++t)
    l.phase[static_cast<size_t>(t)] = static_cast<uint16_t>((t - start[static_cast<size_t>(t)]) % ScoreMap::kPhases);
  return l;
}

void MapAcc::start(const MapLayout& l, Index first_row, Index rows) {
  layout = &l, row0 = first_row, nrows = rows;
  blocks.assign(static_cast<size_t>(rows * l.proto.blocks()), -1.0f);
  positions.assign(static_cast<size_t>(l.entries()), -1.0f);
  phase.assign(static_cast<size_t>(ScoreMap::kPhases), -1.0f);
  bins.assign(23, 0);
  max = 0;
}

void MapAcc::flush() {
  if (cur_pos < 0) return;
  const ScoreMap& m = layout->proto;
  const float s = static_cast<float>(cur);  // beyond float's range: +inf
  auto up = [s](float& x) { x = std::max(x, s); };
  up(blocks[static_cast<size_t>((cur_row - row0) * m.blocks() + cur_pos / m.block)]);
  up(positions[static_cast<size_t>(cur_pos / m.step)]);
  up(phase[layout->phase[static_cast<size_t>(cur_pos)]]);
  max = std::max(max, cur);
  cur_row = cur_pos = -1, cur = -1;
}

void merge_map(ScoreMap& m, const MapAcc& a, bool ours) {
  std::vector<float>& bl = ours ? m.ours_blocks : m.cand_blocks;
  std::vector<float>& po = ours ? m.ours_positions : m.cand_positions;
  std::vector<float>& ph = ours ? m.ours_phase : m.cand_phase;
  std::vector<size_t>& bi = ours ? m.ours_bins : m.cand_bins;
  if (bl.empty()) {
    bl.assign(static_cast<size_t>(m.rows * m.blocks()), -1.0f);
    po.assign(a.positions.size(), -1.0f);
    ph.assign(a.phase.size(), -1.0f);
    bi.assign(23, 0);
  }
  std::copy(a.blocks.begin(), a.blocks.end(), bl.begin() + static_cast<std::ptrdiff_t>(a.row0 * m.blocks()));
  for (size_t i = 0; i < po.size(); ++i) po[i] = std::max(po[i], a.positions[i]);
  for (size_t i = 0; i < ph.size(); ++i) ph[i] = std::max(ph[i], a.phase[i]);
  for (size_t i = 0; i < bi.size(); ++i) bi[i] += a.bins[i];
}

double map_worst(const ScoreMap& m) {
  double w = -1;
  for (float x : m.cand_blocks) w = std::max(w, static_cast<double>(x));
  return w;
}

}  // namespace hla::check
