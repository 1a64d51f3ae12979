// Merging the findings of several campaigns (`hla fuzz --shard i/N` on
// several machines, or reruns) into one folder, grouped as one campaign
// groups its own (hla/fuzz/campaign.hpp: Group).
#pragma once

#include "hla/fuzz/campaign.hpp"

#include <string>
#include <vector>

namespace hla::fuzz {

// Reads DIR/summary.json of each findings folder, a clean campaign's too
// (InputError naming the folder when it is missing, has none, is not a
// campaign's summary, or is not a shard of the same campaign: another
// support, or cases another folder ran), drops
// duplicates (a finding of the same kind, shrunk case and message as an
// earlier one, in case order across the folders: the shards of one campaign
// merge into what it finds in one process), groups the rest by signature
// across all folders, and writes
// into `out` (created; must not hold a summary.json already) one folder per
// group with the files of its first examples_per_group findings that have
// files, and out/summary.json. The returned summary adds up the campaigns'
// cases, seconds, phases, probes and inconclusive cases; its findings are
// the distinct ones, by kind counted once; its streams the shards' joined.
Summary merge_findings(const std::vector<std::string>& dirs, const std::string& out, size_t examples_per_group = 3);

}  // namespace hla::fuzz
