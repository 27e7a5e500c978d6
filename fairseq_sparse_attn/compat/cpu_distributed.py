"""Multi-process training on CPU (``torchrun`` / SLURM ``srun``), see docs/distributed.md.
fairseq 0.12 assumes one process per GPU; on a machine without CUDA (or with
``--cpu``) it fails like this:

a. ``--distributed-world-size`` defaults to ``max(1, torch.cuda.device_count())`` = 1,
   and ``infer_init_method`` returns at once for a world of 1: under
   ``torchrun --nproc_per_node 2`` every process silently trains alone on all the data,
   and both write the same checkpoint files.
b. with ``--distributed-world-size 2`` it reads torchrun's variables and computes
   ``device_id = rank % torch.cuda.device_count()``: ZeroDivisionError.
c. SLURM (``_infer_slurm_init``) needs ``scontrol`` (without it: no SLURM detection),
   sets world = nodes x ``torch.cuda.device_count()`` = 0 for one task per node,
   asserts ``--distributed-world-size`` = tasks for several, builds
   ``tcp://host:-1`` unless ``--distributed-port`` is given, and calls
   ``torch.cuda.set_device(SLURM_LOCALID)`` for local ranks > 0.
d. with no launcher it would spawn ``min(torch.cuda.device_count(), world)`` = 0
   processes (an explicit ``--distributed-init-method`` included); with ``--cpu`` on a
   GPU machine the default world is the GPU count and it spawns that many CPU
   processes with nccl, which fail.
e. ``--distributed-backend`` defaults to ``nccl``, which needs CUDA.
f. ``--ddp-backend pytorch_ddp`` (the default) builds
   ``DistributedDataParallel(device_ids=[device_id])``, which torch rejects for a CPU
   module.
g. ``all_gather_list`` (logging outputs of criterions that cannot be summed,
   ``fairseq-validate`` with several processes) allocates ``torch.cuda.ByteTensor``.

On CPU the plugin therefore sets up the world itself before fairseq's ``call_main``
(a-e): from torchrun's ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` (``env://``), else from
srun's ``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_LOCALID`` and the first host of the
node list (``tcp://host:port``), else from an explicit ``--distributed-init-method``
with ``--distributed-rank``; always without fairseq's spawn, with ``gloo`` in place
of the ``nccl`` default; ``--cpu`` with no launcher and no world size trains in one
process.  (f) and (g) get CPU branches.  With CUDA (and no
``--cpu``) nothing changes: fairseq's own logic, nccl, one process per GPU.
"""

import functools
import logging
import os
import random
import re
import subprocess
import warnings

import torch

from ..errors import DistributedSetupError

logger = logging.getLogger(__name__)

BEHAVIOUR_CHANGE = True


def _env_int(name, env):
    value = env.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise DistributedSetupError(f"${name} must be an integer, got {value!r}") from None


def first_slurm_host(nodelist: str) -> str:
    """The first host of a SLURM node list (``node[003-005,9],gpu1`` -> ``node003``):
    ``scontrol show hostnames`` when it is installed, else the list's own syntax."""
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and out.stdout.split():
            return out.stdout.split()[0]
    except (FileNotFoundError, subprocess.TimeoutExpired):
        pass
    depth, first = 0, ""
    for ch in nodelist.strip():
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            break
        first += ch
    if not first or depth != 0 or re.search(r"\[[^\]]*\[", first):
        raise DistributedSetupError(f"cannot read the SLURM node list {nodelist!r}")
    return re.sub(r"\[([^\]]*)\]", lambda m: re.split(r"[,-]", m.group(1))[0], first)


