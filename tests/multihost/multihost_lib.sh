# Shared by the multihost test scripts (sourced after setting `set_name`, with the trainbench binary as $1): the
# test hosts' set brought up with `multihost_up N` and removed on exit, also when the test fails; checks on reports
# through Debian's h5py; `multihost_finish NAME`, which removes the set, checks that nothing of it is left and
# gives the tally. TB_KEEP_WORK=1 keeps the scratch directory ($work) and its reports.
set -uo pipefail
tb=$(realpath "$1")
multihost_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
hosts=$multihost_dir/netns_hosts.sh
work=$(mktemp -d)
source "$multihost_dir/../cli_lib.sh"

if [[ $(id -u) -ne 0 ]]; then echo "FAIL: multihost tests need root (network namespaces)"; exit 1; fi
# A test with more to remove (daemons outside the namespaces) defines multihost_extra_cleanup; it runs first.
multihost_cleanup() {
  if declare -F multihost_extra_cleanup >/dev/null; then multihost_extra_cleanup; fi
  "$hosts" down "$set_name"
  [[ -n ${TB_KEEP_WORK:-} ]] || rm -rf "$work"
}
trap multihost_cleanup EXIT
chmod 755 "$work"

multihost_up() {  # multihost_up N: hosts node0..node(N-1), or the test ends here
  "$hosts" up "$set_name" "$1" || { echo "FAIL: cannot bring up the test hosts"; exit 1; }
}

# py FILE 'expression over f (an h5py File)': prints the value.
py() { /usr/bin/python3 -c "import sys, h5py, math; f = h5py.File(sys.argv[1], 'r'); print($2)" "$1"; }
# check_py WHAT FILE 'python condition over f' [DETAIL]: the condition holds, else DETAIL's value is shown.
check_py() {
  checks=$((checks + 1))
  [[ $(py "$2" "bool($3)" 2>&1) == True ]] || fail "$1: not $3 in $2 ($(py "$2" "${4:-''}" 2>&1))"
}
# mpirun across the hosts, 2 or 1 ranks per host.
on2=(env TB_NETNS_SLOTS=2 "$hosts" mpirun "$set_name")
on1=(env TB_NETNS_SLOTS=1 "$hosts" mpirun "$set_name")

multihost_finish() {  # multihost_finish NAME
  trap - EXIT
  multihost_cleanup
  checks=$((checks + 1))
  local left
  left=$(ip netns list | awk '{print $1}' | grep -E "^tb$set_name-" || true)
  [[ -z $left ]] || fail "namespaces left behind: $left"
  finish "$1"
}
