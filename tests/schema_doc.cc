// Prints the report schema as the Markdown of results/README.md ("markdown") or as results/analysis/schema_names.py
// ("python"), the tables of cost's exports as the Markdown of results/README.md ("cost-markdown"), or how
// ParsePointGroupName reads names ("points"); tests/schema_doc_test.sh compares them.
#include <iostream>
#include <optional>
#include <string>

#include "cost_schema.h"
#include "report.h"
#include "schema_doc.h"

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  if (what == "markdown") {
    std::cout << tb::schema::SchemaMarkdown();
  } else if (what == "python") {
    std::cout << tb::schema::SchemaPython();
  } else if (what == "cost-markdown") {
    std::cout << tb::cost_schema::CostSchemaMarkdown();
  } else if (what == "points") {
    // Each name's scaling-point rank count as ParsePointGroupName reads it ("none" for anything else), so that
    // the test can hold schema_names.point_ranks to it.
    for (int i = 2; i < argc; ++i) {
      const std::optional<tb::PointGroup> point = tb::ParsePointGroupName(argv[i]);
      std::cout << (point && point->throttle_MBps == 0 ? std::to_string(point->ranks) : "none") << "\n";
    }
  } else {
    std::cerr << "usage: schema_doc markdown|python|cost-markdown|points NAME...\n";
    return 2;
  }
  return 0;
}
