#!/usr/bin/env bash
# Takes failing nodes out of service, and puts back only the ones it took out. Dry run unless --apply: it prints
# the scontrol commands it would run and changes nothing.
#
#   launch/slurm/drain.sh [--apply] [--reason TEXT] NODE...     drain NODEs (names or host lists: gpu[01-04])
#   launch/slurm/drain.sh [--apply] --from-validate RUN.json [--within NODES]
#                                                                drain the hosts of validate's failing checks
#   launch/slurm/drain.sh --resume [--apply] [NODE...]           resume the nodes (all, or NODEs) drained by it
#
# A node is drained with the reason "trainbench: TEXT" (default TEXT: "failed trainbench checks"); --resume
# resumes a node only when it is drained and its reason starts with "trainbench:". A node that is already drained,
# down or failed for another reason is left as it is, by either mode. A host of validate's that is no node's
# name is the node whose NodeHostname it is (among --within's nodes: the job's). Exit 0 when done, 1 when
# scontrol failed to change a node, 2 on bad input (nothing changed).
set -euo pipefail
readonly kPrefix="trainbench:"
apply=0
resume=0
reason="failed trainbench checks"
names=()
from_validate=
within=
validate_hosts=()

bad() { echo "drain.sh: $*" >&2; exit 2; }

# The hosts of the failing checks of `trainbench validate --json FILE` (both ends of a weak link), one per line,
# then a last line: the reason, "failed " and the failing checks' keys, cut at a key (never mid-word) to fit
# 200 characters, with "(+N more)" for the keys left out.
validate_failures() {
  /usr/bin/python3 - "$1" <<'PY'
import json, sys
path = sys.argv[1]
try:
    with open(path, encoding="utf-8") as f:
        runs = json.load(f)["runs"]
    checks = [row for run in runs for row in run["validate"]["checks"]]
except (OSError, ValueError, KeyError, TypeError) as e:
    sys.exit(f"drain.sh: --from-validate '{path}': not the JSON of trainbench validate --json ({e})")
failing = [row for row in checks if row.get("verdict") == "fail"]
hosts = []
for row in failing:
    for host in str(row.get("host") or "").split("->"):
        if host and host not in hosts:
            hosts.append(host)
keys = sorted({str(row.get("check")) for row in failing})
reason = "failed " + ", ".join(keys)
for shown in range(len(keys), 0, -1):
    reason = "failed " + ", ".join(keys[:shown]) + ("" if shown == len(keys) else f" (+{len(keys) - shown} more)")
    if len(reason) <= 200:
        break
print("\n".join(hosts + [reason[:200]]))
PY
}

