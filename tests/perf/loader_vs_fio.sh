#!/usr/bin/env bash
# Data-loader read throughput against fio on the same files with the same pattern, in one invocation: random
# positioned reads of one sample (record) each, as many fio jobs as loader workers: buffered (pread through the page
# cache: --read pread), mmap (--read mmap, against fio --ioengine=mmap) and O_DIRECT. Prints both
# throughputs and loader/fio (target >= 0.9), a raw baseline (perf_loader_bench's ENGINE raw: the same reads by W
# threads into two batch buffers and a consumer that waits for each batch as the loader's does, no order among the
# reads: the floor of any loader that keeps its batches and hands them over), the share of the cores each kept
# busy, and a verdict per cell naming what set the pace. Ratios are the median over rounds of each round's ratio
# (the tools alternate within a round; this VM flips between fast and slow states). Figures: tests/perf/README.md.
#   loader_vs_fio.sh BUILD_DIR [DATA_DIR]
# Environment: TB_PERF_TOKENS (dataset size, default 512M tokens = 1 GB), TB_PERF_SECONDS (per run, default 5),
# TB_PERF_ROUNDS (default 3: fio and the loader alternate, first one then the other; medians are printed),
# TB_PERF_MODES (default "buffered mmap direct"),
# TB_PERF_WORKERS (default "1 2 4"), TB_PERF_RECORDS (record sizes in bytes, default "4096 65536"),
# TB_PERF_BATCHES (the loader's batch per configuration, default "1M"): a size with a suffix (K, M) is a batch
# of that many bytes (sequences = bytes / record), a plain number is sequences. The loader hands its consumer one
# batch at a time; a training step asks once per step (milliseconds to seconds), so 1 MiB batches keep the
# bench's hand-offs near that rate (thousands per second), while 8 records per batch measure the hand-off too
# (one consumer wake-up per batch, 100k+ per second with 4 KiB records).
# Buffers: each pair is measured twice, like with like: fio's default buffers and the loader's ring on plain
# 4 KiB pages (the target comparison), then both on 2 MiB huge pages (fio --iomem=shmhuge, the loader's default
# ring). fio needs reserved hugetlb pages for that: with TB_PERF_RESERVE_HUGEPAGES=1 (root) the script adds 16 to
# vm.nr_hugepages for the run and restores it; without free ones the huge-page columns say "-".
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
batches=${TB_PERF_BATCHES:-1M}
modes=${TB_PERF_MODES:-buffered mmap direct}
for mode in $modes; do
  [[ $mode =~ ^(buffered|mmap|direct)$ ]] ||
    { echo "TB_PERF_MODES: '$mode' is none of buffered, mmap, direct" >&2; exit 2; }
done
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
echo "# buffered, mmap: both read through a warm page cache (the dataset is read once first; fio --invalidate=0); direct: O_DIRECT"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg); $rounds rounds of $seconds s per tool and configuration"
cat "$data"/shard-*.tbs >/dev/null
if [[ ${TB_PERF_RESERVE_HUGEPAGES:-0} == 1 ]]; then
  old_hugepages=$(cat /proc/sys/vm/nr_hugepages)
  if echo $((old_hugepages + 16)) >/proc/sys/vm/nr_hugepages 2>/dev/null; then
    trap 'echo "$old_hugepages" >/proc/sys/vm/nr_hugepages' EXIT
  else
    echo "# cannot reserve huge pages (not root?): the huge-page fio runs are skipped" >&2
  fi
fi
max_workers=$(tr ' ' '\n' <<<"$workers_list" | sort -n | tail -1)
free_huge=$(awk '/HugePages_Free/{print $2}' /proc/meminfo)
fio_huge=$([[ ${free_huge:-0} -ge $max_workers ]] && echo 1 || echo 0)
echo "# huge pages: transparent huge pages $(sed 's/.*\[\(.*\)\].*/\1/' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo unknown) (the loader's ring); ${free_huge:-0} free hugetlb pages (fio --iomem=shmhuge)$([[ $fio_huge == 1 ]] || echo ": too few, huge-page fio runs skipped")"

