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
  // Expected value of element `i` of `rank`'s receive buffer, given every rank's input (InputValue); false
  // when that element is not defined by the operation (e.g. the receive buffer of a non-root in reduce).
  bool (*expected)(const CollectiveCounts& counts, int rank, int n, size_t i, ReduceOp op, int root, double* value);
  void (*run)(Communicator& comm, const void* send, void* recv, const CollectiveCounts& counts, DataType type,
              ReduceOp op, int root);
  // The rank whose input element `i` of `rank`'s receive buffer is a copy of; null for a reduction, whose every
  // element mixes all ranks' inputs. Names the rank whose data arrived wrong.
  int (*source)(const CollectiveCounts& counts, int rank, int n, size_t i, int root) = nullptr;
};

// Every collective, in the order they are documented and run.
const std::vector<const CollectiveDef*>& AllCollectives();
// Whether the per-NIC rate (PerNicBusBw, definitions.h) is defined for `def`: all_reduce, reduce_scatter and
// all_gather, whose hierarchical form moves (k-1)/k of each rank's share across nodes.
bool HasPerNicRate(const CollectiveDef& def);

// Looks a collective up by name; throws InputError listing the accepted names.
const CollectiveDef& FindCollective(const std::string& name, const std::string& flag);

// The value rank `rank` puts at element `i` of its send buffer: small non-negative integers, so that sums
// over many ranks stay exact in every type (bf16 holds integers exactly up to 256).
double InputValue(int rank, size_t i);
// Fills receive buffers before a check, so that an operation that writes nothing is caught.
inline constexpr double kSentinel = -7.0;

// Reduction of InputValue(r, i) over ranks 0..n-1 with `op`, as the device computes it (avg: sum / n, with
// integer division for int32 applied by the caller through RoundForType).
double ReduceInputs(size_t i, int n, ReduceOp op);

// Element access on host copies of buffers of any DataType (fp16/bf16 converted in software).
void StoreElement(DataType type, void* base, size_t i, double value);
double LoadElement(DataType type, const void* base, size_t i);
// The value `value` becomes when stored in `type` (rounding/truncation as the type does it).
double RoundForType(DataType type, double value);
// Whether `got` matches `expected` for `type`, allowing the rounding that summing over n ranks can add.
bool ValueMatches(DataType type, double got, double expected, int n);

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
