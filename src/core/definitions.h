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

}  // namespace tb