fio_MBps() {  # direct bs jobs iomem [engine]
  "$fio" --name=loader_vs_fio --filename="$files" --rw=randread --bs="$2" --ioengine="${5:-psync}" --direct="$1" \
    --iomem="$4" \
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

loader_MBps() {  # mode record workers sequences huge [engine]
  local out
  out=$("$bench" "$data" $(($2 / 2 - 1)) "$4" "$3" $((2 * $3)) "$1" "$2" "$seconds" "$5" "${6:-loader}") || return 1
  awk '{print $2}' <<<"$out"
}

median() { tr ' ' '\n' | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

printf "#%9s %8s %8s %6s %10s %10s %7s %10s %7s %10s %10s %7s %10s %7s  %s\n" mode record workers batch fio loader ratio \
  raw l/raw fio_huge loader_huge ratio busy l/psync "verdict (4 KiB pages)"
printf "#%34s %48s %29s %12s\n" "" "MB/s, 4 KiB-page buffers" "MB/s, 2 MiB-page buffers" "fio/loader"
status=0
# The median over rounds of runs[$2] / runs[$1], round by round (the pairs ran next to each other); "-" if not run.
ratio() {
  [[ -n ${runs[$1]:-} && -n ${runs[$2]:-} ]] || { echo -; return; }
  paste <(tr ' ' '\n' <<<"${runs[$1]# }") <(tr ' ' '\n' <<<"${runs[$2]# }") | awk '{ printf "%.4f\n", $2 / $1 }' |
    median | xargs printf "%.3f"
}
declare -A runs busy  # "key" -> the MB/s of each round, and the share of the cores busy during it
# Busy and total jiffies of all cores so far (/proc/stat: busy = all but idle and iowait).
jiffies() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; ++i) t += $i; print t - $5 - $6, t }' /proc/stat; }
run() {  # key command...: one measurement into runs[key], the cores' busy share during it into busy[key]
  local v b0 t0 b1 t1
  read -r b0 t0 < <(jiffies)
  v=$("${@:2}") && [[ -n $v ]] || { echo "a run failed: $1 ($mode, $record B, $workers workers)" >&2; status=1; return; }
  read -r b1 t1 < <(jiffies)
  runs[$1]+=" $v"
  busy[$1]+=" $(awk -v b=$((b1 - b0)) -v t=$((t1 - t0)) 'BEGIN { printf "%.2f", (t > 0) ? b / t : 0 }')"
}
# The target: the loader >= 0.9 of fio reading through psync, the standard reader's rate (l/psync: for buffered and
# direct the ratio column itself; for mmap the loader's --read mmap against fio psync buffered, run in the same round,
# while the ratio column compares it with fio's own mmap engine, like with like).
# Who set the pace of a cell: met (l/psync >= 0.9); "memory" when the loader reaches >= 0.9 of the raw
# baseline and the raw baseline itself falls short of 0.9 of fio (reads that must land in batch buffers and be
# handed over, not in one cache-resident buffer as fio's, run no faster on this machine); "the cores" when the W
# workers and the consumer outnumber the cores and kept them >= 90 % busy: fio runs W threads, the loader W + 1,
# and a consumer with no core of its own is woken (a futex wake, a preempted worker) once per batch instead of
# polling for it; "more workers than cores" when W exceeds the cores and they were not kept busy: the loader hands
# batches out in order, so a worker descheduled for its time slice holds up its batch while the others read ahead
# to the prefetch limit and wait (fio's threads never wait for one another). Under O_DIRECT the cores and the memory
# are not what sets the pace: a cell whose loader reaches >= 0.9 of raw is "the device" (the disk's rate moved
# between the runs; raw/fio beside it). Else the loader itself, with loader/raw and raw/fio beside it (what each
# part of the gap is).
verdict() {  # loader/psync loader/raw raw/fio workers loader-busy-share mode
  [[ $1 == - ]] && { echo -; return; }
  awk -v r="$1" -v w="$2" -v f="$3" -v n="$4" -v b="$5" -v mode="$6" -v cores="$(nproc)" 'BEGIN {
    if (r >= 0.9) print "met"
    else if (mode == "direct" && w != "-" && w >= 0.9) printf "NOT met: the device (raw/fio %s)\n", f
    else if (mode != "direct" && n + 1 > cores && b != "-" && b >= 0.9)
      printf "NOT met: the cores (%d workers + the consumer on %d)\n", n, cores
    else if (mode != "direct" && n > cores) print "NOT met: more workers than cores (" cores ")"
    else if (mode != "direct" && w != "-" && w >= 0.9 && f != "-" && f < 0.9) print "NOT met: memory"
    else printf "NOT met: the loader (l/raw %s, raw/fio %s)\n", w, f }'
}
fio_runs() {
  run fio fio_MBps "$direct" "$record" "$workers" malloc "$engine"
  if [[ $fio_huge == 1 ]]; then run fio_huge fio_MBps "$direct" "$record" "$workers" shmhuge "$engine"; fi
  if [[ $mode == mmap ]]; then run fio_psync fio_MBps 0 "$record" "$workers" malloc psync; fi
}
med() { [[ -n ${runs[$1]:-} ]] && median <<<"${runs[$1]# }" || echo -; }
med_busy() { [[ -n ${busy[$1]:-} ]] && median <<<"${busy[$1]# }" || echo -; }
for mode in $modes; do
  direct=$([[ $mode == direct ]] && echo 1 || echo 0)
  engine=$([[ $mode == mmap ]] && echo mmap || echo psync)
  for record in $records; do  # uint16 tokens and seq = record/2 - 1: one sample is exactly one record
    for workers in $workers_list; do
      runs=()
      busy=()
      for ((round = 1; round <= rounds; ++round)); do
        ((round % 2)) && fio_runs  # fio and the loader take turns going first
        for spec in $batches; do
          run "l0 $spec" loader_MBps "$mode" "$record" "$workers" "$(sequences "$spec" "$record")" 0
          run "r0 $spec" loader_MBps "$mode" "$record" "$workers" "$(sequences "$spec" "$record")" 0 raw
          run "l1 $spec" loader_MBps "$mode" "$record" "$workers" "$(sequences "$spec" "$record")" 1
        done
        ((round % 2)) || fio_runs
      done
      f=$(med fio); fh=$(med fio_huge)  # "-" when not run
      for spec in $batches; do
        l=$(med "l0 $spec"); lh=$(med "l1 $spec"); r=$(med "r0 $spec"); bf=$(med_busy fio); bl=$(med_busy "l0 $spec")
        lf=$(ratio fio "l0 $spec"); lr=$(ratio "r0 $spec" "l0 $spec")
        lp=$([[ $mode == mmap ]] && ratio fio_psync "l0 $spec" || echo "$lf")
        printf "%10s %8s %8s %6s %10s %10s %7s %10s %7s %10s %10s %7s %12s %7s  %s\n" "$mode" "$record" "$workers" \
          "$(sequences "$spec" "$record")" "$f" "$l" "$lf" "$r" "$lr" "$fh" "$lh" "$(ratio fio_huge "l1 $spec")" \
          "$bf/$bl" "$lp" "$(verdict "$lp" "$lr" "$(ratio fio "r0 $spec")" "$workers" "$bl" "$mode")"
      done
    done
  done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# commands: fio --rw=randread --bs=RECORD --ioengine=psync|mmap --direct=0|1 --iomem=malloc|shmhuge --numjobs=W --invalidate=0 --randrepeat=0"
echo "#             --time_based --runtime=$seconds --filename=<every shard, ':'-separated>"
echo "#           perf_loader_bench DIR SEQ=RECORD/2-1 BATCH WORKERS=W PREFETCH=2W buffered|mmap|direct RECORD $seconds HUGE=0|1 [raw]"
echo "# ratios: median over the $rounds rounds of each round's ratio; MB/s: medians"
exit $status
