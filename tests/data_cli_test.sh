#!/usr/bin/env bash
# End-to-end tests of `trainbench data`: every bad input gets one line and exit 2 (alone and under mpiexec);
# existing shards are kept without --force; `data verify` lists each bad file (payload, header, dtype, unfinished
# write) and leaves the dataset as it was; the free-space check (on a small tmpfs when mounting is allowed);
# the dataset does not depend on the number of ranks that wrote it.
#   data_cli_test.sh TRAINBENCH MPIEXEC [MPIEXEC FLAGS...]
set -uo pipefail
tb=$1; shift; mpiexec=("$@")
work=$(mktemp -d); small=""
cleanup() { [[ -n $small ]] && umount "$small" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"

d="$work/tokens"
expect_error 2 "no subcommand given \(accepted: generate" -- "$tb" data
expect_error 2 "unknown subcommand 'generat' for trainbench data \(accepted: generate, verify\)" -- "$tb" data generat
expect_error 2 "--dir is required" -- "$tb" data generate --tokens 1M
expect_error 2 "--tokens is required" -- "$tb" data generate --dir "$d"
expect_error 2 "invalid count '1Q' for --tokens" -- "$tb" data generate --dir "$d" --tokens 1Q
expect_error 2 "invalid count '0' for --tokens: must be at least 1" -- "$tb" data generate --dir "$d" --tokens 0
expect_error 2 "invalid count '1.5' for --shard-tokens: not a whole number" -- "$tb" data generate --dir "$d" --tokens 1M --shard-tokens 1.5
expect_error 2 "--vocab '0': out of range" -- "$tb" data generate --dir "$d" --tokens 1M --vocab 0
expect_error 2 "--vocab 20000000 is too large for --distribution zipf" -- "$tb" data generate --dir "$d" --tokens 1M --vocab 20000000 --distribution zipf
expect_error 2 "--distribution 'normal': not one of the choices \(accepted: uniform\|zipf\)" -- "$tb" data generate --dir "$d" --tokens 1M --distribution normal
expect_error 2 "--zipf-exponent '0': out of range" -- "$tb" data generate --dir "$d" --tokens 1M --distribution zipf --zipf-exponent 0
expect_error 2 "at most 99999" -- "$tb" data generate --dir "$d" --tokens 1M --shard-tokens 1
expect_error 2 "unrecognised option '--bogus'" -- "$tb" data generate --dir "$d" --tokens 1M --bogus
expect_error 2 "cannot create --dir '/proc/x/tokens'" -- "$tb" data generate --dir /proc/x/tokens --tokens 1M
expect_error 2 "not enough space in --dir '$d': the dataset needs 2000000.041 GB" -- "$tb" data generate --dir "$d" --tokens 1000T --shard-tokens 100G
expect_error 2 "cannot write report" -- "$tb" data generate --dir "$d" --tokens 1M -o "$work/missing/r.h5"
expect_error 2 "invalid count '1Q' for --tokens" -- "${mpiexec[@]}" -n 2 "$tb" data generate --dir "$d" --tokens 1Q
expect_error 2 "no subcommand given" -- "${mpiexec[@]}" -n 2 "$tb" data
[[ -e $d && -n $(ls "$d") ]] && fail "a refused command left files in $d: $(ls "$d")"

checks=$((checks + 1))
"$tb" data generate --help | grep -c >/dev/null "SI suffixes K=1e3, M=1e6, G=1e9, T=1e12" || fail "generate --help does not explain the suffixes"
checks=$((checks + 1))
"$tb" data --help | grep -c >/dev/null "generate" || fail "data --help does not list generate"

# A dataset, then refusal to overwrite it, then --force with fewer shards leaves none of the old ones.
expect_ok "$tb" data generate --dir "$d" --tokens 2.5M --shard-tokens 1M --seed 5
grep -qE "^# wrote 2500000 tokens in 3 shards, 0.005 GB, to $d in" "$work/out" || fail "final line: $(cat "$work/out")"
checks=$((checks + 1))
[[ $(ls "$d") == $'shard-00000.tbs\nshard-00001.tbs\nshard-00002.tbs' ]] || fail "files: $(ls "$d")"
[[ $(stat -c %s "$d/shard-00002.tbs") -eq $((4096 + 500000 * 2)) ]] || fail "last shard size"
expect_error 2 "--dir '$d' already holds 3 token shard files; add --force to replace them" -- "$tb" data generate --dir "$d" --tokens 1M
expect_error 2 "already holds 3 token shard files" -- "${mpiexec[@]}" -n 2 "$tb" data generate --dir "$d" --tokens 1M
echo partial >"$d/shard-00007.tbs.tmp"  # a killed write's leftover goes with --force too
expect_ok "$tb" data generate --dir "$d" --tokens 1M --shard-tokens 1M --force --quiet
checks=$((checks + 1))
[[ $(ls "$d") == "shard-00000.tbs" ]] || fail "--force left old shards: $(ls "$d")"
[[ -z $(cat "$work/err") ]] || fail "--quiet printed progress: $(cat "$work/err")"

# Two ranks split the shards and write the same bytes one rank writes.
expect_ok "$tb" data generate --dir "$work/one" --tokens 3.5M --shard-tokens 1M --vocab 70000 --distribution zipf --seed 9
expect_ok "${mpiexec[@]}" -n 2 "$tb" data generate --dir "$work/two" --tokens 3.5M --shard-tokens 1M --vocab 70000 --distribution zipf --seed 9 -o "$work/two.h5"
checks=$((checks + 1))
for f in "$work"/one/*.tbs; do
  cmp -s "$f" "$work/two/$(basename "$f")" || fail "$(basename "$f") differs between 1 and 2 ranks"
done
[[ $(ls "$work/two" | wc -l) -eq 4 ]] || fail "2 ranks wrote $(ls "$work/two" | wc -l) shards, want 4"
[[ -s "$work/two.h5" ]] || fail "no report"

# --- data verify: a good dataset passes; each bad file is a line, the verdict one error line and exit 2 -----------------
expect_ok "$tb" data verify "$work/one"
checks=$((checks + 1))
grep -qE "^# checked 4 shards, 0.014 GB of payload in [0-9.]+ s \([0-9.]+ GB/s\): all good$" "$work/out" ||
  fail "verify of a good dataset: $(cat "$work/out")"
expect_ok "${mpiexec[@]}" -n 2 "$tb" data verify --dir "$work/two" --threads 1 --quiet
checks=$((checks + 1))
[[ $(cat "$work/out") == "# checked 4 shards,"*"all good" ]] || fail "verify --quiet printed more: $(cat "$work/out")"
v=$work/damaged; cp -r "$work/one" "$v"
printf 'x' | dd of="$v/shard-00001.tbs" bs=1 seek=5000 conv=notrunc status=none  # a payload byte
printf 'x' | dd of="$v/shard-00002.tbs" bs=1 seek=33 conv=notrunc status=none    # the vocab: the header CRC fails
cp "$d/shard-00000.tbs" "$v/shard-00004.tbs"                                     # uint16 among uint32 shards
echo partial >"$v/shard-00005.tbs.tmp"                                           # a killed write
sums=$(cd "$v" && md5sum *)
for launch in "" "${mpiexec[*]} -n 2"; do
  expect_error 2 "data directory '$v' is damaged: 4 bad files \(listed above; the first: $v/shard-00001.tbs: payload checksum mismatch" \
    -- $launch "$tb" data verify "$v" --threads 2
  checks=$((checks + 1))
  [[ $(grep -c "^$v/shard-0000[1245].tbs" "$work/out") -eq 4 ]] || fail "verify ($launch): want 4 bad-file lines: $(cat "$work/out")"
  grep -q "^$v/shard-00002.tbs: header checksum mismatch at byte 40" "$work/out" || fail "verify: header line"
  grep -q "^$v/shard-00004.tbs: dtype uint16, vocab 50257 differ from $v/shard-00000.tbs (uint32, vocab 70000)" "$work/out" ||
    fail "verify: dtype line"
  grep -q "^$v/shard-00005.tbs.tmp: an unfinished shard" "$work/out" || fail "verify: unfinished-write line"
  grep -qE "^# checked 5 shards, .*: 4 bad files$" "$work/out" || fail "verify: summary line: $(tail -1 "$work/out")"
done
checks=$((checks + 1))
[[ $(cd "$v" && md5sum *) == "$sums" ]] || fail "data verify changed the dataset"
mkdir -p "$work/empty"
expect_error 2 "data directory '$work/empty' holds no token shards" -- "$tb" data verify "$work/empty"
expect_error 2 "data directory '$work/nothing' does not exist" -- "$tb" data verify "$work/nothing"
expect_error 2 "no dataset given \(usage: trainbench data verify DIR\)" -- "$tb" data verify
expect_error 2 "--threads '0': out of range \(accepted: a whole number 1\.\.256\)" -- "$tb" data verify "$v" --threads 0
expect_error 2 "data verify checks one dataset: give its directory once" -- "${mpiexec[@]}" -n 2 "$tb" data verify "$v" "$d"
checks=$((checks + 1))
"$tb" data verify --help | grep -c >/dev/null "Exit code 0: the dataset is good; 2: it is damaged" || fail "verify --help"

# --- the listing data verify and train's loader share: shards are numbered from 0 without a gap, and each is a
# regular file or a symbolic link to one; anything else named like a shard is named, with what it is -------------------
s=$work/four; expect_ok "$tb" data generate --dir "$s" --tokens 40K --shard-tokens 10K --vocab 4096 --quiet
train=(train --model tiny --seq 32 --micro-batch 2 --warmup-steps 1 --steps 2 --quiet)
g=$work/gap; cp -r "$s" "$g"; rm "$g/shard-00001.tbs"  # a middle shard deleted
missing="$g/shard-00001.tbs: missing, though the shards go up to shard-00003.tbs \(deleted, or never written\)"
for launch in "" "${mpiexec[*]} -n 2"; do
  expect_error 2 "data directory '$g' is damaged: 1 bad files \(listed above; the first: $missing" -- \
    $launch "$tb" data verify "$g"
  checks=$((checks + 1))
  grep -qE "^$missing" "$work/out" || fail "verify ($launch): no line for the missing shard: $(cat "$work/out")"
done
expect_error 2 "^trainbench: error: $missing" -- "${mpiexec[@]}" -n 2 "$tb" "${train[@]}" --data "$g" -o "$work/gap.h5"
checks=$((checks + 1))
grep -q "^step " "$work/out" && fail "a missing shard: steps ran before the refusal"
[[ -e $work/gap.h5 ]] && fail "a missing shard: a report was written"
cp -r "$s" "$work/gaps"; rm "$work/gaps"/shard-0000[12].tbs
expect_error 2 "the first: $work/gaps/shard-00001.tbs .. shard-00002.tbs: missing \(2 shards\), though the shards go up to shard-00003.tbs" \
  -- "$tb" data verify "$work/gaps"
# A FIFO, a directory, a dangling link and a link to a directory, each named like a shard: one line naming it and
# what it is; the FIFO is never opened (it would block the read).
n=$work/named; cp -r "$s" "$n"; rm "$n/shard-00001.tbs" "$n/shard-00002.tbs"
mkfifo "$n/shard-00001.tbs"; mkdir "$n/shard-00002.tbs"
expect_error 2 "the first: $n/shard-00001.tbs: not a token shard: it is a FIFO, not a regular file" -- "$tb" data verify "$n"
checks=$((checks + 1))
grep -q "^$n/shard-00002.tbs: not a token shard: it is a directory$" "$work/out" || fail "verify: directory line: $(cat "$work/out")"
expect_error 2 "^trainbench: error: $n/shard-00001.tbs: not a token shard: it is a FIFO, not a regular file \(and 1 more problems" \
  -- "$tb" "${train[@]}" --data "$n"
l=$work/linked; mkdir "$l"
ln -s "$s/shard-00000.tbs" "$l/shard-00000.tbs"; ln -s ../four/shard-00001.tbs "$l/shard-00001.tbs"  # links are followed
cp "$s/shard-00002.tbs" "$s/shard-00003.tbs" "$l/"
expect_ok "$tb" data verify "$l" --quiet
expect_out "^# checked 4 shards, .*: all good$"
expect_ok "${mpiexec[@]}" -n 2 "$tb" "${train[@]}" --data "$l"
ln -s "$work/nowhere.tbs" "$l/shard-00004.tbs"
expect_error 2 "the first: $l/shard-00004.tbs: a symbolic link to '$work/nowhere.tbs', which does not exist\)" -- \
  "$tb" data verify "$l"
rm "$l/shard-00004.tbs"; ln -s "$work" "$l/shard-00004.tbs"
expect_error 2 "^trainbench: error: $l/shard-00004.tbs: a symbolic link to '$work', not to a token shard: it is a directory$" \
  -- "$tb" "${train[@]}" --data "$l"
# --force replaces shard files and links, not a directory named like one (refused before any write).
expect_error 2 "--force replaces shard files, but '$n/shard-00002.tbs' is a directory; move it out of --dir" -- \
  "$tb" data generate --dir "$n" --tokens 10K --force
checks=$((checks + 1))
[[ -e $n/shard-00000.tbs && -d $n/shard-00002.tbs ]] || fail "the refused --force changed $n: $(ls "$n")"

# The free-space check on a real small filesystem.
checks=$((checks + 1))
mkdir -p "$work/small"
if mount -t tmpfs -o size=1m tmpfs "$work/small" 2>/dev/null; then
  small="$work/small"
  expect_error 2 "not enough space in --dir '$small': the dataset needs 0.002 GB \(1000000 tokens x 2 B \+ headers\), the filesystem has 0.001 GB free" \
    -- "$tb" data generate --dir "$small" --tokens 1M
  [[ -z $(ls "$small") ]] || fail "the refused run wrote to $small"
else
  echo "SKIP: cannot mount a tmpfs here (needs root and mount permission); free-space check tested with 1000T only"
fi

finish data_cli_test
