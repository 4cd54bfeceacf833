# Shared by the CLI test scripts (sourced): failure counting and the checks they all make. The sourcing script
# sets `work` (a scratch directory) first.
failures=0; checks=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect_error CODE PATTERN -- COMMAND...: the exit code, stderr matching PATTERN, and exactly one line of it
# ours (mpiexec adds its own banner about the non-zero exit, which we do not control); no benchmark rows before.
expect_error() {
  local code=$1 pattern=$2; shift 3
  checks=$((checks + 1))
  timeout 120 "$@" >"$work/out" 2>"$work/err"; local rc=$?
  local lines; lines=$(grep -c '^trainbench:' "$work/err")
  if [[ $rc -ne $code ]]; then fail "$* -> exit $rc, want $code; stderr: $(cat "$work/err")"; return; fi
  if ! grep -qE -- "$pattern" "$work/err"; then fail "$* -> stderr lacks /$pattern/: $(cat "$work/err")"; return; fi
  if [[ $lines -ne 1 ]]; then fail "$* -> $lines trainbench lines on stderr, want 1: $(cat "$work/err")"; return; fi
  if grep -qE '^ +[0-9]+ ' "$work/out"; then fail "$* -> benchmark rows printed before the error"; fi
}

# expect_ok COMMAND...: exit 0 (stdout in $work/out, stderr in $work/err).
expect_ok() {
  checks=$((checks + 1))
  timeout 300 "$@" >"$work/out" 2>"$work/err" ||
    fail "$* -> exit $?; stderr: $(tail -5 "$work/err"); stdout's failing lines: $(grep -E '^ +(fail|unknown) ' "$work/out" | head -10)"
}

# expect_out PATTERN: the last command's stdout ($work/out) has a line matching the extended regex.
expect_out() {
  checks=$((checks + 1))
  grep -qE -- "$1" "$work/out" || fail "stdout lacks /$1/: $(head -c 3000 "$work/out")"
}

# expect_error_unchanged CODE PATTERN FILE -- COMMAND...: expect_error, and FILE (an input) byte for byte as before.
expect_error_unchanged() {
  local code=$1 pattern=$2 file=$3; shift 4
  local before; before=$(md5sum <"$file")
  expect_error "$code" "$pattern" -- "$@"
  [[ $(md5sum <"$file") == "$before" ]] || fail "$* changed its input $file"
}

# without SRC DST ITEM: DST is a copy of the report SRC less ITEM: a group or dataset ("train/k2") or an attribute
# ("@status" at the root, "train/k2@tokens_per_s"); deleted with h5py from Debian's /usr/bin/python3.
without() {
  cp "$1" "$2" && /usr/bin/python3 - "$2" "$3" <<'EOF' || fail "cannot delete $3 from $2 (needs /usr/bin/python3 with h5py)"
import sys, h5py
path, item = sys.argv[1], sys.argv[2]
where, _, attribute = item.partition("@")
with h5py.File(path, "r+") as f:
    if attribute:
        del f[where or "/"].attrs[attribute]
    else:
        del f[where]
EOF
}

# with_notes FILE: FILE's table rows, each with the '#' lines under it (its message, or text too wide for the console,
# which report and validate print indented under their row) joined on, one line per row; other lines as they are.
with_notes() {
  awk '/^#  +/ && row != "" { sub(/^# +/, ""); row = row " " $0; next }
       { if (row != "") print row; row = ""; if (/^ /) row = $0; else print }
       END { if (row != "") print row }' "$1"
}

# finish NAME: the tally; the script's exit status.
# resign_manifest: the checkpoint manifest on stdin, without its crc32c line, written to stdout with that line made
# afresh (a manifest edited to look like an older trainbench's).
resign_manifest() {
  python3 -c '
import sys
text = sys.stdin.buffer.read()
crc = 0xFFFFFFFF
for byte in text:
    crc ^= byte
    for _ in range(8):
        crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
sys.stdout.buffer.write(text + b"crc32c %08x\n" % (crc ^ 0xFFFFFFFF))'
}

finish() {
  echo "$1: $checks checks, $failures failed"
  [[ $failures -eq 0 ]]
}
