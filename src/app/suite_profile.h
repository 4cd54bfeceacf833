// `trainbench suite`'s profiles: TOML files naming the phases to run and each phase's options. The built-in
// profiles (quick, nightly) are launch/suite/*.toml, compiled in; any other is a file. Keys (launch/suite/README.md):
//   [suite]        phases = ["collectives", "p2p", "train"] (the order they run in), repeats = N
//   [collectives]  any option of `trainbench collectives`, named as its long flag with underscores
//   [p2p]          ... of `trainbench p2p`
//   [train]        ... of `trainbench train`
//   [data]         tokens, shard_tokens: the dataset the suite writes for train's loader (when [train] names no
//                  data of its own)
//   [cpu.<table>]  keys that replace those of <table> on the CPU backend (a CI machine or a laptop)
// A string is the flag's value, a number its decimal value, an array its items comma-separated, true a switch
// given (false: not given).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace tb {

struct SuiteProfile {
  std::string name;                 // "quick", or the file as given
  std::vector<std::string> phases;  // in order: "collectives", "p2p", "train"
  int repeats = 1;
  std::map<std::string, std::vector<std::string>> args;  // phase -> its command-line words ("--iters", "20")
  std::string data_tokens;          // [data] tokens ("" when train reads data of its own)
  std::string data_shard_tokens;
  std::map<std::string, int> lines; // "<phase>" -> the line of its table, for errors
};

// The phases a profile may list, in their default order.
const std::vector<std::string>& SuitePhaseNames();

// The names of the built-in profiles ("quick, nightly").
std::string BuiltInProfileNames();

// Reads the profile `name_or_file` (a built-in name, else a TOML file) with the [cpu.*] overrides applied when
// `cpu` (the CPU backend). InputError naming the file, line and key for a syntax error, an unknown table or key
// of the profile itself (a phase's unknown option is caught when its words are parsed), or a bad value.
SuiteProfile ReadSuiteProfile(const std::string& name_or_file, bool cpu);
SuiteProfile ParseSuiteProfile(const std::string& text, const std::string& file, bool cpu);

}  // namespace tb
