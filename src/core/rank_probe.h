// Asking every rank where it is when the job is stuck, so that the rank that stayed behind is named.
//
// When a watchdog fires, the ranks' main threads are inside MPI (waiting for a peer) or stuck elsewhere (in compute,
// in I/O, before a collective), and MPI is initialised single-threaded: no other thread may call it. The question
// therefore travels on a side channel. Each rank listens on a TCP port of its own (any free port, on every address
// of its host) and answers from a thread of its own; rank 0 learns every rank's port and IPv4 addresses, and every
// rank learns rank 0's, when the measurement begins (over MPI, collectively). A request carries a token rank 0 drew
// and sent to every rank over MPI; one without it gets no answer. Two requests exist: rank 0 asks a rank for its
// state (one line, from the Answer callback), and a rank whose watchdog fired tells rank 0, which may itself be
// stuck outside any guarded operation (OnPeerTimeout runs on rank 0's probe thread).
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tb {

// A rank's answer to the probe: its line (nullopt: none came in time), and whether a connection to it was made at all
// (false: its host could not be reached, or nothing listened).
struct ProbeAnswer {
  std::optional<std::string> line;
  bool connected = false;
};

class RankProbe {
 public:
  using Answer = std::function<std::string()>;  // this rank's state as one line (no newline)
  using OnPeerTimeout = std::function<void(int rank, const std::string& operation)>;

  // Collective over `comm`. A rank that cannot open its port (no socket, no address) takes part without one. Rank 0
  // then asks every rank once (within reach_deadline_s): a rank it cannot reach now (no port, a firewall) is
  // unreachable, and its silence later says nothing about it.
  RankProbe(MPI_Comm comm, Answer answer, OnPeerTimeout on_peer_timeout, double reach_deadline_s = 2);
  ~RankProbe();
  RankProbe(const RankProbe&) = delete;
  RankProbe& operator=(const RankProbe&) = delete;

  // Rank 0: every rank's answer in rank order (rank 0's own included, connected), no line where none came within
  // deadline_s. Empty on other ranks.
  std::vector<ProbeAnswer> AskAll(double deadline_s) const;
  // Rank 0: whether `rank` answered when the probe was set up.
  bool Reachable(int rank) const { return rank >= 0 && static_cast<size_t>(rank) < reachable_.size() && reachable_[rank]; }
  // Tells rank 0 that this rank's watchdog fired in `operation`; true when rank 0 took it within deadline_s.
  bool TellRoot(const std::string& operation, double deadline_s) const;

  struct Endpoint {
    int port = 0;                        // 0: none
    std::vector<std::string> addresses;  // IPv4, dotted; loopback last
  };

 private:
  class Server;
  int rank_ = 0;
  std::string token_;
  Answer answer_;
  std::vector<Endpoint> endpoints_;  // rank 0: every rank's; other ranks: rank 0's only, at index 0
  std::unique_ptr<Server> server_;
  std::vector<bool> reachable_;  // rank 0
};

}  // namespace tb
