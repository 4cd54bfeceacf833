#!/usr/bin/env bash
# mpirun with the flags this launch needs: --allow-run-as-root as root, --oversubscribe when there are more
# ranks than cores. Sourced by the other launch scripts:   tb_mpirun NP COMMAND...
tb_mpirun() {
  local np=$1; shift
  local flags=()
  [[ $(id -u) -eq 0 ]] && flags+=(--allow-run-as-root)
  [[ $np -gt $(nproc) ]] && flags+=(--oversubscribe)
  echo "+ mpirun ${flags[*]} -np $np $*" >&2
  mpirun "${flags[@]}" -np "$np" "$@"
}
