// Numbers and lists on the command line: one grammar, one range check, the range shown in --help, for every
// command and every numeric flag.
//
// Grammar (the same everywhere): an integer is decimal digits with an optional leading '-' ("12", "-1"); a real
// is a decimal number with an optional fraction and exponent ("3e-4", "0.5", "300e9"). Hexadecimal, octal
// prefixes, "inf", "nan", spaces and trailing characters are refused in every flag. A list is comma-separated
// items, none of them empty ("1,,2" and "1," are refused).
#pragma once

#include <boost/program_options.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace tb {

namespace po = boost::program_options;

// The values a numeric flag accepts: [min, max], each bound open or closed; reals are always finite.
template <typename T>
struct Range {
  T min = std::numeric_limits<T>::lowest();
  T max = std::numeric_limits<T>::max();
  bool min_open = false;  // min itself excluded
  bool max_open = false;

  static Range AtLeast(T low) { return {low, std::numeric_limits<T>::max(), false, false}; }
  static Range Above(T low) { return {low, std::numeric_limits<T>::max(), true, false}; }
  static Range Between(T low, T high) { return {low, high, false, false}; }
  // (low, high]: e.g. a positive rate with a ceiling.
  static Range AboveUpTo(T low, T high) { return {low, high, true, false}; }
  // (low, high): e.g. a share strictly between 0 and 1.
  static Range Inside(T low, T high) { return {low, high, true, true}; }

  bool Contains(T value) const;
  // ">= 1", "> 0", "0..1", "(0, 1)", "(0, 1]": for messages and help.
  std::string Describe() const;
};

using IntRange = Range<int64_t>;
using RealRange = Range<double>;

// Whether `text` follows the grammar above: [-]digits for integers; [-]digits[.digits][e[+-]digits] (or .digits)
// for reals.
bool IsDecimalNumber(const std::string& text, bool real);

// Parses `text` by the grammar above and checks it against `range`; throws InputError naming `flag` ("--lr"),
// the text and what is accepted.
int64_t ParseInteger(const std::string& text, const std::string& flag, const IntRange& range);
double ParseReal(const std::string& text, const std::string& flag, const RealRange& range);

// Splits a comma-separated list into trimmed items; throws InputError naming `flag` for an empty item or an
// empty list.
std::vector<std::string> SplitFlagList(const std::string& text, const std::string& flag);
std::vector<int64_t> ParseIntegerList(const std::string& text, const std::string& flag, const IntRange& range);
std::vector<double> ParseRealList(const std::string& text, const std::string& flag, const RealRange& range);

// A program_options value for a numeric flag: parsed and range-checked as above when the flag is given, the
// range shown in --help as the value's name ("--micro-batch N>=1 (=4)"). T: int, int64_t or double.
template <typename T>
class RangedValue final : public po::typed_value<T> {
 public:
  using Bound = std::conditional_t<std::is_integral_v<T>, int64_t, double>;
  RangedValue(T* target, const Range<Bound>& range);
  // As typed_value's, shown as the user would type it ("3e-04", not "0.00029999999999999997").
  RangedValue* default_value(const T& value);
  void xparse(boost::any& store, const std::vector<std::string>& tokens) const override;

 private:
  Range<Bound> range_;
};

inline RangedValue<int>* Number(int* target, const IntRange& range) { return new RangedValue<int>(target, range); }
inline RangedValue<int64_t>* Number(int64_t* target, const IntRange& range) {
  return new RangedValue<int64_t>(target, range);
}
inline RangedValue<double>* Number(double* target, const RealRange& range) {
  return new RangedValue<double>(target, range);
}

// An enumerated flag: `text` must be one of `choices`; throws InputError naming `flag`, the text and the choices
// ("--format 'xml': not one of the choices (accepted: text|csv|json)").
void CheckChoice(const std::string& text, const std::string& flag, const std::vector<std::string>& choices);

// A program_options value for an enumerated flag: checked as above when the flag is given, the choices shown in
// --help as the value's name ("--format text|csv|json (=text)").
class ChoiceValue final : public po::typed_value<std::string> {
 public:
  ChoiceValue(std::string* target, std::vector<std::string> choices);
  ChoiceValue* default_value(const std::string& value);
  void xparse(boost::any& store, const std::vector<std::string>& tokens) const override;

 private:
  std::vector<std::string> choices_;
};

inline ChoiceValue* Choice(std::string* target, std::vector<std::string> choices) {
  return new ChoiceValue(target, std::move(choices));
}

// A rule between flags, checked on what the user typed: `flag` only means something when `other` is given (and,
// when `values` is not empty, holds one of them, or lists one of them in a comma-separated list: "--zipf-exponent
// goes with --distribution zipf", "--root goes with --ops broadcast|reduce|all"); or, with `excludes`, the two
// cannot be given together.
struct FlagRule {
  std::string flag;
  std::string other;
  std::vector<std::string> values;  // with a `needs` rule: what `other` must hold
  bool excludes = false;            // false: `flag` needs `other`; true: `flag` and `other` exclude each other
};
FlagRule Needs(std::string flag, std::string other, std::vector<std::string> values = {});
FlagRule Excludes(std::string flag, std::string other);

// Throws InputError for the first rule that what was given breaks.
void CheckFlagRules(const po::variables_map& given, const std::vector<FlagRule>& rules);

}  // namespace tb
