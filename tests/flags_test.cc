// The one grammar and range check of numeric flags, the choices of enumerated flags, lists and rules between flags (src/core/flags.h), through the
// same program_options parsing every command uses.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "error.h"
#include "flags.h"
#include "units.h"

namespace tb {
namespace {

std::string InputErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  } catch (const po::error& e) {
    return std::string("po: ") + e.what();
  }
  return "";
}

TEST(ParseInteger, DecimalOnly) {
  EXPECT_EQ(ParseInteger("12", "--n", IntRange::AtLeast(1)), 12);
  EXPECT_EQ(ParseInteger(" -3 ", "--n", IntRange{}), -3);
  for (const char* bad : {"0x10", "010x", "1e3", "1.0", "+", "-", "", "12 3", "inf", "nan", "٣"}) {
    EXPECT_NE(InputErrorOf([&] { ParseInteger(bad, "--n", IntRange{}); }).find("--n '"), std::string::npos) << bad;
  }
  EXPECT_NE(InputErrorOf([&] { ParseInteger("99999999999999999999", "--n", IntRange{}); }).find("too large"),
            std::string::npos);
}

TEST(ParseInteger, RangeInTheMessage) {
  EXPECT_EQ(InputErrorOf([] { ParseInteger("0", "--steps", IntRange::AtLeast(1)); }),
            "--steps '0': out of range (accepted: a whole number >= 1)");
  EXPECT_EQ(InputErrorOf([] { ParseInteger("5000", "--layers", IntRange::Between(1, 4096)); }),
            "--layers '5000': out of range (accepted: a whole number 1..4096)");
  EXPECT_EQ(ParseInteger("4096", "--layers", IntRange::Between(1, 4096)), 4096);
}

TEST(ParseReal, FiniteDecimalsOnly) {
  EXPECT_DOUBLE_EQ(ParseReal("3e-4", "--lr", RealRange::AboveUpTo(0, 1)), 3e-4);
  EXPECT_DOUBLE_EQ(ParseReal(".5", "--x", RealRange{}), 0.5);
  EXPECT_DOUBLE_EQ(ParseReal("300E9", "--x", RealRange{}), 300e9);
  for (const char* bad : {"inf", "-inf", "nan", "NaN", "infinity", "0x1p3", "1e", "1e+", ".", "1.2.3", "1,5", ""}) {
    EXPECT_NE(InputErrorOf([&] { ParseReal(bad, "--x", RealRange{}); }).find("not a decimal number"),
              std::string::npos) << bad;
  }
  EXPECT_NE(InputErrorOf([] { ParseReal("1e999", "--x", RealRange{}); }).find("too large"), std::string::npos);
  EXPECT_EQ(InputErrorOf([] { ParseReal("0", "--lr", RealRange::AboveUpTo(0, 1)); }),
            "--lr '0': out of range (accepted: a number in (0, 1])");
  EXPECT_NE(InputErrorOf([] { ParseReal("1", "--share", RealRange::Inside(0, 1)); }).find("in (0, 1)"),
            std::string::npos);
}

TEST(Range, Describe) {
  EXPECT_EQ(IntRange::AtLeast(0).Describe(), ">= 0");
  EXPECT_EQ(RealRange::Above(0).Describe(), "> 0");
  EXPECT_EQ(RealRange::Between(0, 1e7).Describe(), "in [0, 1e+07]");
  EXPECT_EQ(IntRange{}.Describe(), "of any size");
  EXPECT_FALSE(RealRange{}.Contains(std::nan("")));
  EXPECT_FALSE(RealRange{}.Contains(INFINITY));
}

TEST(SplitItems, TrimsAndKeepsEmptyItems) {
  EXPECT_EQ(SplitItems(" a,\tb ,,c"), (std::vector<std::string>{"a", "b", "", "c"}));
  EXPECT_EQ(SplitItems(""), (std::vector<std::string>{""}));
}

