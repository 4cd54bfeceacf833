#!/usr/bin/env bash
# Data-loader read throughput against fio on the same files with the same pattern, in one invocation:
# random positioned reads of one sample (record) each, as many fio jobs as loader workers, buffered and
# O_DIRECT. Prints both throughputs and loader/fio (target >= 0.9). Figures: tests/perf/README.md.
#   loader_vs_fio.sh BUILD_DIR [DATA_DIR]
# Environment: TB_PERF_TOKENS (dataset size, default 512M tokens = 1 GB), TB_PERF_SECONDS (per run, default 5),
# TB_PERF_ROUNDS (default 3: fio and the loader alternate, first one then the other; medians are printed),
# TB_PERF_WORKERS (default "1 2 4"), TB_PERF_RECORDS (record sizes in bytes, default "4096 65536"),
# TB_PERF_BATCHES (the loader's batch per configuration, default "1M 8"): a size with a suffix (K, M) is a batch
# of that many bytes (sequences = bytes / record), a plain number is sequences. The loader hands its consumer one
# batch at a time; a training step asks once per step (milliseconds to seconds), so 1 MiB batches keep the
# bench's hand-offs near that rate (thousands per second), while 8 records per batch measure the hand-off too
# (one consumer wake-up per batch, 100k+ per second with 4 KiB records).
# DATA_DIR defaults to BUILD_DIR/loader_vs_fio_data (a real disk: /tmp may be tmpfs, which refuses O_DIRECT); it
# is generated once and kept for the next invocation.
set -uo pipefail
if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 BUILD_DIR [DATA_DIR]" >&2
  exit 2
fi
build=$(cd "$1" && pwd) || exit 2
data=${2:-$build/loader_vs_fio_data}
tokens=${TB_PERF_TOKENS:-512M}
seconds=${TB_PERF_SECONDS:-5}
rounds=${TB_PERF_ROUNDS:-3}
workers_list=${TB_PERF_WORKERS:-1 2 4}
records=${TB_PERF_RECORDS:-4096 65536}
batches=${TB_PERF_BATCHES:-1M 8}
tb=$build/trainbench
bench=$build/tests/perf_loader_bench
fio=$(command -v fio) || { echo "fio not found (apt-get install fio)" >&2; exit 1; }
for exe in "$tb" "$bench"; do
  [[ -x $exe ]] || { echo "$exe not built (make trainbench perf_loader_bench)" >&2; exit 1; }
done

echo "# loader_vs_fio: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "# data: $data on $(df --output=source,fstype "$data" 2>/dev/null | tail -1 || df --output=source,fstype "$(dirname "$data")" | tail -1); $(fio --version); $(free -g | awk '/Mem:/{print $2}') GiB RAM"
if ! "$tb" data generate --dir "$data" --tokens "$tokens" --shard-tokens 100M --quiet >/dev/null 2>"$data.err"; then
  grep -q "already holds" "$data.err" || { cat "$data.err" >&2; exit 1; }
  echo "# reusing the dataset in $data"
fi
rm -f "$data.err"
files=$(ls "$data"/shard-*.tbs | paste -sd:)
echo "# dataset: $(ls "$data"/shard-*.tbs | wc -l) shards, $(du -sh "$data" | cut -f1)"
echo "# buffered: both read through a warm page cache (the dataset is read once first; fio --invalidate=0); direct: O_DIRECT"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg); $rounds rounds of $seconds s per tool and configuration"
cat "$data"/shard-*.tbs >/dev/null

fio_MBps() {  # direct bs jobs
  "$fio" --name=loader_vs_fio --filename="$files" --rw=randread --bs="$2" --ioengine=psync --direct="$1" \
    --numjobs="$3" --invalidate=0 --randrepeat=0 --time_based --runtime="$seconds" --group_reporting --output-format=json 2>/dev/null |
    python3 -c 'import json,sys; print("%.1f" % (json.load(sys.stdin)["jobs"][0]["read"]["bw_bytes"] / 1e6))'
}

sequences() {  # batch-spec record
  case $1 in
    *K) echo $(( ${1%K} * 1024 / $2 > 0 ? ${1%K} * 1024 / $2 : 1 )) ;;
    *M) echo $(( ${1%M} * 1048576 / $2 > 0 ? ${1%M} * 1048576 / $2 : 1 )) ;;
    *) echo "$1" ;;
  esac
}

loader_MBps() {  # direct record workers sequences
  local out
  out=$("$bench" "$data" $(($2 / 2 - 1)) "$4" "$3" $((2 * $3)) "$1" "$2" "$seconds") || return 1
  awk '{print $2}' <<<"$out"
}

median() { tr ' ' '\n' | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

printf "#%9s %8s %8s %6s %12s %12s %8s\n" mode record workers batch fio_MB/s loader_MB/s ratio
status=0
for direct in 0 1; do
  mode=$([[ $direct == 1 ]] && echo direct || echo buffered)
  for record in $records; do  # uint16 tokens and seq = record/2 - 1: one sample is exactly one record
    for workers in $workers_list; do
      fs=""
      declare -A ls_=()
      for ((round = 1; round <= rounds; ++round)); do
        # fio and the loader take turns going first.
        if ((round % 2)); then f=$(fio_MBps "$direct" "$record" "$workers") || f=""; fi
        for spec in $batches; do
          l=$(loader_MBps "$direct" "$record" "$workers" "$(sequences "$spec" "$record")") || l=""
          [[ -n $l ]] || { echo "a loader run failed ($mode, $record B, $workers workers, batch $spec)" >&2; status=1; }
          ls_[$spec]+=" $l"
        done
        if ! ((round % 2)); then f=$(fio_MBps "$direct" "$record" "$workers") || f=""; fi
        [[ -n $f ]] || { echo "a fio run failed ($mode, $record B, $workers workers)" >&2; status=1; }
        fs+=" $f"
      done
      f=$(median <<<"${fs# }")
      for spec in $batches; do
        l=$(median <<<"${ls_[$spec]# }")
        printf "%10s %8s %8s %6s %12.1f %12.1f %8.3f\n" "$mode" "$record" "$workers" "$(sequences "$spec" "$record")" \
          "$f" "$l" "$(echo "$l / $f" | bc -l)"
      done
      unset ls_
    done
  done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# commands: fio --rw=randread --bs=RECORD --ioengine=psync --direct=0|1 --numjobs=W --invalidate=0 --randrepeat=0"
echo "#             --time_based --runtime=$seconds --filename=<every shard, ':'-separated>"
echo "#           perf_loader_bench DIR SEQ=RECORD/2-1 BATCH WORKERS=W PREFETCH=2W DIRECT RECORD $seconds"
exit $status
