// Gathering a part's ScoreMap (check.hpp) while its elements are scored:
// check.cpp (out, den: the candidate per head in parallel, each baseline
// order alike) and gradient_check.cpp (each gradient and state part).
#pragma once

#include "hla/check/check.hpp"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace hla::check {

// Histogram bin of a finite score, as Report::histogram: 0, (0,1], (1,2],
// (2,4], …, (2^19, 2^20], > 2^20 (bins 0 to 22).
size_t score_bin(double s);

// A part's map with its dimensions set and its arrays empty, and each
// position's phase (ScoreMap::cand_phase). Blocks: at most
// ScoreMap::kMaxBlocks per row, fewer with many rows (rows × blocks stays
// near 8192); per-position entries: at most 65536, and rows × entries near
// 2^22 (each head's share is gathered apart, then merged).
struct MapLayout {
  ScoreMap proto;
  std::vector<uint16_t> phase;  // [positions]
  Index entries() const { return (proto.positions + proto.step - 1) / proto.step; }
};
MapLayout map_layout(const BatchProblem& p, const std::string& name, Index rows, Index heads, Index group, Index positions,
                     bool tokens);

// Rows [row0, row0 + nrows) of one map, gathered element by element. The
// elements of one (row, position) arrive together (its columns): their worst
// is written out when the position changes (flush(), also before merging).
struct MapAcc {
  const MapLayout* layout = nullptr;
  Index row0 = 0, nrows = 0;
  std::vector<float> blocks, positions, phase;
  std::vector<size_t> bins;
  double max = 0;  // the worst score, non-finite ones included
  void start(const MapLayout& l, Index first_row, Index rows);
  bool started() const { return layout != nullptr; }
  void add(Index row, Index pos, double score) {
    if (row != cur_row || pos != cur_pos) flush(), cur_row = row, cur_pos = pos;
    if (score > cur) cur = score;
    if (score < HUGE_VAL) ++bins[score_bin(score)];
  }
  void flush();

 private:
  Index cur_row = -1, cur_pos = -1;
  double cur = -1;
};

// Merges an accumulator's rows into m's candidate (ours = false) or baseline
// arrays, sizing them first (every value -1).
void merge_map(ScoreMap& m, const MapAcc& a, bool ours);

// The candidate's worst score in m (-1: none scored).
double map_worst(const ScoreMap& m);

// Hints from a failing report's maps (diagnosis.cpp): Report::hints.
std::vector<std::string> diagnose(const BatchProblem& p, const Report& r);

}  // namespace hla::check
