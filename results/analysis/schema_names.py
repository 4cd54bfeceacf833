# Generated from results/model/schema.h by tests/schema_doc (tests/schema_doc_test.sh --update); do not edit.
# The names of every group, table, attribute and column of a trainbench report, for plots.py.


def name(field, key):
    """The name of a field with a placeholder for one key: name(summary.peak_busbw_GBps, "all_reduce")."""
    return field[:field.index("<")] + key + field[field.index(">") + 1:]


POINT_PREFIX = "k"
THROTTLE_MARKER = "_throttle"


def point_ranks(group_name):
    """The rank count of a scaling point's group ("k8" -> 8); None for a storage sweep's point
    ("k8_throttle200") or any other name, as ParsePointGroupName (report.h) reads them."""
    digits = group_name[len(POINT_PREFIX):]
    if not group_name.startswith(POINT_PREFIX) or THROTTLE_MARKER in group_name:
        return None
    return int(digits) if digits.isascii() and digits.isdigit() and len(digits) <= 9 else None


class root:
    """`/`"""
    path = "/"
    schema = "schema"
    schema_version = "schema_version"
    tool_version = "tool_version"
    git_revision = "git_revision"
    command = "command"
    command_line = "command_line"
    start_utc = "start_utc"
    n_ranks = "n_ranks"
    n_nodes = "n_nodes"
    backend = "backend"
    status = "status"
    status_reason = "status_reason"
    end_utc = "end_utc"
    injected_faults = "injected_faults"
    stuck_ranks = "stuck_ranks"


class config:
    """`config`"""
    path = "config"
    bucket_mb = "bucket_mb"
    seq = "seq"
    data = "data"
    checkpoint_every = "checkpoint_every"
    resume = "resume"
    overlap = "overlap"


class topology:
    """`topology`"""
    path = "topology"
    mpi_library = "mpi_library"
    mpi_version = "mpi_version"
    cuda_runtime = "cuda_runtime"
    cuda_driver = "cuda_driver"
    nccl = "nccl"
    cudnn = "cudnn"
    hdf5 = "hdf5"

    class ranks:
        table = "ranks"
        rank = "rank"
        host = "host"
        node = "node"
        local_rank = "local_rank"
        local_size = "local_size"
        gpu_index = "gpu_index"
        gpu_name = "gpu_name"
        gpu_uuid = "gpu_uuid"
        gpu_pci_bus = "gpu_pci_bus"
        gpu_memory_bytes = "gpu_memory_bytes"
        cpu_model = "cpu_model"
        cpu_cores = "cpu_cores"

    class gpu_links:
        table = "gpu_links"
        node = "node"
        host = "host"
        gpu_a = "gpu_a"
        gpu_b = "gpu_b"
        peer_access = "peer_access"
        link = "link"

    class environment:
        table = "environment"
        rank = "rank"
        name = "name"
        value = "value"


class collectives_op:
    """`collectives/<op>`"""
    path = "collectives/<op>"
    op = "op"
    dtype = "dtype"
    redop = "redop"
    root = "root"
    n_ranks = "n_ranks"
    iters = "iters"
    warmup = "warmup"
    check_iters = "check_iters"
    bus_factor = "bus_factor"
    bus_factor_formula = "bus_factor_formula"
    split = "split"
    communicators = "communicators"
    nodes = "nodes"

    class results:
        table = "results"
        size_bytes = "size_bytes"
        count = "count"
        time_us = "<mode>_time_us"
        time_rank_min_us = "<mode>_time_rank_min_us"
        time_rank_avg_us = "<mode>_time_rank_avg_us"
        algbw_GBps = "<mode>_algbw_GBps"
        busbw_GBps = "<mode>_busbw_GBps"
        nic_busbw_GBps = "<mode>_nic_busbw_GBps"
        wrong = "<mode>_wrong"
        wrong_sources = "<mode>_wrong_sources"


class p2p:
    """`p2p`"""
    path = "p2p"
    size_bytes = "size_bytes"
    iters = "iters"
    latency_bytes = "latency_bytes"
    latency_iters = "latency_iters"
    threshold_fraction = "threshold_fraction"
    median_uni_GBps = "median_uni_GBps"
    median_bidi_GBps = "median_bidi_GBps"
    median_uni_intra_GBps = "median_uni_intra_GBps"
    median_uni_inter_GBps = "median_uni_inter_GBps"
    nodes = "nodes"
    complete = "complete"
    uni_bw_GBps = "uni_bw_GBps"
    bidi_bw_GBps = "bidi_bw_GBps"
    latency_us = "latency_us"

    class flagged:
        table = "flagged"
        src_rank = "src_rank"
        dst_rank = "dst_rank"
        src_host = "src_host"
        dst_host = "dst_host"
        src_gpu = "src_gpu"
        dst_gpu = "dst_gpu"
        uni_bw_GBps = "uni_bw_GBps"
        link = "link"
        median_GBps = "median_GBps"
        fraction_of_median = "fraction_of_median"


