# shellcheck shell=bash
# The body of node.sbatch and multinode.sbatch (sourced; not a job script itself): checks the TB_* parameters,
# makes the job's report directory and runs a collectives sweep and a training run on every task of the
# allocation, one rank per task. Every variable and its default is in launch/slurm/README.md.
#
#   tb_slurm_job SCRIPT SHAPE     # SHAPE: one-node (exactly one node) or multi-node (any number, same tasks on each)

_tb_bad() { echo "$_tb_script: $*" >&2; exit 2; }  # one line and exit 2: bad input, nothing run

_tb_uint() {  # _tb_uint NAME VALUE: VALUE is a decimal integer >= 1
  [[ $2 =~ ^[1-9][0-9]{0,8}$ ]] || _tb_bad "$1='$2' is not a positive integer"
}

_tb_bool() {  # _tb_bool NAME VALUE: VALUE is 0 or 1
  [[ $2 == 0 || $2 == 1 ]] || _tb_bad "$1='$2' must be 0 or 1"
}

_tb_one_of() {  # _tb_one_of NAME VALUE CHOICE...
  local name=$1 value=$2 choice; shift 2
  for choice in "$@"; do [[ $value == "$choice" ]] && return 0; done
  _tb_bad "$name='$value' is not one of: $*"
}

# Runs one trainbench command on every task; its output goes to the job's output file and to DIR/STEP.log.
_tb_step() {  # _tb_step STEP COMMAND ARGS...
  local step=$1 status; shift
  echo "$_tb_script: $step: ${_tb_launch[*]} $TRAINBENCH $*"
  set +e
  "${_tb_launch[@]}" "$TRAINBENCH" "$@" 2>&1 | tee "$_tb_dir/$step.log"
  status=${PIPESTATUS[0]}
  set -e
  echo "exit_$step=$status" >>"$_tb_dir/job.txt"
  echo "$_tb_script: $step: exit $status"
  [[ $status -eq 0 || $_tb_status -ne 0 ]] || _tb_status=$status
}

