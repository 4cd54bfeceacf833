// Prints the report schema as the Markdown of results/README.md ("markdown") or as results/analysis/schema_names.py
// ("python"); tests/schema_doc_test.sh compares both files with it.
#include <iostream>
#include <string>

#include "schema_doc.h"

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  if (what == "markdown") {
    std::cout << tb::schema::SchemaMarkdown();
  } else if (what == "python") {
    std::cout << tb::schema::SchemaPython();
  } else {
    std::cerr << "usage: schema_doc markdown|python\n";
    return 2;
  }
  return 0;
}
