// Rank-aware console output. Results go to stdout from rank 0 only; warnings and errors go to stderr from the
// rank that has them, prefixed with rank and host so that interleaved output from many ranks stays readable.
#pragma once

#include <string>

namespace tb {

// Set once the MPI world is known; before that, messages carry no rank prefix.
void SetLogIdentity(int rank, const std::string& host, int world_size = 2);
void SetQuiet(bool quiet);

// stdout, rank 0 only (tables, progress). Suppressed by --quiet except for `force`.
void Print(const std::string& line, bool force = false);
// stderr, any rank: "trainbench: rank 3 (node07) warning: ..."
void Warn(const std::string& message);
// tag_rank=false for errors every rank shares (usage): one line, no rank prefix.
void ErrorLine(const std::string& message, bool tag_rank = true);

// "rank 3 (node07)", or "" before the identity is set.
std::string RankTag();
int LogRank();

}  // namespace tb
