#include "log.h"

#include <cstdio>
#include <mutex>

namespace tb {
namespace {

int g_rank = -1;
std::string g_host;
bool g_quiet = false;
std::mutex g_mutex;

void Emit(FILE* stream, const std::string& kind, const std::string& message) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::string tag = RankTag();
  std::fprintf(stream, "trainbench: %s%s%s: %s\n", tag.c_str(), tag.empty() ? "" : " ", kind.c_str(), message.c_str());
  std::fflush(stream);
}

}  // namespace

void SetLogIdentity(int rank, const std::string& host) {
  g_rank = rank;
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
void ErrorLine(const std::string& message) { Emit(stderr, "error", message); }

}  // namespace tb
