#include "log.h"

#include <cstdio>
#include <mutex>

namespace tb {
namespace {

int g_rank = -1;
std::string g_host;
bool g_quiet = false;
std::mutex g_mutex;

int g_world_size = 1;

void Emit(FILE* stream, const std::string& kind, const std::string& message, bool tag_rank = true) {
  std::lock_guard<std::mutex> lock(g_mutex);
  // A single process needs no rank prefix.
  std::string tag = tag_rank && g_world_size > 1 ? RankTag() : "";
  std::fprintf(stream, "trainbench: %s%s%s: %s\n", tag.c_str(), tag.empty() ? "" : " ", kind.c_str(), message.c_str());
  std::fflush(stream);
}

}  // namespace

void SetLogIdentity(int rank, const std::string& host, int world_size) {
  g_rank = rank;
  g_world_size = world_size;
  g_host = host;
}

void SetQuiet(bool quiet) { g_quiet = quiet; }

std::string RankTag() {
  if (g_rank < 0) return "";
  return "rank " + std::to_string(g_rank) + " (" + g_host + ")";
}

int LogRank() { return g_rank; }

void Print(const std::string& line, bool force) {
  if (g_rank > 0 || (g_quiet && !force)) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void Warn(const std::string& message) { Emit(stderr, "warning", message); }
void ErrorLine(const std::string& message, bool tag_rank) { Emit(stderr, "error", message, tag_rank); }

}  // namespace tb
