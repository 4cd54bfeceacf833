#include "flags.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "error.h"
#include "units.h"

namespace tb {
namespace {

std::string Shown(int64_t value) { return std::to_string(value); }
std::string Shown(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", value);
  return buffer;
}

// An integer bound at its type's limit (int's or int64's) is shown as no bound: "N>=1", not "1..2147483647".
template <typename T>
bool Unbounded(T bound, bool low) {
  if constexpr (std::is_integral_v<T>) {
    return low ? (bound == std::numeric_limits<int64_t>::lowest() || bound == std::numeric_limits<int>::lowest())
               : (bound == std::numeric_limits<int64_t>::max() || bound == std::numeric_limits<int>::max());
  }
  return bound == (low ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max());
}

// The end of the digits that start at `i`.
size_t SkipDigits(const std::string& text, size_t i) {
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  return i;
}

}  // namespace

bool IsDecimalNumber(const std::string& text, bool real) {
  const size_t sign = !text.empty() && text[0] == '-' ? 1 : 0;
  size_t i = SkipDigits(text, sign);
  size_t digits = i - sign;
  if (real && i < text.size() && text[i] == '.') {
    const size_t fraction = SkipDigits(text, i + 1);
    digits += fraction - (i + 1);
    i = fraction;
  }
  if (digits == 0) return false;
  if (real && i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    const size_t exponent = i + 1 + (i + 1 < text.size() && (text[i + 1] == '+' || text[i + 1] == '-') ? 1 : 0);
    i = SkipDigits(text, exponent);
    if (i == exponent) return false;
  }
  return i == text.size();
}

namespace {

template <typename T>
[[noreturn]] void Refuse(const std::string& text, const std::string& flag, const Range<T>& range, const char* what) {
  throw InputError(flag + " '" + text + "': " + what + " (accepted: " +
                   (std::is_integral_v<T> ? "a whole number " : "a number ") + range.Describe() + ")");
}

}  // namespace

template <typename T>
bool Range<T>::Contains(T value) const {
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(value)) return false;
  }
  const bool above = min_open ? value > min : value >= min;
  const bool below = max_open ? value < max : value <= max;
  return above && below;
}

template <typename T>
std::string Range<T>::Describe() const {
  const bool low = !Unbounded(min, true), high = !Unbounded(max, false);
  if (!low && !high) return "of any size";
  if (!high) return (min_open ? "> " : ">= ") + Shown(min);
  if (!low) return (max_open ? "< " : "<= ") + Shown(max);
  if (std::is_integral_v<T> && !min_open && !max_open) return Shown(min) + ".." + Shown(max);
  return std::string(min_open ? "in (" : "in [") + Shown(min) + ", " + Shown(max) + (max_open ? ")" : "]");
}

template struct Range<int64_t>;
template struct Range<double>;

int64_t ParseInteger(const std::string& raw, const std::string& flag, const IntRange& range) {
  const std::string text = Trim(raw);
  if (text.empty() || !IsDecimalNumber(text, false)) Refuse(raw, flag, range, "not a decimal whole number");
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || (value > range.max && Unbounded(range.max, false))) Refuse(raw, flag, range, "too large");
  if (end != text.data() + text.size() || !range.Contains(value)) Refuse(raw, flag, range, "out of range");
  return value;
}

double ParseReal(const std::string& raw, const std::string& flag, const RealRange& range) {
  const std::string text = Trim(raw);
  if (text.empty() || !IsDecimalNumber(text, true)) Refuse(raw, flag, range, "not a decimal number");
  const double value = std::strtod(text.c_str(), nullptr);
  if (!std::isfinite(value)) Refuse(raw, flag, range, "too large");
  if (!range.Contains(value)) Refuse(raw, flag, range, "out of range");
  return value;
}

std::vector<std::string> SplitFlagList(const std::string& text, const std::string& flag) {
  std::vector<std::string> items = SplitItems(text);
  for (const std::string& item : items) {
    if (item.empty()) {
      throw InputError(flag + " '" + text + "': " + (Trim(text).empty() ? "empty list" : "empty item in the list") +
                       " (items are separated by single commas, e.g. 1,2,4)");
    }
  }
  return items;
}

std::vector<int64_t> ParseIntegerList(const std::string& text, const std::string& flag, const IntRange& range) {
  std::vector<int64_t> values;
  for (const std::string& item : SplitFlagList(text, flag)) values.push_back(ParseInteger(item, flag, range));
  return values;
}

std::vector<double> ParseRealList(const std::string& text, const std::string& flag, const RealRange& range) {
  std::vector<double> values;
  for (const std::string& item : SplitFlagList(text, flag)) values.push_back(ParseReal(item, flag, range));
  return values;
}