class model:
    """`model`"""
    path = "model"
    name = "name"
    layers = "layers"
    preset_layers = "preset_layers"
    scaled = "scaled"
    d_model = "d_model"
    heads = "heads"
    vocab = "vocab"
    vocab_padded = "vocab_padded"
    max_seq = "max_seq"
    parameters = "parameters"
    matmul_parameters = "matmul_parameters"
    model_flops_per_token = "model_flops_per_token"
    flops_convention = "flops_convention"
    memory_weights_bytes = "memory_weights_bytes"
    memory_gradients_bytes = "memory_gradients_bytes"
    memory_optimizer_bytes = "memory_optimizer_bytes"
    memory_activations_bytes = "memory_activations_bytes"
    memory_precision = "memory_precision"


class train:
    """`train`"""
    path = "train"
    scaling_mode = "scaling_mode"
    backend = "backend"
    device = "device"
    attention = "attention"
    attention_fallback_reason = "attention_fallback_reason"
    measured_gemm_flops = "measured_gemm_flops"
    measured_gemm = "measured_gemm"
    peak_flops = "peak_flops"
    peak_source = "peak_source"
    mpi_init_s = "mpi_init_s"
    communicator_init_s = "communicator_init_s"
    startup_s = "startup_s"
    peak_host_memory_bytes_max = "peak_host_memory_bytes_max"
    peak_device_memory_bytes_max = "peak_device_memory_bytes_max"

    class memory:
        table = "memory"
        rank = "rank"
        peak_host_memory_bytes = "peak_host_memory_bytes"
        peak_device_memory_bytes = "peak_device_memory_bytes"


class train_point:
    """`train/<point>`"""
    path = "train/<point>"
    ranks = "ranks"
    micro_batch = "micro_batch"
    tokens_per_step = "tokens_per_step"
    measured_steps = "measured_steps"
    step_s = "step_s"
    step_s_p95 = "step_s_p95"
    tokens_per_s = "tokens_per_s"
    tokens_per_s_per_rank = "tokens_per_s_per_rank"
    model_flops_per_token = "model_flops_per_token"
    mfu_peak = "mfu_peak"
    mfu_measured_gemm = "mfu_measured_gemm"
    scaling_efficiency = "scaling_efficiency"
    comm_total_s = "comm_total_s"
    comm_exposed_s = "comm_exposed_s"
    comm_intra_s = "comm_intra_s"
    comm_inter_s = "comm_inter_s"
    nodes = "nodes"
    ranks_per_node = "ranks_per_node"
    allreduce = "allreduce"
    overlap = "overlap"
    gradient_bytes = "gradient_bytes"
    gradient_buckets = "gradient_buckets"
    effective_busbw_GBps = "effective_busbw_GBps"
    loss_first = "loss_first"
    loss_last = "loss_last"
    worst_rank = "worst_rank"
    energy_J = "energy_J"
    energy_per_step_J = "energy_per_step_J"
    joules_per_token = "joules_per_token"

    class steps:
        table = "steps"
        rank = "rank"
        step = "step"
        warmup = "warmup"
        data_wait_s = "data_wait_s"
        h2d_s = "h2d_s"
        forward_s = "forward_s"
        backward_s = "backward_s"
        comm_total_s = "comm_total_s"
        comm_exposed_s = "comm_exposed_s"
        comm_intra_s = "comm_intra_s"
        comm_inter_s = "comm_inter_s"
        optimizer_s = "optimizer_s"
        checkpoint_stall_s = "checkpoint_stall_s"
        step_s = "step_s"
        tokens = "tokens"
        loss = "loss"
        data_bytes = "data_bytes"
        data_read_MBps = "data_read_MBps"
        loader_queue_depth = "loader_queue_depth"
        checkpoint_writing = "checkpoint_writing"

    class stall_budget:
        table = "stall_budget"
        rank = "rank"
        host = "host"
        device = "device"
        median_step_s = "median_step_s"
        p50 = "<part>_p50"
        p95 = "<part>_p95"
        p99 = "<part>_p99"


class io:
    """`io`"""
    path = "io"
    data_verify = "data_verify"
    data_verify_bytes = "data_verify_bytes"
    data_verify_s = "data_verify_s"
    sweep_data_wait_share = "sweep_data_wait_share"
    throttle_at_data_wait_share_MBps = "throttle_at_data_wait_share_MBps"

    class throttle_sweep:
        table = "throttle_sweep"
        io_throttle_MBps = "io_throttle_MBps"
        data_wait_share = "data_wait_share"
        step_s = "step_s"
        tokens_per_s = "tokens_per_s"


