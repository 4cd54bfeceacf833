// Definitions that the measuring code and the analysis of reports share, each stated once (README.md,
// "Definitions"): what a figure means is decided here, and every caller uses these.
#pragma once

namespace tb {

// The gradient bucket size default, in MiB (PyTorch DDP's bucket_cap_mb). `train --bucket-mb` defaults to it,
// and a report that does not record config/bucket_mb is read as having used it.
inline constexpr double kDefaultBucketMiB = 25;

// all_reduce's bus-bandwidth factor over n ranks, 2(n-1)/n: a ring moves each byte out and back in, n-1 steps each
// way. busbw = algbw x this factor (the collectives sweep, the training buckets' effective busbw), and the share of
// the bytes a ring all-reduce puts on each link (the projection's bandwidth terms).
inline double AllReduceBusFactor(int n) { return 2.0 * (n - 1) / n; }

// The per-NIC rate of an all_reduce (and of a reduce_scatter or all_gather) of n ranks on k nodes, from its busbw:
// busbw x (k-1)/(n-1). A hierarchical algorithm sends 2(k-1)/k x S/m bytes from each rank across nodes (m = n/k
// ranks per node; half that for reduce_scatter and all_gather), so this is the rate at which each rank's share of the
// inter-node traffic moved over the whole operation: what one NIC carries when every rank has its own, and 1/m of
// what a node's single NIC carries when its m ranks share it. Defined for k >= 2.
inline double PerNicBusBw(double busbw, int nodes, int ranks) {
  return busbw * static_cast<double>(nodes - 1) / static_cast<double>(ranks - 1);
}

}  // namespace tb