tb_slurm_job() {
  _tb_script=$1
  local shape=$2 here repo per_node
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  repo=$(cd "$here/../.." && pwd)

  [[ -n ${SLURM_JOB_ID:-} && -n ${SLURM_NTASKS:-} ]] ||
    _tb_bad "not inside a Slurm allocation: submit it with sbatch (or run it under salloc)"
  TRAINBENCH=${TRAINBENCH:-$repo/build/trainbench}
  [[ -f $TRAINBENCH && -x $TRAINBENCH ]] || _tb_bad "TRAINBENCH='$TRAINBENCH' is not an executable file (set TRAINBENCH to the trainbench binary)"
  TB_OUT=${TB_OUT:-${SLURM_SUBMIT_DIR:-$PWD}/trainbench-out}
  TB_BACKEND=${TB_BACKEND:-auto}
  TB_LAUNCHER=${TB_LAUNCHER:-srun}
  TB_SRUN_MPI=${TB_SRUN_MPI:-pmix}
  TB_TIMEOUT=${TB_TIMEOUT:-600}
  TB_COLLECTIVES=${TB_COLLECTIVES:-1}
  TB_OPS=${TB_OPS:-all_reduce,all_gather,reduce_scatter}
  TB_MINBYTES=${TB_MINBYTES:-8}
  TB_MAXBYTES=${TB_MAXBYTES:-1G}
  TB_TRAIN=${TB_TRAIN:-1}
  TB_MODEL=${TB_MODEL:-gpt2-124m}
  TB_STEPS=${TB_STEPS:-20}
  TB_MICRO_BATCH=${TB_MICRO_BATCH:-4}
  TB_SCALING=${TB_SCALING:-}
  TB_COLLECTIVES_ARGS=${TB_COLLECTIVES_ARGS:-}
  TB_TRAIN_ARGS=${TB_TRAIN_ARGS:-}

  _tb_one_of TB_BACKEND "$TB_BACKEND" auto cpu cuda
  _tb_one_of TB_LAUNCHER "$TB_LAUNCHER" srun mpirun
  [[ $TB_TIMEOUT =~ ^(0|[1-9][0-9]{0,8})$ ]] || _tb_bad "TB_TIMEOUT='$TB_TIMEOUT' is not a whole number of seconds (0 = no watchdog)"
  _tb_bool TB_COLLECTIVES "$TB_COLLECTIVES"
  _tb_bool TB_TRAIN "$TB_TRAIN"
  _tb_uint TB_STEPS "$TB_STEPS"
  _tb_uint TB_MICRO_BATCH "$TB_MICRO_BATCH"
  [[ $TB_COLLECTIVES -eq 1 || $TB_TRAIN -eq 1 ]] || _tb_bad "TB_COLLECTIVES=0 and TB_TRAIN=0: nothing to run"
  [[ $TB_OPS =~ ^[a-z_]+(,[a-z_]+)*$ ]] || _tb_bad "TB_OPS='$TB_OPS' is not a comma-separated list of operations"
  [[ $TB_MODEL =~ ^[A-Za-z0-9._-]+$ ]] || _tb_bad "TB_MODEL='$TB_MODEL' is not a model name"
  [[ -z $TB_SCALING || $TB_SCALING == pow2 || $TB_SCALING =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
    _tb_bad "TB_SCALING='$TB_SCALING' is not empty, pow2 or a comma-separated list of rank counts"
  # The shape: one node for node.sbatch; the same number of tasks (GPUs) on every node ("k x m") for both.
  if [[ $shape == one-node && ${SLURM_JOB_NUM_NODES:-1} -ne 1 ]]; then
    _tb_bad "the allocation has $SLURM_JOB_NUM_NODES nodes; node.sbatch is for one node (use multinode.sbatch)"
  fi
  per_node=${SLURM_TASKS_PER_NODE:-$SLURM_NTASKS}
  per_node=${per_node%%(*}
  [[ $per_node =~ ^[0-9]+$ && $SLURM_NTASKS -eq $((per_node * ${SLURM_JOB_NUM_NODES:-1})) ]] ||
    _tb_bad "$SLURM_NTASKS tasks on ${SLURM_JOB_NUM_NODES:-1} nodes (${SLURM_TASKS_PER_NODE:-}) are not the same number on every node; ask for --ntasks-per-node=m without --ntasks"

  case $TB_LAUNCHER in
    srun)
      srun --mpi=list 2>&1 | grep -qw -- "$TB_SRUN_MPI" ||
        _tb_bad "TB_SRUN_MPI='$TB_SRUN_MPI' is not an MPI plugin of this srun (srun --mpi=list)"
      _tb_launch=(srun --mpi="$TB_SRUN_MPI" --kill-on-bad-exit=1) ;;
    mpirun)
      command -v mpirun >/dev/null || _tb_bad "TB_LAUNCHER=mpirun but mpirun is not on PATH"
      _tb_launch=(mpirun -np "$SLURM_NTASKS")
      [[ $(id -u) -ne 0 ]] || _tb_launch+=(--allow-run-as-root) ;;
  esac

  _tb_dir=$TB_OUT/job-$SLURM_JOB_ID
  mkdir -p "$_tb_dir" 2>/dev/null || _tb_bad "cannot create the report directory $_tb_dir (TB_OUT='$TB_OUT')"
  {
    echo "job_id=$SLURM_JOB_ID"
    echo "job_name=${SLURM_JOB_NAME:-}"
    echo "script=$_tb_script"
    echo "nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null | paste -sd, -)"
    echo "num_nodes=${SLURM_JOB_NUM_NODES:-1}"
    echo "tasks=$SLURM_NTASKS"
    echo "tasks_per_node=$per_node"
    echo "launcher=${_tb_launch[*]}"
    echo "trainbench=$TRAINBENCH"
    echo "backend=$TB_BACKEND"
  } >"$_tb_dir/job.txt"
  echo "$_tb_script: job $SLURM_JOB_ID, $SLURM_NTASKS ranks on ${SLURM_JOB_NUM_NODES:-1} node(s) ($SLURM_JOB_NODELIST), reports in $_tb_dir"

  _tb_status=0
  local common=(--backend "$TB_BACKEND" --timeout "$TB_TIMEOUT")
  local extra
  if [[ $TB_COLLECTIVES -eq 1 ]]; then
    read -r -a extra <<<"$TB_COLLECTIVES_ARGS"
    _tb_step collectives collectives "${common[@]}" -b "$TB_MINBYTES" -e "$TB_MAXBYTES" --ops "$TB_OPS" \
      "${extra[@]}" -o "$_tb_dir/collectives.h5"
  fi
  if [[ $TB_TRAIN -eq 1 ]]; then
    read -r -a extra <<<"$TB_TRAIN_ARGS"
    local scaling=()
    [[ -z $TB_SCALING ]] || scaling=(--scaling "$TB_SCALING")
    _tb_step train train "${common[@]}" --model "$TB_MODEL" --steps "$TB_STEPS" --micro-batch "$TB_MICRO_BATCH" \
      "${scaling[@]}" "${extra[@]}" -o "$_tb_dir/train.h5"
  fi
  echo "exit=$_tb_status" >>"$_tb_dir/job.txt"
  exit "$_tb_status"
}
