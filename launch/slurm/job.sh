# shellcheck shell=bash
# What the job scripts share (sourced; not a job script itself): the checks of the TB_* parameters, the launcher
# (one rank per task), the job's report directory and job.txt, and running a step. node.sbatch and multinode.sbatch
# run tb_slurm_job (a collectives sweep and a training run); nightly.sbatch runs the suite, validate, history and
# drain.sh through the same functions. Every variable and its default is in launch/slurm/README.md.
#
#   tb_slurm_job SCRIPT SHAPE     # SHAPE: one-node (exactly one node) or multi-node (any number, same tasks on each)
#
# A job script calls, in this order: tb_job_params SCRIPT (the parameters every job has), its own parameters'
# checks, tb_job_shape SHAPE, tb_job_launcher, tb_job_dir DIR [KEY=VALUE...]; then tb_step / tb_run_step per step.
# A bad parameter is one line and exit 2 (_tb_bad), before anything runs.

_tb_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)  # launch/slurm of the checkout: drain.sh, the repository

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

# tb_job_params SCRIPT: inside an allocation; the parameters every job has (TRAINBENCH, TB_OUT, TB_BACKEND,
# TB_LAUNCHER, TB_SRUN_MPI, TB_TIMEOUT) with their defaults, checked.
tb_job_params() {
  _tb_script=$1
  [[ -n ${SLURM_JOB_ID:-} && -n ${SLURM_NTASKS:-} ]] ||
    _tb_bad "not inside a Slurm allocation: submit it with sbatch (or run it under salloc)"
  TRAINBENCH=${TRAINBENCH:-$(dirname "$(dirname "$_tb_here")")/build/trainbench}
  [[ -f $TRAINBENCH && -x $TRAINBENCH ]] || _tb_bad "TRAINBENCH='$TRAINBENCH' is not an executable file (set TRAINBENCH to the trainbench binary)"
  TB_OUT=${TB_OUT:-${SLURM_SUBMIT_DIR:-$PWD}/trainbench-out}
  TB_BACKEND=${TB_BACKEND:-auto}
  TB_LAUNCHER=${TB_LAUNCHER:-srun}
  TB_SRUN_MPI=${TB_SRUN_MPI:-pmix}
  TB_TIMEOUT=${TB_TIMEOUT:-600}
  _tb_one_of TB_BACKEND "$TB_BACKEND" auto cpu cuda
  _tb_one_of TB_LAUNCHER "$TB_LAUNCHER" srun mpirun
  [[ $TB_TIMEOUT =~ ^(0|[1-9][0-9]{0,8})$ ]] || _tb_bad "TB_TIMEOUT='$TB_TIMEOUT' is not a whole number of seconds (0 = no watchdog)"
}