TEST(SplitFlagList, EmptyItemsAreRefused) {
  EXPECT_EQ(SplitFlagList(" a, b ,c ", "--ops"), (std::vector<std::string>{"a", "b", "c"}));
  for (const char* bad : {"", " ", "a,,b", "a,", ",a", ","}) {
    EXPECT_NE(InputErrorOf([&] { SplitFlagList(bad, "--ops"); }).find("--ops '"), std::string::npos) << bad;
  }
  EXPECT_EQ(ParseIntegerList("1,2,4", "--scaling", IntRange::AtLeast(1)), (std::vector<int64_t>{1, 2, 4}));
  EXPECT_NE(InputErrorOf([] { ParseRealList("1,x", "--r", RealRange{}); }).find("'x'"), std::string::npos);
}

// Parses `args` as a command would (options, then rules); the message of what was refused, or "".
struct Parsed {
  int steps = 20;
  double lr = 3e-4;
  std::string model = "gpt2-124m";
  int heads = 0;
  bool raw = false;
  std::string data;
  std::string format = "text";
};
std::string ParseArgs(std::vector<std::string> args, Parsed& p, const std::vector<FlagRule>& rules = {}) {
  po::options_description options;
  options.add_options()("steps", Number(&p.steps, IntRange::AtLeast(1))->default_value(p.steps), "")
      ("lr", Number(&p.lr, RealRange::AboveUpTo(0, 1))->default_value(p.lr), "")
      ("model", po::value(&p.model)->default_value(p.model), "")
      ("heads", Number(&p.heads, IntRange::Between(1, 64)), "")
      ("raw", po::bool_switch(&p.raw), "")
      ("data", po::value(&p.data), "")
      ("format", Choice(&p.format, {"text", "csv", "json"})->default_value(p.format), "");
  return InputErrorOf([&] {
    po::variables_map given;
    po::store(po::command_line_parser(args).options(options).run(), given);
    po::notify(given);
    CheckFlagRules(given, rules);
  });
}

TEST(Number, ParsesChecksAndNamesTheFlag) {
  Parsed p;
  EXPECT_EQ(ParseArgs({"--steps", "7", "--lr", "1e-3"}, p), "");
  EXPECT_EQ(p.steps, 7);
  EXPECT_DOUBLE_EQ(p.lr, 1e-3);
  Parsed q;
  EXPECT_EQ(ParseArgs({}, q), "");
  EXPECT_EQ(q.steps, 20);
  EXPECT_EQ(ParseArgs({"--lr", "inf"}, q), "po: --lr 'inf': not a decimal number (accepted: a number in (0, 1])");
  EXPECT_EQ(ParseArgs({"--steps", "0"}, q), "po: --steps '0': out of range (accepted: a whole number >= 1)");
  EXPECT_EQ(ParseArgs({"--steps", "3000000000"}, q),
            "po: --steps '3000000000': too large (accepted: a whole number >= 1)");  // past int
  EXPECT_NE(ParseArgs({"--steps", "1", "--steps", "2"}, q).find("more than once"), std::string::npos);
}

TEST(Number, HelpShowsTheRangeAndTheDefault) {
  int steps = 20;
  double lr = 3e-4;
  po::options_description options;
  options.add_options()("steps", Number(&steps, IntRange::AtLeast(1))->default_value(steps), "steps")
      ("lr", Number(&lr, RealRange::AboveUpTo(0, 1))->default_value(lr), "rate");
  std::ostringstream help;
  help << options;
  EXPECT_NE(help.str().find("--steps N>=1 (=20)"), std::string::npos) << help.str();
  EXPECT_NE(help.str().find("--lr X in (0,1] (=0.0003)"), std::string::npos) << help.str();
}