while [[ $# -gt 0 ]]; do
  case $1 in
    --apply) apply=1; shift ;;
    --resume) resume=1; shift ;;
    --reason) [[ $# -ge 2 ]] || bad "--reason needs a text"; reason=$2; shift 2 ;;
    --from-validate) [[ $# -ge 2 ]] || bad "--from-validate needs validate's --json file"; from_validate=$2; shift 2 ;;
    --within) [[ $# -ge 2 ]] || bad "--within needs a host list (the nodes --from-validate's hosts run on)"; within=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    --) shift; names+=("$@"); break ;;
    -*) bad "unknown option '$1' (usage: drain.sh [--apply] [--reason TEXT] NODE... | drain.sh --resume [--apply] [NODE...])" ;;
    *) names+=("$1"); shift ;;
  esac
done
[[ -z $within || -n $from_validate ]] || bad "--within applies to --from-validate's hosts"
if [[ -n $from_validate ]]; then
  [[ $resume -eq 0 ]] || bad "--from-validate drains; --resume takes node names"
  output=$(validate_failures "$from_validate" 2>&1) || bad "${output#drain.sh: }"
  mapfile -t found <<<"$output"
  keys=${found[-1]}
  unset 'found[-1]'
  if [[ ${#found[@]} -eq 0 ]]; then
    echo "drain.sh: $from_validate: no failing check names a host: nothing to drain"
    exit 0
  fi
  validate_hosts=("${found[@]}")
  [[ $reason != "failed trainbench checks" ]] || reason=$keys
fi
[[ $resume -eq 1 || ${#names[@]} -gt 0 || ${#validate_hosts[@]} -gt 0 ]] || bad "no node given to drain"
[[ $reason =~ ^[[:print:]]+$ && $reason =~ [^[:space:]] ]] || bad "--reason must be one printable line"
[[ $resume -eq 0 || $reason == "failed trainbench checks" ]] || bad "--reason applies to draining, not to --resume"
command -v scontrol >/dev/null || bad "scontrol not found: run this on a Slurm login or controller node"

node_field() {  # node_field RECORD FIELD: the value of FIELD= (Reason: to the end, less its [user@time])
  local record=$1 field=$2 value
  if [[ $field == Reason ]]; then
    [[ $record =~ \ Reason=(.*)$ ]] || return 0
    value=${BASH_REMATCH[1]}
    value=${value% \[*\]}
    [[ $value == "(null)" ]] || echo "$value"
  else
    [[ $record =~ (^|\ )$field=([^ ]*) ]] && echo "${BASH_REMATCH[2]}"
  fi
}

expand() {  # expand LIST: hosts=(the names of the Slurm host list LIST)
  local out
  out=$(scontrol show hostnames "$1" 2>/dev/null) || out=
  [[ -n $out ]] || bad "'$1' is not a node name or host list"
  mapfile -t hosts <<<"$out"
}

# Every node's one-line record (scontrol -o show node), looked up before anything changes.
records=()
if [[ ${#names[@]} -eq 0 && ${#validate_hosts[@]} -eq 0 ]]; then
  mapfile -t records < <(scontrol -o show node) || bad "scontrol show node failed"
fi
lookup() {  # lookup LIST WHAT: found=(the record of each node of the Slurm host list LIST); an unknown one is bad input
  found=()
  expand "$1"
  local host record
  for host in "${hosts[@]}"; do
    record=$(scontrol -o show node "$host" 2>&1) || bad "${2}unknown node '$host' ($record)"
    found+=("$record")
  done
}
for name in "${names[@]}"; do
  lookup "$name" ""
  records+=("${found[@]}")
done
# A report's host is a node name where NodeName is the host name; otherwise it is matched to the nodes (of
# --within, else all) whose NodeHostname it is, as when several slurmds share one host.
if [[ ${#validate_hosts[@]} -gt 0 ]]; then
  candidates=()
  if [[ -n $within ]]; then
    lookup "$within" "--within: "
    candidates=("${found[@]}")
  else
    mapfile -t candidates < <(scontrol -o show node) || bad "scontrol show node failed"
  fi
  for host in "${validate_hosts[@]}"; do
    if record=$(scontrol -o show node "$host" 2>/dev/null); then
      records+=("$record")
      continue
    fi
    matched=0
    for record in "${candidates[@]}"; do
      [[ $(node_field "$record" NodeHostName) == "$host" ]] || continue
      records+=("$record")
      matched=1
    done
    [[ $matched -eq 1 ]] || bad "'$host' (a host of $from_validate) is no node's name nor NodeHostname${within:+ among $within}"
  done
fi

failed=0
change() {  # change NODE VERB DONE SCONTROL-ARGS...: run (or, in a dry run, print) scontrol update
  local node=$1 verb=$2 done=$3; shift 3
  if [[ $apply -eq 0 ]]; then
    echo "drain.sh: $node: would $verb: scontrol update ${*@Q}"
  elif scontrol update "$@"; then
    echo "drain.sh: $node: $done"
  else
    echo "drain.sh: $node: scontrol update $* failed" >&2
    failed=1
  fi
}

declare -A seen=()
for record in "${records[@]}"; do
  node=$(node_field "$record" NodeName)
  [[ -z ${seen[$node]:-} ]] || continue  # named twice (a host list, both ends of a link on one node)
  seen[$node]=1
  state=$(node_field "$record" State)
  node_reason=$(node_field "$record" Reason)
  ours=0
  [[ $state =~ DRAIN && $node_reason == "$kPrefix"* ]] && ours=1
  out_of_service=0
  [[ $state =~ DRAIN|DOWN|FAIL ]] && out_of_service=1
  if [[ $resume -eq 1 ]]; then
    if [[ $ours -eq 1 ]]; then
      change "$node" resume resumed nodename="$node" state=resume
    elif [[ $state =~ DRAIN ]]; then
      echo "drain.sh: $node: left alone: drained by someone else ($state, reason '$node_reason')"
    elif [[ ${#names[@]} -gt 0 ]]; then
      echo "drain.sh: $node: not drained ($state), nothing to resume"
    fi
  elif [[ $ours -eq 1 ]]; then
    echo "drain.sh: $node: already drained by trainbench ('$node_reason')"
  elif [[ $out_of_service -eq 1 ]]; then
    echo "drain.sh: $node: left alone: already out of service ($state, reason '${node_reason:-none}')"
  else
    change "$node" drain "drained ($kPrefix $reason)" nodename="$node" state=drain reason="$kPrefix $reason"
  fi
done
[[ $apply -eq 1 ]] || echo "drain.sh: dry run, nothing changed (add --apply to change node states)"
exit "$failed"