def cpu_launcher_world(env=None, distributed_port=-1):
    """How this process was launched, from the environment: ``None`` for a single
    process, else a dict with ``launcher``, ``rank``, ``world_size``, ``local_rank`` and
    ``init_method``.  torchrun's variables win over SLURM's (torchrun inside an
    allocation)."""
    env = os.environ if env is None else env
    if all(k in env for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        world = _env_int("WORLD_SIZE", env)
        rank = _env_int("RANK", env)
        local = _env_int("LOCAL_RANK", env)
        launcher, init_method = "torchrun", "env://"
    elif "SLURM_PROCID" in env and ("SLURM_STEP_NUM_TASKS" in env or "SLURM_NTASKS" in env):
        # srun sets SLURM_STEP_*; SLURM_NTASKS alone is the job's count, also visible in
        # the batch script where only one process runs.
        world = _env_int("SLURM_STEP_NUM_TASKS", env) or _env_int("SLURM_NTASKS", env)
        rank = _env_int("SLURM_PROCID", env)
        local = _env_int("SLURM_LOCALID", env)
        launcher, init_method = "slurm", None
    else:
        return None
    if world is None or world <= 1:
        return None
    if not 0 <= rank < world:
        raise DistributedSetupError(f"{launcher}: rank {rank} is outside a world of {world}")
    if launcher == "slurm":
        nodelist = next(
            (env[k] for k in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST") if env.get(k)), None
        )
        if nodelist is None:
            raise DistributedSetupError(
                f"SLURM task {rank} of {world}: no SLURM_STEP_NODELIST/SLURM_JOB_NODELIST/"
                "SLURM_NODELIST to find the first node (the rendezvous host)"
            )
        port = distributed_port if distributed_port and distributed_port > 0 else None
        if port is None and env.get("MASTER_PORT"):
            port = _env_int("MASTER_PORT", env)
        if port is None:
            # the same for every task of one srun step, different for concurrent steps
            key = "{}.{}.{}".format(
                env.get("SLURM_JOB_ID", ""),
                env.get("SLURM_ARRAY_TASK_ID", ""),
                env.get("SLURM_STEP_ID", env.get("SLURM_STEPID", "")),
            )
            port = random.Random(key).randint(10000, 60000)
        init_method = f"tcp://{first_slurm_host(nodelist)}:{port}"
    return dict(
        launcher=launcher,
        rank=rank,
        world_size=world,
        local_rank=local if local is not None else 0,
        init_method=init_method,
    )


def _runs_on_cpu(cfg) -> bool:

    return not cfg.common.tpu and (cfg.common.cpu or not torch.cuda.is_available())


def configure_cpu_distributed(cfg, env=None):
    """Fill ``cfg.distributed_training`` for a multi-process CPU run (see 5. above).
    Leaves a single-process run untouched; raises DistributedSetupError for a world
    that cannot be formed."""

    dt = cfg.distributed_training
    # fairseq's default is max(1, GPUs): 1 on CPU, the GPU count with --cpu on a GPU machine
    default_world = max(1, torch.cuda.device_count())
    launched = cpu_launcher_world(env, dt.distributed_port)
    if launched is not None:
        if dt.distributed_init_method is not None:
            raise DistributedSetupError(
                f"--distributed-init-method {dt.distributed_init_method} was given but the "
                f"process was started by {launched['launcher']}, which sets up the world itself: "
                "drop one of them"
            )
        if dt.distributed_world_size not in (1, default_world, launched["world_size"]):
            raise DistributedSetupError(
                f"--distributed-world-size {dt.distributed_world_size} but {launched['launcher']} "
                f"started {launched['world_size']} processes"
            )
        dt.distributed_world_size = launched["world_size"]
        dt.distributed_rank = launched["rank"]
        dt.device_id = launched["local_rank"]
        dt.distributed_init_method = launched["init_method"]
        how = launched["launcher"]
    elif dt.distributed_init_method is not None:
        if dt.distributed_world_size <= 1:
            raise DistributedSetupError(
                f"--distributed-init-method {dt.distributed_init_method} needs "
                "--distributed-world-size N > 1 and --distributed-rank R for each process"
            )
        how = "--distributed-init-method"
    elif dt.distributed_world_size == default_world > 1:
        # --cpu on a GPU machine, world size not given: fairseq would spawn one CPU process
        # per GPU with nccl (and fail); one process, as on a machine without GPUs
        dt.distributed_world_size = 1
        logger.info("--cpu: training in one process (start several with torchrun or srun)")
        return cfg
    elif dt.distributed_world_size > 1:
        raise DistributedSetupError(
            f"--distributed-world-size {dt.distributed_world_size} on CPU: fairseq starts one "
            "process per GPU and there is none here. Start the processes yourself: "
            f"`torchrun --no-python --nproc_per_node {dt.distributed_world_size} fsa-train ...`, "
            f"`srun --ntasks {dt.distributed_world_size} fsa-train ...`, or one process per rank "
            "with --distributed-init-method tcp://HOST:PORT --distributed-rank R"
        )
    else:
        return cfg
    if dt.pipeline_model_parallel:
        raise DistributedSetupError("--pipeline-model-parallel needs GPUs")
    if dt.distributed_backend == "nccl":
        dt.distributed_backend = "gloo"  # nccl needs CUDA; fairseq's default
    dt.distributed_no_spawn = True  # the launcher started the processes
    logger.info(
        f"CPU distributed training ({how}): rank {dt.distributed_rank} of a world of "
        f"{dt.distributed_world_size}, backend {dt.distributed_backend}, "
        f"init {dt.distributed_init_method}"
    )
    return cfg


def _cpu_all_gather_list(data, group=None, max_size=16384):
    """``fairseq.distributed.utils.all_gather_list`` without its CUDA buffer."""
    import pickle

    import torch.distributed as dist
    from fairseq import utils
    from fairseq.distributed import utils as distributed_utils

    if group is None:
        group = distributed_utils.get_global_group()
    data = utils.move_to_cpu(data)
    size = len(pickle.dumps(data)) + 4  # the same limit as fairseq's (4-byte header)
    if size > max_size:
        raise ValueError(f"encoded data size ({size}) exceeds max_size ({max_size})")
    out = [None] * distributed_utils.get_world_size(group=group)
    dist.all_gather_object(out, data, group=group)
    return out


def install_cpu_distributed_fix():
    from fairseq.distributed import utils as distributed_utils
    from fairseq.models import distributed_fairseq_model

    original_call_main = distributed_utils.call_main
    if getattr(original_call_main, "_fsa_cpu", False):
        return

    @functools.wraps(original_call_main)
    def call_main(cfg, main, **kwargs):
        if _runs_on_cpu(cfg):
            configure_cpu_distributed(cfg)
        return original_call_main(cfg, main, **kwargs)

    call_main._fsa_cpu = True
    distributed_utils.call_main = call_main

    original_all_gather_list = distributed_utils.all_gather_list

    @functools.wraps(original_all_gather_list)
    def all_gather_list(data, group=None, max_size=16384):
        if distributed_utils.use_xla() or _backend(group) == "nccl":
            return original_all_gather_list(data, group=group, max_size=max_size)
        return _cpu_all_gather_list(data, group=group, max_size=max_size)

    def _backend(group):
        import torch.distributed as dist

        if not dist.is_initialized():
            return None
        return dist.get_backend(group if group is not None else distributed_utils.get_global_group())

    distributed_utils.all_gather_list = all_gather_list

    ddp_class = distributed_fairseq_model.DistributedDataParallel

    def DistributedDataParallel(module, device_ids=None, output_device=None, **kwargs):
        # fairseq passes device_ids=[device_id]; torch wants None for a CPU module
        if device_ids is not None and all(p.device.type == "cpu" for p in module.parameters()):
            device_ids = output_device = None
        with warnings.catch_warnings():
            # fairseq passes broadcast_buffers (newer torch: a FutureWarning that named this
            # file under torchrun); its meaning is kept, the notice is not for users
            warnings.filterwarnings("ignore", message="`broadcast_buffers` is deprecated", category=FutureWarning)
            return ddp_class(module, device_ids=device_ids, output_device=output_device, **kwargs)

    distributed_fairseq_model.DistributedDataParallel = DistributedDataParallel


install = install_cpu_distributed_fix
