"""fairseq / torch version shims, in one place.  Installed when the plugin is imported
(``--user-dir fairseq_sparse_attn`` or ``import fairseq_sparse_attn``).

1. Checkpoint loading with torch >= 2.6.  ``torch.load`` defaults to
   ``weights_only=True`` and fairseq checkpoints (argparse Namespace, omegaconf configs)
   then fail to load in ``fairseq-generate`` / ``-interactive`` / ``-validate`` /
   ``hub_utils.from_pretrained``.  We give fairseq's ``checkpoint_utils`` module its own
   ``torch`` whose ``load`` defaults to ``weights_only=False``: only checkpoints that
   fairseq itself is asked to load are affected, the rest of the process keeps torch's
   safe default.  (Loading a checkpoint runs pickled code: load only files you trust,
   exactly as with fairseq on torch < 2.6.)  ``fairseq.distributed.utils`` gets the same
   ``torch``: with several processes, rank 0 reads the checkpoint and broadcasts it, and
   the other ranks unpickle it with ``torch.load`` (``_broadcast_object_slow``), which
   failed with "Weights only load failed" when a multi-process run resumed.

2. Divergence guard.  A run whose gradients or validation loss become NaN/inf stops
   with a message that says so, and no checkpoint is written from a non-finite model
   (stock fairseq would save ``checkpoint_best.pt`` at the first validation even when
   its loss is NaN).

3. A translation data directory that does not exist (or is not a fairseq-preprocess
   output) fails with a message naming it, before fairseq's own deeper error.

4. Batching that loses sentences.  fairseq's vectorized ``batch_by_size`` (the Cython
   ``batch_by_size_vec`` of fairseq-fixed 0.12.3.1) silently drops the last
   ``len(indices) % required_batch_size_multiple`` examples when only ``max_sentences`` is
   given: ``fairseq-generate --batch-size 32`` on a 447-document test set translated 440
   (its default ``--required-batch-size-multiple`` is 8).  The wrapper puts every
   dropped index back, in extra batches that respect ``max_sentences``/``max_tokens``.

5. Multi-process training on CPU (``torchrun`` / SLURM ``srun``), see docs/distributed.md.
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
import inspect
import logging
import math
import os
import random
import re
import subprocess
import types

import torch

logger = logging.getLogger(__name__)

_INSTALLED = False


class TrainingDivergedError(FloatingPointError):
    """Raised when training produces NaN/inf; nothing is saved from that state."""


def _torch_load_supports_weights_only() -> bool:
    try:
        return "weights_only" in inspect.signature(torch.load).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return False


def _trusted_torch_namespace():
    """A stand-in for the ``torch`` module whose ``load`` trusts fairseq checkpoints."""
    proxy = types.ModuleType("torch")
    proxy.__dict__.update({k: v for k, v in torch.__dict__.items() if not k.startswith("__")})

    @functools.wraps(torch.load)
    def load(*args, **kwargs):
        kwargs.setdefault("weights_only", False)
        return torch.load(*args, **kwargs)

    proxy.load = load
    proxy.__getattr__ = lambda name: getattr(torch, name)  # lazily-loaded submodules
    return proxy


def install_checkpoint_loading_fix():
    from fairseq import checkpoint_utils
    from fairseq.distributed import utils as distributed_utils

    if not _torch_load_supports_weights_only():
        return
    if getattr(checkpoint_utils.torch, "_fsa_trusted", False):
        return
    proxy = _trusted_torch_namespace()
    proxy._fsa_trusted = True
    checkpoint_utils.torch = proxy
    distributed_utils.torch = proxy  # ranks > 0 unpickle the checkpoint rank 0 broadcasts


def _all_finite(model) -> bool:
    return all(torch.isfinite(p).all().item() for p in model.parameters())


def _floating_point_error_in_chain(exc):
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, FloatingPointError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def install_divergence_guard():
    from fairseq import checkpoint_utils
    from fairseq.trainer import Trainer

    if getattr(checkpoint_utils.save_checkpoint, "_fsa_guarded", False):
        return
    original_save = checkpoint_utils.save_checkpoint

    @functools.wraps(original_save)
    def save_checkpoint(cfg, trainer, epoch_itr, val_loss):
        if val_loss is not None and not math.isfinite(float(val_loss)):
            raise TrainingDivergedError(
                f"training diverged: validation loss is {val_loss} at update "
                f"{trainer.get_num_updates()}; no checkpoint was saved from this model. "
                "(ReLU attention without an output norm is known to fail to train: "
                "ReLA Table 1 row 4; use --attn-output-norm gated_rmsnorm or rmsnorm_i.)"
            )
        if not _all_finite(trainer.get_model()):
            raise TrainingDivergedError(
                f"training diverged: the model has NaN/inf parameters at update "
                f"{trainer.get_num_updates()}; no checkpoint was saved."
            )
        return original_save(cfg, trainer, epoch_itr, val_loss)

    save_checkpoint._fsa_guarded = True
    checkpoint_utils.save_checkpoint = save_checkpoint

    original_train_step = Trainer.train_step

    @functools.wraps(original_train_step)
    def train_step(self, samples, raise_oom=False):
        try:
            return original_train_step(self, samples, raise_oom=raise_oom)
        except TrainingDivergedError:
            raise
        except Exception as e:
            # fairseq raises FloatingPointError("gradients are Nan/Inf") and then re-runs
            # the step under its NanDetector, whose hooks can themselves fail (StopIteration
            # on torch >= 2.x): look for the FloatingPointError in the exception chain
            cause = _floating_point_error_in_chain(e)
            if cause is None:
                raise
            raise TrainingDivergedError(
                f"training diverged at update {self.get_num_updates()}: {cause}. "
                "Stopping; no checkpoint_last/checkpoint_best is written from the diverged "
                "model (fairseq may leave crash.pt, its debugging dump of the failing state)."
            ) from e

    Trainer.train_step = train_step


def check_data_dirs(data: str):
    """Clear error for a translation data directory that does not exist or is empty."""
    import os

    from fairseq import utils

    for path in utils.split_paths(data or ""):
        if "://" in path:  # remote storage handled by fairseq's PathManager
            continue
        if not os.path.isdir(path):
            raise FileNotFoundError(
                f"data directory {path!r} does not exist: expected the output folder of "
                "fairseq-preprocess (dict.<lang>.txt, <split>.<src>-<tgt>.<lang>.bin/.idx)"
            )
        if not any(f.startswith("dict.") and f.endswith(".txt") for f in os.listdir(path)):
            raise FileNotFoundError(
                f"data directory {path!r} has no dict.<lang>.txt: is it the output folder "
                "of fairseq-preprocess?"
            )


def install_data_dir_check():
    from fairseq.tasks.translation import TranslationTask

    original = TranslationTask.setup_task.__func__
    if getattr(original, "_fsa_checked", False):
        return

    def setup_task(cls, cfg, **kwargs):
        check_data_dirs(getattr(cfg, "data", None))
        return original(cls, cfg, **kwargs)

    setup_task._fsa_checked = True
    TranslationTask.setup_task = classmethod(setup_task)


def _complete_batches(batches, indices, num_tokens_fn, max_tokens, max_sentences, num_tokens_vec):
    """Append the indices ``batches`` lost, as extra batches within the same limits."""
    import numpy as np

    covered = sum(len(b) for b in batches)
    if covered >= len(indices):
        return batches
    seen = set()
    for b in batches:
        seen.update(int(i) for i in b)
    missing = [int(i) for i in indices if int(i) not in seen]
    max_sentences = max_sentences if max_sentences and max_sentences > 0 else len(missing)
    max_tokens = max_tokens if max_tokens and max_tokens > 0 else None

    def tokens(i):
        return int(num_tokens_vec[i]) if num_tokens_vec is not None else int(num_tokens_fn(i))

    extra, current, longest = [], [], 0
    for i in missing:
        longest_if_added = max(longest, tokens(i))
        too_many = len(current) >= max_sentences
        too_long = max_tokens is not None and current and longest_if_added * (len(current) + 1) > max_tokens
        if current and (too_many or too_long):
            extra.append(current)
            current, longest_if_added = [], tokens(i)
        current.append(i)
        longest = longest_if_added
    if current:
        extra.append(current)
    dtype = batches[0].dtype if len(batches) and hasattr(batches[0], "dtype") else np.int64
    return list(batches) + [np.array(b, dtype=dtype) for b in extra]


def install_batching_fix():
    from fairseq.data import data_utils

    original = data_utils.batch_by_size
    if getattr(original, "_fsa_complete", False):
        return

    @functools.wraps(original)
    def batch_by_size(indices, num_tokens_fn, num_tokens_vec=None, max_tokens=None,
                      max_sentences=None, required_batch_size_multiple=1, fixed_shapes=None):
        batches = original(indices, num_tokens_fn, num_tokens_vec=num_tokens_vec,
                           max_tokens=max_tokens, max_sentences=max_sentences,
                           required_batch_size_multiple=required_batch_size_multiple,
                           fixed_shapes=fixed_shapes)
        if fixed_shapes is not None:
            return batches
        return _complete_batches(batches, indices, num_tokens_fn, max_tokens, max_sentences,
                                 num_tokens_vec)

    batch_by_size._fsa_complete = True
    data_utils.batch_by_size = batch_by_size


# --- 5. multi-process training on CPU -------------------------------------------------


class DistributedSetupError(RuntimeError):
    """A multi-process CPU run whose world cannot be formed as configured."""


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
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist],
                             capture_output=True, text=True, timeout=30)
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
        nodelist = next((env[k] for k in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
                                          "SLURM_NODELIST") if env.get(k)), None)
        if nodelist is None:
            raise DistributedSetupError(
                f"SLURM task {rank} of {world}: no SLURM_STEP_NODELIST/SLURM_JOB_NODELIST/"
                "SLURM_NODELIST to find the first node (the rendezvous host)")
        port = distributed_port if distributed_port and distributed_port > 0 else None
        if port is None and env.get("MASTER_PORT"):
            port = _env_int("MASTER_PORT", env)
        if port is None:
            # the same for every task of one srun step, different for concurrent steps
            key = "{}.{}.{}".format(env.get("SLURM_JOB_ID", ""), env.get("SLURM_ARRAY_TASK_ID", ""),
                                    env.get("SLURM_STEP_ID", env.get("SLURM_STEPID", "")))
            port = random.Random(key).randint(10000, 60000)
        init_method = f"tcp://{first_slurm_host(nodelist)}:{port}"
    return dict(launcher=launcher, rank=rank, world_size=world,
                local_rank=local if local is not None else 0, init_method=init_method)


def _runs_on_cpu(cfg) -> bool:
    import torch

    return not cfg.common.tpu and (cfg.common.cpu or not torch.cuda.is_available())


def configure_cpu_distributed(cfg, env=None):
    """Fill ``cfg.distributed_training`` for a multi-process CPU run (see 5. above).
    Leaves a single-process run untouched; raises DistributedSetupError for a world
    that cannot be formed."""
    import torch

    dt = cfg.distributed_training
    # fairseq's default is max(1, GPUs): 1 on CPU, the GPU count with --cpu on a GPU machine
    default_world = max(1, torch.cuda.device_count())
    launched = cpu_launcher_world(env, dt.distributed_port)
    if launched is not None:
        if dt.distributed_init_method is not None:
            raise DistributedSetupError(
                f"--distributed-init-method {dt.distributed_init_method} was given but the "
                f"process was started by {launched['launcher']}, which sets up the world itself: "
                "drop one of them")
        if dt.distributed_world_size not in (1, default_world, launched["world_size"]):
            raise DistributedSetupError(
                f"--distributed-world-size {dt.distributed_world_size} but {launched['launcher']} "
                f"started {launched['world_size']} processes")
        dt.distributed_world_size = launched["world_size"]
        dt.distributed_rank = launched["rank"]
        dt.device_id = launched["local_rank"]
        dt.distributed_init_method = launched["init_method"]
        how = launched["launcher"]
    elif dt.distributed_init_method is not None:
        if dt.distributed_world_size <= 1:
            raise DistributedSetupError(
                f"--distributed-init-method {dt.distributed_init_method} needs "
                "--distributed-world-size N > 1 and --distributed-rank R for each process")
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
            "with --distributed-init-method tcp://HOST:PORT --distributed-rank R")
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
        f"init {dt.distributed_init_method}")
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
        return ddp_class(module, device_ids=device_ids, output_device=output_device, **kwargs)

    distributed_fairseq_model.DistributedDataParallel = DistributedDataParallel


def install():
    """Idempotent; called from ``fairseq_sparse_attn/__init__.py``."""
    global _INSTALLED
    if _INSTALLED:
        return
    install_checkpoint_loading_fix()
    install_divergence_guard()
    install_data_dir_check()
    install_batching_fix()
    install_cpu_distributed_fix()
    _INSTALLED = True