template <typename T>
RangedValue<T>::RangedValue(T* target, const Range<Bound>& range) : po::typed_value<T>(target), range_(range) {
  if constexpr (std::is_integral_v<T>) {  // the variable's own type bounds the range too
    range_.min = std::max<int64_t>(range_.min, std::numeric_limits<T>::lowest());
    range_.max = std::min<int64_t>(range_.max, std::numeric_limits<T>::max());
  }
  std::string shown = range_.Describe();
  shown.erase(std::remove(shown.begin(), shown.end(), ' '), shown.end());
  if (shown.rfind("in", 0) == 0) shown = " in " + shown.substr(2);
  else if (shown.find("..") != std::string::npos) shown = " in " + shown;
  this->value_name(std::string(std::is_integral_v<T> ? "N" : "X") + shown);
}

template <typename T>
RangedValue<T>* RangedValue<T>::default_value(const T& value) {
  if constexpr (std::is_integral_v<T>) {
    po::typed_value<T>::default_value(value, std::to_string(value));
  } else {
    po::typed_value<T>::default_value(value, Shown(value));
  }
  return this;
}

template <typename T>
void RangedValue<T>::xparse(boost::any& store, const std::vector<std::string>& tokens) const {
  po::validators::check_first_occurrence(store);
  const std::string& token = po::validators::get_single_string(tokens);
  try {  // boost puts the flag's name in place of %canonical_option%
    if constexpr (std::is_integral_v<T>) {
      store = static_cast<T>(ParseInteger(token, "%canonical_option%", range_));
    } else {
      store = static_cast<T>(ParseReal(token, "%canonical_option%", range_));
    }
  } catch (const InputError& e) {
    po::validation_error error(po::validation_error::invalid_option_value);
    error.m_error_template = e.what();
    throw error;
  }
}

template class RangedValue<int>;
template class RangedValue<int64_t>;
template class RangedValue<double>;

void CheckChoice(const std::string& text, const std::string& flag, const std::vector<std::string>& choices) {
  if (std::find(choices.begin(), choices.end(), text) != choices.end()) return;
  throw InputError(flag + " '" + text + "': not one of the choices (accepted: " + JoinNames(choices, "|") + ")");
}

ChoiceValue::ChoiceValue(std::string* target, std::vector<std::string> choices)
    : po::typed_value<std::string>(target), choices_(std::move(choices)) {
  this->value_name(JoinNames(choices_, "|"));
}

ChoiceValue* ChoiceValue::default_value(const std::string& value) {
  if (std::find(choices_.begin(), choices_.end(), value) == choices_.end()) {
    throw std::invalid_argument("Choice: the default '" + value + "' is not one of " + JoinNames(choices_, "|"));
  }
  po::typed_value<std::string>::default_value(value);
  return this;
}

void ChoiceValue::xparse(boost::any& store, const std::vector<std::string>& tokens) const {
  po::validators::check_first_occurrence(store);
  const std::string& token = po::validators::get_single_string(tokens);
  try {  // boost puts the flag's name in place of %canonical_option%
    CheckChoice(token, "%canonical_option%", choices_);
  } catch (const InputError& e) {
    po::validation_error error(po::validation_error::invalid_option_value);
    error.m_error_template = e.what();
    throw error;
  }
  store = token;
}

FlagRule Needs(std::string flag, std::string other, std::vector<std::string> values) {
  return {std::move(flag), std::move(other), std::move(values), false};
}
FlagRule Excludes(std::string flag, std::string other) { return {std::move(flag), std::move(other), {}, true}; }

namespace {

// Whether `text` is one of `values`, or a comma-separated list holding one of them.
bool HoldsOneOf(const std::string& text, const std::vector<std::string>& values) {
  for (const std::string& item : SplitItems(text)) {
    if (std::find(values.begin(), values.end(), item) != values.end()) return true;
  }
  return false;
}

}  // namespace

void CheckFlagRules(const po::variables_map& given, const std::vector<FlagRule>& rules) {
  auto typed = [&](const std::string& name) { return given.count(name) > 0 && !given[name].defaulted(); };
  for (const FlagRule& rule : rules) {
    if (!typed(rule.flag)) continue;
    if (rule.excludes) {
      if (typed(rule.other)) throw InputError("--" + rule.flag + " and --" + rule.other + " cannot be given together");
      continue;
    }
    const bool present = rule.values.empty() ? typed(rule.other) : given.count(rule.other) > 0;
    const std::string held = present && !rule.values.empty() ? given[rule.other].as<std::string>() : "";
    if (present && (rule.values.empty() || HoldsOneOf(held, rule.values))) continue;
    throw InputError("--" + rule.flag + " goes with --" + rule.other +
                     (rule.values.empty() ? "" : " " + JoinNames(rule.values)) +
                     (present ? " (--" + rule.other + " is '" + held + "')" : " (not given)"));
  }
}

}  // namespace tb