class io_point:
    """`io/<point>`"""
    path = "io/<point>"
    data_wait_share = "data_wait_share"
    checkpoint_stall_share = "checkpoint_stall_share"
    io_throttle_MBps = "io_throttle_MBps"
    checkpoint_writer_slowdown = "checkpoint_writer_slowdown"
    checkpoint_writer_slowdown_steps = "checkpoint_writer_slowdown_steps"
    resumed_from = "resumed_from"
    resumed_step = "resumed_step"
    resume_load_s = "resume_load_s"
    resume_saved_ranks = "resume_saved_ranks"
    resume_unchecked = "resume_unchecked"
    dataset_files = "dataset_files"
    dataset_files_kept_open = "dataset_files_kept_open"
    dataset_samples = "dataset_samples"
    record_bytes = "record_bytes"
    batches_per_epoch = "batches_per_epoch"
    dropped_samples_per_epoch = "dropped_samples_per_epoch"
    checkpoint_dir = "checkpoint_dir"
    checkpoint_state_bytes = "checkpoint_state_bytes"

    class loader:
        table = "loader"
        rank = "rank"
        batches = "batches"
        bytes_read = "bytes_read"
        reads = "reads"
        read_s = "read_s"
        per_read_MBps = "per_read_MBps"
        wait_s = "wait_s"

    class checkpoints:
        table = "checkpoints"
        step = "step"
        rank = "rank"
        mode = "mode"
        bytes = "bytes"
        stall_s = "stall_s"
        write_s = "write_s"
        write_GBps = "write_GBps"
        crc32c = "crc32c"
        verified = "verified"
        ok = "ok"
        error = "error"


class suite:
    """`suite`"""
    path = "suite"
    profile = "profile"
    phase_order = "phase_order"
    repeats = "repeats"
    workdir = "workdir"
    data_write_GBps = "data_write_GBps"

    class phases:
        table = "phases"
        phase = "phase"
        repeat = "repeat"
        status = "status"
        reason = "reason"
        seconds = "seconds"


class repeats_repeat:
    """`repeats/<repeat>`"""
    path = "repeats/<repeat>"


class gpu_health:
    """`gpu_health`"""
    path = "gpu_health"
    source = "source"
    interval_s = "interval_s"
    samples = "samples"

    class devices:
        table = "devices"
        host = "host"
        node = "node"
        index = "index"
        pci_bus_id = "pci_bus_id"
        name = "name"
        uuid = "uuid"
        ranks = "ranks"
        samples = "samples"
        busy_samples = "busy_samples"
        ecc_corrected_volatile = "ecc_corrected_volatile"
        ecc_uncorrected_volatile = "ecc_uncorrected_volatile"
        retired_pages = "retired_pages"
        retired_pages_pending = "retired_pages_pending"
        remapped_rows_corrected = "remapped_rows_corrected"
        remapped_rows_uncorrected = "remapped_rows_uncorrected"
        remap_pending = "remap_pending"
        remap_failure = "remap_failure"
        pcie_gen_current = "pcie_gen_current"
        pcie_gen_max = "pcie_gen_max"
        pcie_width_current = "pcie_width_current"
        pcie_width_max = "pcie_width_max"
        sm_clock_min_MHz = "sm_clock_min_MHz"
        sm_clock_median_MHz = "sm_clock_median_MHz"
        sm_clock_max_MHz = "sm_clock_max_MHz"
        sm_clock_max_supported_MHz = "sm_clock_max_supported_MHz"
        clock_event_reasons = "clock_event_reasons"
        power_mean_W = "power_mean_W"
        power_max_W = "power_max_W"
        power_limit_W = "power_limit_W"
        temperature_max_C = "temperature_max_C"
        energy_J = "energy_J"
        nvml_errors = "nvml_errors"


class summary:
    """`summary`"""
    path = "summary"
    peak_busbw_GBps = "<op>_peak_busbw_GBps"
    peak_busbw_size_bytes = "<op>_peak_busbw_size_bytes"
    wrong_elements_total = "wrong_elements_total"
    p2p_median_uni_GBps = "p2p_median_uni_GBps"
    p2p_flagged_pairs = "p2p_flagged_pairs"
    train_points = "train_points"
    train_tokens_per_s = "train_tokens_per_s"
    train_ranks = "train_ranks"
    train_scaling_efficiency = "train_scaling_efficiency"
    tokens_written = "tokens_written"
    shards_written = "shards_written"
    bytes_written = "bytes_written"
    seconds = "seconds"
    write_GBps = "write_GBps"