TEST(Choice, AcceptsOnlyItsChoicesAndNamesTheFlag) {
  Parsed p;
  EXPECT_EQ(ParseArgs({"--format", "csv"}, p), "");
  EXPECT_EQ(p.format, "csv");
  Parsed q;
  EXPECT_EQ(ParseArgs({}, q), "");
  EXPECT_EQ(q.format, "text");
  // The numeric flags' line: the flag, the text as typed, what is accepted.
  EXPECT_EQ(ParseArgs({"--format", "xml"}, q), "po: --format 'xml': not one of the choices (accepted: text|csv|json)");
  EXPECT_EQ(ParseArgs({"--format", "CSV"}, q), "po: --format 'CSV': not one of the choices (accepted: text|csv|json)");
  EXPECT_EQ(ParseArgs({"--format", " csv"}, q), "po: --format ' csv': not one of the choices (accepted: text|csv|json)");
  EXPECT_EQ(ParseArgs({"--format", ""}, q), "po: --format '': not one of the choices (accepted: text|csv|json)");
  EXPECT_NE(ParseArgs({"--format", "csv", "--format", "json"}, q).find("more than once"), std::string::npos);
  // A rule on a Choice flag reads its value as any string flag's.
  EXPECT_EQ(ParseArgs({"--data", "d", "--format", "json"}, q, {Needs("data", "format", {"csv"})}),
            "--data goes with --format csv (--format is 'json')");
  EXPECT_EQ(InputErrorOf([] { CheckChoice("x", "--mode", {"a", "b"}); }),
            "--mode 'x': not one of the choices (accepted: a|b)");
  EXPECT_EQ(InputErrorOf([] { CheckChoice("b", "--mode", {"a", "b"}); }), "");
}

TEST(Choice, HelpShowsTheChoicesAndTheDefault) {
  std::string format = "text", mode;
  po::options_description options;
  options.add_options()("format", Choice(&format, {"text", "csv", "json"})->default_value(format), "layout")
      ("mode", Choice(&mode, {"weak", "strong"}), "scaling");
  std::ostringstream help;
  help << options;
  EXPECT_NE(help.str().find("--format text|csv|json (=text)"), std::string::npos) << help.str();
  EXPECT_NE(help.str().find("--mode weak|strong "), std::string::npos) << help.str();
  std::unique_ptr<ChoiceValue> value(Choice(&mode, {"weak", "strong"}));
  EXPECT_THROW(value->default_value("linear"), std::invalid_argument);  // a declaration's own mistake
}

TEST(FlagRules, NeedsAndExcludes) {
  const std::vector<FlagRule> rules = {Needs("heads", "model", {"custom"}), Needs("raw", "data"),
                                       Excludes("steps", "heads")};
  Parsed p;
  EXPECT_EQ(ParseArgs({"--heads", "4"}, p, rules), "--heads goes with --model custom (--model is 'gpt2-124m')");
  EXPECT_EQ(ParseArgs({"--model", "custom", "--heads", "4"}, p, rules), "");
  EXPECT_EQ(ParseArgs({"--raw"}, p, rules), "--raw goes with --data (not given)");
  EXPECT_EQ(ParseArgs({"--raw", "--data", "d"}, p, rules), "");
  EXPECT_EQ(ParseArgs({"--model", "custom", "--steps", "3", "--heads", "2"}, p, rules),
            "--steps and --heads cannot be given together");
  EXPECT_EQ(ParseArgs({"--model", "custom"}, p, rules), "");  // a default never breaks a rule
}

TEST(FlagRules, NeedsOneItemOfAList) {
  const std::vector<FlagRule> rules = {Needs("heads", "model", {"broadcast", "reduce"})};
  Parsed p;
  EXPECT_EQ(ParseArgs({"--model", "all_reduce, reduce", "--heads", "2"}, p, rules), "");
  EXPECT_EQ(ParseArgs({"--model", "all_reduce,reducer", "--heads", "2"}, p, rules),
            "--heads goes with --model broadcast|reduce (--model is 'all_reduce,reducer')");
}

}  // namespace
}  // namespace tb
