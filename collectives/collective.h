// One collective benchmark = one small table of functions (nccl-tests' shape): how a size in bytes maps to
// element counts, where in-place operands sit, what every rank puts in and expects out, the bus-bandwidth
// factor, and how to run it. The sweep harness (sweep.h) does everything else. Adding a collective is
// adding a file that defines one of these and listing it in AllCollectives().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "communicator.h"
#include "verify_math.h"

namespace tb {

struct CollectiveCounts {
  size_t send_elements = 0;   // elements in each rank's send buffer
  size_t recv_elements = 0;   // elements in each rank's receive buffer
  size_t op_count = 0;        // the count argument of the call
  uint64_t size_bytes = 0;    // S of algbw = S/t, as nccl-tests counts it (after rounding to whole elements)
  // In place, one buffer of max(send, recv) elements holds both operands at these element offsets.
  size_t in_place_send_offset = 0;
  size_t in_place_recv_offset = 0;
};

struct CollectiveDef {
  const char* name;                // "all_reduce"
  const char* bus_factor_formula;  // "2(n-1)/n"
  double (*bus_factor)(int n);
  bool uses_reduce_op;
  bool uses_root;
  CollectiveCounts (*counts)(uint64_t requested_bytes, size_t type_size, int n, int rank);
  // Where the expected value of each element of `rank`'s receive buffer comes from (verify_math.h: the host's and
  // the device's check compute each element from it); ExpectedKind::kUndefined where the operation defines none
  // (the receive buffer of a non-root in reduce). A copy's layout also names the rank each element came from.
  ExpectedLayout (*expected)(const CollectiveCounts& counts, int rank, int n, ReduceOp op, int root);
  void (*run)(Communicator& comm, const void* send, void* recv, const CollectiveCounts& counts, DataType type,
              ReduceOp op, int root);
};

// Every collective, in the order they are documented and run.
const std::vector<const CollectiveDef*>& AllCollectives();
// Whether the per-NIC rate (PerNicBusBw, definitions.h) is defined for `def`: all_reduce, reduce_scatter and
// all_gather, whose hierarchical form moves (k-1)/k of each rank's share across nodes.
bool HasPerNicRate(const CollectiveDef& def);

// Looks a collective up by name; throws InputError listing the accepted names.
const CollectiveDef& FindCollective(const std::string& name, const std::string& flag);

// Shared count rules: one buffer of `per_rank` elements (all_reduce, broadcast, reduce, sendrecv) or one
// block per rank (all_gather, reduce_scatter, alltoall: size rounded down to a multiple of n elements).
CollectiveCounts SingleBufferCounts(uint64_t requested_bytes, size_t type_size);

double FactorOne(int n);
double FactorNMinusOneOverN(int n);

extern const CollectiveDef kAllReduce;
extern const CollectiveDef kAllGather;
extern const CollectiveDef kReduceScatter;
extern const CollectiveDef kAllToAll;
extern const CollectiveDef kBroadcast;
extern const CollectiveDef kReduce;
extern const CollectiveDef kSendRecv;

}  // namespace tb