# tb_job_shape SHAPE: one-node (one node only) or multi-node; both: the same number of tasks (GPUs) on every
# node ("k x m"). Sets _tb_per_node.
tb_job_shape() {
  if [[ $1 == one-node && ${SLURM_JOB_NUM_NODES:-1} -ne 1 ]]; then
    _tb_bad "the allocation has $SLURM_JOB_NUM_NODES nodes; $_tb_script is for one node (use multinode.sbatch)"
  fi
  _tb_per_node=${SLURM_TASKS_PER_NODE:-$SLURM_NTASKS}
  _tb_per_node=${_tb_per_node%%(*}
  [[ $_tb_per_node =~ ^[0-9]+$ && $SLURM_NTASKS -eq $((_tb_per_node * ${SLURM_JOB_NUM_NODES:-1})) ]] ||
    _tb_bad "$SLURM_NTASKS tasks on ${SLURM_JOB_NUM_NODES:-1} nodes (${SLURM_TASKS_PER_NODE:-}) are not the same number on every node; ask for --ntasks-per-node=m without --ntasks"
}

# tb_job_launcher: _tb_launch, the command line that starts one rank per task (TB_LAUNCHER), checked.
tb_job_launcher() {
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
}

# tb_job_dir DIR [KEY=VALUE...]: makes the job's report directory DIR (_tb_dir) and its job.txt: what ran where,
# then the KEY=VALUE lines the script adds.
tb_job_dir() {
  _tb_dir=$1; shift
  mkdir -p "$_tb_dir" 2>/dev/null || _tb_bad "cannot create the report directory $_tb_dir (TB_OUT='$TB_OUT')"
  {
    echo "job_id=$SLURM_JOB_ID"
    echo "job_name=${SLURM_JOB_NAME:-}"
    echo "script=$_tb_script"
    echo "nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null | paste -sd, -)"
    echo "num_nodes=${SLURM_JOB_NUM_NODES:-1}"
    echo "tasks=$SLURM_NTASKS"
    echo "tasks_per_node=$_tb_per_node"
    echo "launcher=${_tb_launch[*]}"
    echo "trainbench=$TRAINBENCH"
    echo "backend=$TB_BACKEND"
    [[ $# -eq 0 ]] || printf '%s\n' "$@"
  } >"$_tb_dir/job.txt"
  echo "$_tb_script: job $SLURM_JOB_ID, $SLURM_NTASKS ranks on ${SLURM_JOB_NUM_NODES:-1} node(s) ($SLURM_JOB_NODELIST), reports in $_tb_dir"
}

# tb_run_step STEP COMMAND ARGS...: runs COMMAND once, here; its output goes to the job's output file and to
# DIR/STEP.log, its exit status to job.txt (exit_STEP) and to _tb_last.
tb_run_step() {
  local step=$1; shift
  echo "$_tb_script: $step: $*"
  set +e
  "$@" 2>&1 | tee "$_tb_dir/$step.log"
  _tb_last=${PIPESTATUS[0]}
  set -e
  echo "exit_$step=$_tb_last" >>"$_tb_dir/job.txt"
  echo "$_tb_script: $step: exit $_tb_last"
}

# tb_step STEP COMMAND ARGS...: tb_run_step of `trainbench COMMAND ARGS` on every task, one rank each.
tb_step() {
  local step=$1; shift
  tb_run_step "$step" "${_tb_launch[@]}" "$TRAINBENCH" "$@"
}

# The body of node.sbatch and multinode.sbatch: a collectives sweep and a training run into $TB_OUT/job-<id>/;
# the job's exit status is the first non-zero step status.
tb_slurm_job() {
  tb_job_params "$1"
  local shape=$2 status=0 extra scaling=()
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
  _tb_bool TB_COLLECTIVES "$TB_COLLECTIVES"
  _tb_bool TB_TRAIN "$TB_TRAIN"
  _tb_uint TB_STEPS "$TB_STEPS"
  _tb_uint TB_MICRO_BATCH "$TB_MICRO_BATCH"
  [[ $TB_COLLECTIVES -eq 1 || $TB_TRAIN -eq 1 ]] || _tb_bad "TB_COLLECTIVES=0 and TB_TRAIN=0: nothing to run"
  [[ $TB_OPS =~ ^[a-z_]+(,[a-z_]+)*$ ]] || _tb_bad "TB_OPS='$TB_OPS' is not a comma-separated list of operations"
  [[ $TB_MODEL =~ ^[A-Za-z0-9._-]+$ ]] || _tb_bad "TB_MODEL='$TB_MODEL' is not a model name"
  [[ -z $TB_SCALING || $TB_SCALING == pow2 || $TB_SCALING =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
    _tb_bad "TB_SCALING='$TB_SCALING' is not empty, pow2 or a comma-separated list of rank counts"
  tb_job_shape "$shape"
  tb_job_launcher
  tb_job_dir "$TB_OUT/job-$SLURM_JOB_ID"

  local common=(--backend "$TB_BACKEND" --timeout "$TB_TIMEOUT")
  if [[ $TB_COLLECTIVES -eq 1 ]]; then
    read -r -a extra <<<"$TB_COLLECTIVES_ARGS"
    tb_step collectives collectives "${common[@]}" -b "$TB_MINBYTES" -e "$TB_MAXBYTES" --ops "$TB_OPS" \
      "${extra[@]}" -o "$_tb_dir/collectives.h5"
    status=$_tb_last
  fi
  if [[ $TB_TRAIN -eq 1 ]]; then
    read -r -a extra <<<"$TB_TRAIN_ARGS"
    [[ -z $TB_SCALING ]] || scaling=(--scaling "$TB_SCALING")
    tb_step train train "${common[@]}" --model "$TB_MODEL" --steps "$TB_STEPS" --micro-batch "$TB_MICRO_BATCH" \
      "${scaling[@]}" "${extra[@]}" -o "$_tb_dir/train.h5"
    [[ $status -ne 0 ]] || status=$_tb_last
  fi
  echo "exit=$status" >>"$_tb_dir/job.txt"
  exit "$status"
}
