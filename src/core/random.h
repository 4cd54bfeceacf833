// splitmix64 (Steele, Lea and Flood; the generator Java's SplittableRandom and xoshiro's seeding use): a fast,
// well-mixed 64-bit hash and the generator built on it, written once for the synthetic tokens, the weight
// initialisation, the token shards and the loader's sample permutation — whose results must not depend on the
// standard library's distributions.
#pragma once

#include <cstdint>

namespace tb {

// What each step adds to splitmix64's state (the golden ratio in 64 bits): the state after i steps from a seed is
// seed + i·kSplitMix64Increment, so any draw of a stream can be computed without the ones before it.
constexpr uint64_t kSplitMix64Increment = 0x9E3779B97F4A7C15ull;

// The splitmix64 output for state x: x advanced by the golden-ratio increment, then finalised.
constexpr uint64_t SplitMix64(uint64_t x) {
  x += kSplitMix64Increment;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The next value of the generator whose state is `state`, advancing it.
constexpr uint64_t NextSplitMix64(uint64_t& state) {
  const uint64_t value = SplitMix64(state);
  state += kSplitMix64Increment;
  return value;
}

}  // namespace tb
