// The report schema (schema.h) as text for people and for Python: the Markdown tables of results/README.md
// ("Schema v1") and results/analysis/schema_names.py, the module of field names plots.py reads reports through. A test
// (tests/schema_doc_test.sh) checks that both files hold exactly this text, so the docs cannot drift from the code.
#pragma once

#include <string>

namespace tb::schema {

// Markdown: per group a heading, its description and a table of attributes, then each table's columns and each
// matrix. Placeholders stay as they are declared (`<op>_peak_busbw_GBps`), with their fixed keys listed.
std::string SchemaMarkdown();

// Python: one class per group whose attributes are the field names, one class per table with its columns
// (`point.steps.step_s == "step_s"`), and `name(field, key)` for names with a placeholder.
std::string SchemaPython();

}  // namespace tb::schema
