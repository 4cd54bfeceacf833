#!/usr/bin/env bash
# results/README.md's schema tables (between the schema:begin and schema:end markers) and results/analysis/schema_names.py
# are exactly what the declarations in results/model/schema.h generate, and its tables of cost's exports (between
# cost-schema:begin and cost-schema:end) what results/analysis/cost_schema.h declares, so none can drift from the code.
#   schema_doc_test.sh SCHEMA_DOC [--update]    (--update rewrites both files from the declarations)
set -uo pipefail
doc=$(realpath "$1"); update=${2:-}
results=$(cd "$(dirname "${BASH_SOURCE[0]}")/../results" && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"

readme=$results/README.md
"$doc" markdown >"$work/tables.md" || fail "schema_doc markdown failed"
"$doc" cost-markdown >"$work/cost_tables.md" || fail "schema_doc cost-markdown failed"
"$doc" python >"$work/names.py" || fail "schema_doc python failed"

# generated_block NAME SOURCE TABLES: results/README.md's block between the NAME:begin and NAME:end markers is
# TABLES (with --update: made so).
generated_block() {
  local name=$1 source=$2 tables=$3
  local begin="<!-- $name:begin (generated from $source: tests/schema_doc_test.sh --update) -->" end="<!-- $name:end -->"
  checks=$((checks + 1))
  if [[ $(grep -cxF "$begin" "$readme") -ne 1 || $(grep -cxF "$end" "$readme") -ne 1 ]]; then
    fail "results/README.md needs one line '$begin' and one line '$end'"
    return
  fi
  # The README with its generated block replaced by what the declarations generate now.
  awk -v begin="$begin" -v end="$end" -v tables="$tables" '
    $0 == begin { print; while ((getline line < tables) > 0) print line; skipping = 1; next }
    $0 == end { skipping = 0 }
    !skipping { print }' "$readme" >"$work/README.md"
  if [[ $update == --update ]]; then
    cp "$work/README.md" "$readme"
  else
    diff -u "$readme" "$work/README.md" >"$work/diff" ||
      fail "results/README.md's $name tables differ from $source (run tests/schema_doc_test.sh SCHEMA_DOC --update): $(head -30 "$work/diff")"
  fi
}
generated_block schema results/model/schema.h "$work/tables.md"
# The tables of cost's CSV and JSON exports, declared in results/analysis/cost_schema.h.
generated_block cost-schema results/analysis/cost_schema.h "$work/cost_tables.md"

checks=$((checks + 1))
if [[ $update == --update ]]; then
  cp "$work/names.py" "$results/analysis/schema_names.py"
else
  diff -u "$results/analysis/schema_names.py" "$work/names.py" >"$work/diff" ||
    fail "results/analysis/schema_names.py differs from results/model/schema.h (run tests/schema_doc_test.sh SCHEMA_DOC --update): $(head -30 "$work/diff")"
fi

# The generated module imports, and plots.py reads reports through it (no field name of its own).
checks=$((checks + 1))
/usr/bin/python3 -c "import sys; sys.path.insert(0, '$results/analysis'); import schema_names" ||
  fail "results/analysis/schema_names.py does not import"
# schema_names.point_ranks reads group names as ParsePointGroupName does.
names=(k1 k8 k123456789 k1234567890 k k0 kx k8x k-1 k8_throttle200 k8_throttle x8 train "")
checks=$((checks + 1))
"$doc" points "${names[@]}" >"$work/cpp" || fail "schema_doc points failed"
/usr/bin/python3 -c "
import sys; sys.path.insert(0, '$results/analysis'); import schema_names
for name in sys.argv[1:]:
    ranks = schema_names.point_ranks(name)
    print('none' if ranks is None else ranks)" "${names[@]}" >"$work/py"
diff "$work/cpp" "$work/py" >"$work/diff" || fail "point_ranks differs from ParsePointGroupName: $(paste -d' ' <(printf '%s\n' "${names[@]}") "$work/cpp" "$work/py")"
finish schema_doc_test
