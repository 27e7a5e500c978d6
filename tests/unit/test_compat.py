"""The compat patches, checked directly, in this process (the real runs: tests/integration/
test_compat_processes.py, test_distributed.py, test_resume.py)."""

import inspect
import re

import numpy as np
import pytest
from fairseq.data import data_utils

import fairseq_sparse_attn.plugin  # noqa: F401  (installs the shims)


@pytest.mark.parametrize("n", [447, 1000, 13, 9, 1])
@pytest.mark.parametrize("max_tokens", [None, 2000])
def test_batch_by_size_keeps_every_index(n, max_tokens):
    """Stock fairseq drops the last n % 8 examples with --required-batch-size-multiple 8."""
    sizes = np.random.RandomState(0).randint(5, 300, n)
    batches = data_utils.batch_by_size(
        np.arange(n),
        num_tokens_fn=lambda i: sizes[i],
        max_tokens=max_tokens,
        max_sentences=32,
        required_batch_size_multiple=8,
        num_tokens_vec=sizes,
    )
    flat = sorted(int(i) for b in batches for i in b)
    assert flat == list(range(n))
    assert all(len(b) <= 32 for b in batches)
    if max_tokens:
        assert all(len(b) * sizes[b].max() <= max_tokens for b in batches)


def test_extra_batches_sized_from_true_lengths():
    """fairseq passes ``num_tokens_vec`` aligned with ``indices`` (filtered, size-sorted
    ids): the extra batches take each sentence's length at its position, so they stay
    within --max-tokens computed from the true lengths (and no id indexes past the
    vector, the IndexError of a filtered training)."""
    rng = np.random.RandomState(1)
    lengths = rng.randint(2, 200, 600)  # by dataset id
    kept = np.sort(rng.choice(600, 447, replace=False))  # ids left after size filtering
    indices = kept[np.argsort(lengths[kept], kind="mergesort")]
    vec = lengths[indices]  # aligned with positions, as fairseq passes it
    batches = data_utils.batch_by_size(
        indices,
        num_tokens_fn=lambda i: lengths[i],
        num_tokens_vec=vec,
        max_tokens=1000,
        max_sentences=32,
        required_batch_size_multiple=8,
    )
    assert sorted(int(i) for b in batches for i in b) == sorted(int(i) for i in indices)
    for b in batches:
        assert len(b) <= 32 and len(b) * lengths[b].max() <= 1000
    # the extra batches alone, built from the sentences fairseq left out
    from fairseq_sparse_attn.compat.batching import stock_batches

    with stock_batches():
        stock = data_utils.batch_by_size(
            indices,
            num_tokens_fn=lambda i: lengths[i],
            num_tokens_vec=vec,
            max_tokens=1000,
            max_sentences=32,
            required_batch_size_multiple=8,
        )
    assert all((a == b).all() for a, b in zip(stock, batches))  # fairseq's batches kept as they are
    if sum(map(len, stock)) < len(indices):  # some were left out (fairseq-fixed 0.12.3.1)
        assert len(batches) > len(stock)  # so extra batches were built
    else:  # fairseq 0.12.2 left none out: its batches, unchanged
        assert len(batches) == len(stock)
    # the extra batches for sentences left out, wherever fairseq leaves them: sized from the
    # true lengths at their positions
    from fairseq_sparse_attn.compat.batching import _complete_batches

    completed = _complete_batches(stock[:-2], indices, lambda i: lengths[i], 1000, 32, vec)
    assert sorted(int(i) for b in completed for i in b) == sorted(int(i) for i in indices)
    assert len(completed) > len(stock) - 2
    for b in completed:
        assert len(b) <= 32 and len(b) * lengths[b].max() <= 1000


def test_training_batches_are_stock_unless_asked(monkeypatch):
    """Inside Trainer.get_train_iterator batch_by_size returns fairseq's own batches, also
    where fairseq makes them later, every epoch, through the iterator's batch_sampler
    (--update-epoch-batch-itr); FSA_COMPLETE_TRAIN_BATCHES=1 completes them, =0 does not."""
    from types import SimpleNamespace

    from fairseq import trainer

    from fairseq_sparse_attn.compat import batching

    sizes = np.random.RandomState(0).randint(5, 50, 203)

    def make_batches(dataset, epoch):
        return data_utils.batch_by_size(np.arange(203), lambda i: sizes[i], sizes, None, 8, 8)

    def fake_get_train_iterator(self, epoch):
        return SimpleNamespace(first=make_batches(None, epoch), batch_sampler=make_batches)

    def covered(batches):
        return sum(len(b) for b in batches)

    monkeypatch.setattr(trainer.Trainer, "get_train_iterator", fake_get_train_iterator)
    monkeypatch.delattr(data_utils.batch_by_size, "_fsa_complete")
    monkeypatch.setattr(data_utils, "batch_by_size", data_utils.batch_by_size.__wrapped__)
    # fairseq's own batching: 200 here, 203 % 8 left out (fairseq-fixed 0.12.3.1); 0.12.2
    # leaves none out
    stock = covered(data_utils.batch_by_size(np.arange(203), lambda i: sizes[i], sizes, None, 8, 8))
    assert stock in (200, 203)
    batching.install_batching_fix()
    for setting, expected in ((None, stock), ("0", stock), ("1", 203)):
        if setting is None:
            monkeypatch.delenv(batching.COMPLETE_TRAIN, raising=False)
        else:
            monkeypatch.setenv(batching.COMPLETE_TRAIN, setting)
        itr = trainer.Trainer.get_train_iterator(None, 1)
        assert covered(itr.first) == expected, setting
        assert covered(itr.batch_sampler(None, 2)) == expected, setting  # called after get_train_iterator returned
    assert covered(data_utils.batch_by_size(np.arange(203), lambda i: sizes[i], sizes, None, 8, 8)) == 203


def test_resumed_epoch_trains_the_batches_of_an_uninterrupted_run():
    """A process started at epoch 3 (a resume) trains epoch 3's batches, in the order, of a
    process that started at epoch 1: fairseq built them with seed + 3 and shuffled them
    with the same seed + 3."""
    from types import SimpleNamespace

    import torch
    from fairseq.data import Dictionary, LanguagePairDataset
    from fairseq.tasks import FairseqTask

    d = Dictionary()
    for w in "abcdef":
        d.add_symbol(w)
    lengths = np.random.RandomState(1).randint(2, 6, 120)  # many equal lengths: ties for the seed to break
    src = [torch.full((int(n),), d.index("a")) for n in lengths]
    ds = LanguagePairDataset(src, lengths, d, [t.clone() for t in src], lengths, d)

    def epoch_batches(itr):
        return [sample["id"].tolist() for sample in itr.next_epoch_itr(shuffle=True)]

    uninterrupted = FairseqTask(SimpleNamespace()).get_batch_iterator(ds, max_tokens=40, seed=7, epoch=1)
    epochs = [epoch_batches(uninterrupted) for _ in range(3)]
    resumed = FairseqTask(SimpleNamespace()).get_batch_iterator(ds, max_tokens=40, seed=7, epoch=3)
    assert epochs[0] != epochs[2]  # the epochs do differ
    assert epoch_batches(resumed) == epochs[2]


def test_exact_resume_is_installed_only_where_fairseq_seeds_the_batches_by_epoch(monkeypatch):
    """fairseq 0.12.2 orders an epoch's indices under numpy_seed(seed), the same in every
    epoch, so its resume is already exact, and the patch (which builds a later epoch's
    batches with seed + 1 - epoch, undoing fairseq-fixed's seed + epoch) made it build other
    batches there.  It is installed only where the epoch is in the seed."""
    from fairseq.tasks import FairseqTask

    from fairseq_sparse_attn.compat import exact_resume

    def seeded_by(offset):
        def get_batch_iterator(self, dataset, seed=1, epoch=1, **kwargs):
            with data_utils.numpy_seed(seed + offset(epoch)):
                dataset.ordered_indices()

        return get_batch_iterator

    installed = FairseqTask.get_batch_iterator  # patched where the installed fairseq seeds by epoch
    assert getattr(installed, "_fsa_exact_resume", False) == fairseq_seeds_by_epoch()
    assert exact_resume.epoch_seeds_batches(inspect.unwrap(installed)) == fairseq_seeds_by_epoch()
    assert exact_resume.epoch_seeds_batches(seeded_by(lambda epoch: epoch))
    by_seed = seeded_by(lambda epoch: 0)  # as 0.12.2
    assert not exact_resume.epoch_seeds_batches(by_seed)
    monkeypatch.setattr(FairseqTask, "get_batch_iterator", by_seed)
    exact_resume.install()
    assert FairseqTask.get_batch_iterator is by_seed  # left as it is
    monkeypatch.setattr(FairseqTask, "get_batch_iterator", seeded_by(lambda epoch: epoch))
    exact_resume.install()
    assert FairseqTask.get_batch_iterator._fsa_exact_resume


def fairseq_seeds_by_epoch():
    """Whether the installed fairseq's get_batch_iterator says ``numpy_seed(seed + epoch)``
    (an independent reading: its source)."""
    from fairseq.tasks import FairseqTask

    return "seed + epoch" in inspect.getsource(inspect.unwrap(FairseqTask.get_batch_iterator))


def _trainer_stub(value):
    """What the guarded save reads of a trainer: its model (weights filled with ``value``)
    and its update count."""
    from types import SimpleNamespace

    import torch

    model = torch.nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.fill_(value)
    return SimpleNamespace(get_model=lambda: model, get_num_updates=lambda: 7)


def test_no_checkpoint_from_a_diverged_model(monkeypatch):
    """checkpoint_utils.save_checkpoint refuses an infinite or NaN validation loss, and
    NaN/inf parameters (also without a validation loss, e.g. --disable-validation)."""
    import math

    from fairseq import checkpoint_utils
    from fairseq.trainer import Trainer

    from fairseq_sparse_attn.compat import divergence_guard
    from fairseq_sparse_attn.errors import TrainingDivergedError

    saved = []
    monkeypatch.setattr(checkpoint_utils, "save_checkpoint", lambda cfg, trainer, itr, loss: saved.append(loss))
    monkeypatch.setattr(Trainer, "train_step", Trainer.train_step)  # put back after the test
    divergence_guard.install_divergence_guard()
    for loss in (math.inf, -math.inf, math.nan):
        with pytest.raises(TrainingDivergedError, match=f"validation loss is {loss} at update 7"):
            checkpoint_utils.save_checkpoint(None, _trainer_stub(0.0), None, loss)
    for value in (math.nan, math.inf):
        with pytest.raises(TrainingDivergedError, match="NaN/inf parameters at update 7"):
            checkpoint_utils.save_checkpoint(None, _trainer_stub(value), None, None)
    checkpoint_utils.save_checkpoint(None, _trainer_stub(0.0), None, 1.5)
    checkpoint_utils.save_checkpoint(None, _trainer_stub(0.0), None, None)
    assert saved == [1.5, None]


def test_divergence_found_behind_the_nan_detector_rerun(monkeypatch):
    """fairseq re-runs a step whose gradients are NaN/inf under its NanDetector, inside
    ``except FloatingPointError``; when that re-run fails too (StopIteration on torch 2)
    the FloatingPointError is only the new error's __context__.  The user still gets the
    one "training diverged" line."""
    from types import SimpleNamespace

    from fairseq import checkpoint_utils
    from fairseq.trainer import Trainer

    from fairseq_sparse_attn.compat import divergence_guard
    from fairseq_sparse_attn.errors import TrainingDivergedError

    def failing_step(self, samples, raise_oom=False):
        try:
            raise FloatingPointError("gradients are Nan/Inf")
        except FloatingPointError:
            raise StopIteration  # noqa: B904  (implicit: the FloatingPointError is its __context__)

    def other_failure(self, samples, raise_oom=False):
        raise StopIteration

    monkeypatch.setattr(checkpoint_utils, "save_checkpoint", lambda *a: None)
    stub = SimpleNamespace(get_num_updates=lambda: 12)
    monkeypatch.setattr(Trainer, "train_step", failing_step)
    divergence_guard.install_divergence_guard()
    with pytest.raises(TrainingDivergedError, match="training diverged at update 12: gradients are Nan/Inf"):
        Trainer.train_step(stub, [])
    monkeypatch.setattr(Trainer, "train_step", other_failure)
    # an unguarded save_checkpoint again, or install_divergence_guard would see itself
    # installed and leave other_failure unwrapped
    monkeypatch.setattr(checkpoint_utils, "save_checkpoint", lambda *a: None)
    divergence_guard.install_divergence_guard()
    with pytest.raises(StopIteration):  # no FloatingPointError in its chain: passed on as it is
        Trainer.train_step(stub, [])


def test_checkpoint_loader_trusts_fairseq_checkpoints_only(tmp_path):
    """A checkpoint holding an argparse Namespace (as fairseq's do) loads through fairseq's
    loader, while torch.load elsewhere in the process keeps the weights_only default."""
    import argparse

    import torch
    from fairseq import checkpoint_utils

    path = tmp_path / "ckpt.pt"
    torch.save({"args": argparse.Namespace(arch="sparse_transformer"), "model": {}}, path)
    state = checkpoint_utils.torch.load(path)  # the call load_checkpoint_to_cpu makes
    assert state["args"].arch == "sparse_transformer"
    assert torch.load is torch.serialization.load
    with pytest.raises(Exception, match="[Ww]eights only"):
        torch.load(path)


# --- multi-process training on CPU (compat.cpu_distributed); real runs: test_distributed.py ---

import subprocess  # noqa: E402

from fairseq_sparse_attn import compat  # noqa: E402
from fairseq_sparse_attn.compat import cpu_distributed  # noqa: E402


def training_cfg(*flags):
    """fairseq-train's config for these flags, as fairseq builds it."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, ["data-bin", "--arch", "transformer", *flags])
    return convert_namespace_to_omegaconf(args)


TORCHRUN = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


def slurm(rank, **extra):
    return {
        "SLURM_JOB_ID": "77",
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank % 2),
        "SLURM_NTASKS": "4",
        "SLURM_JOB_NODELIST": "cn[07-08]",
        **extra,
    }


@pytest.fixture
def no_scontrol(monkeypatch):
    """The node-list parser, also on a machine where scontrol is installed."""
    real_run = subprocess.run

    def run(cmd, *args, **kwargs):
        if cmd and cmd[0] == "scontrol":
            raise FileNotFoundError("scontrol")
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(cpu_distributed.subprocess, "run", run)


@pytest.mark.parametrize(
    "nodelist,first",
    [
        ("localhost", "localhost"),
        ("gpu7", "gpu7"),
        ("cn[07-08]", "cn07"),
        ("node[003-005,009],login1", "node003"),
        ("n[4,1-2]", "n4"),
        ("r[1-2]c[3-4],x", "r1c3"),
    ],
)
def test_first_slurm_host(no_scontrol, nodelist, first):
    assert compat.first_slurm_host(nodelist) == first


@pytest.mark.parametrize("bad", ["cn[07-08", "cn[1[2]]", ""])
def test_first_slurm_host_bad_list(no_scontrol, bad):
    with pytest.raises(compat.DistributedSetupError, match="SLURM node list"):
        compat.first_slurm_host(bad)


def test_launcher_world_from_torchrun_and_slurm(no_scontrol):
    assert compat.cpu_launcher_world({}) is None
    assert compat.cpu_launcher_world({**TORCHRUN, "WORLD_SIZE": "1", "RANK": "0"}) is None
    assert compat.cpu_launcher_world(TORCHRUN) == dict(
        launcher="torchrun", rank=1, world_size=2, local_rank=1, init_method="env://"
    )
    # torchrun started inside a SLURM allocation: torchrun's world
    assert compat.cpu_launcher_world({**slurm(3), **TORCHRUN})["launcher"] == "torchrun"
    worlds = [compat.cpu_launcher_world(slurm(r)) for r in range(4)]
    assert [(w["rank"], w["local_rank"], w["world_size"]) for w in worlds] == [
        (0, 0, 4),
        (1, 1, 4),
        (2, 0, 4),
        (3, 1, 4),
    ]
    # every task meets at the same address: the first node, a port derived from the job
    assert len({w["init_method"] for w in worlds}) == 1
    assert re.fullmatch(r"tcp://cn07:\d+", worlds[0]["init_method"])
    assert compat.cpu_launcher_world(slurm(0), distributed_port=1234)["init_method"] == "tcp://cn07:1234"
    assert compat.cpu_launcher_world(slurm(0, MASTER_PORT="4321"))["init_method"] == "tcp://cn07:4321"
    # srun's step variables win over the job's (the batch script is a task of its own)
    step = compat.cpu_launcher_world(slurm(1, SLURM_STEP_NUM_TASKS="2", SLURM_STEP_NODELIST="cn08"))
    assert (step["world_size"], step["init_method"].split(":")[1]) == (2, "//cn08")
    assert compat.cpu_launcher_world(slurm(0, SLURM_NTASKS="1")) is None


@pytest.mark.parametrize(
    "env,message",
    [
        ({**TORCHRUN, "RANK": "2"}, "rank 2 is outside a world of 2"),
        ({**TORCHRUN, "WORLD_SIZE": "two"}, r"\$WORLD_SIZE must be an integer"),
        ({k: v for k, v in slurm(1).items() if k != "SLURM_JOB_NODELIST"}, "no SLURM_STEP_NODELIST"),
    ],
)
def test_launcher_world_bad_environment(no_scontrol, env, message):
    with pytest.raises(compat.DistributedSetupError, match=message):
        compat.cpu_launcher_world(env)


def test_configure_cpu_distributed_from_torchrun():
    cfg = training_cfg()
    dt = cfg.distributed_training
    assert (dt.distributed_world_size, dt.distributed_backend) == (1, "nccl")  # fairseq on CPU
    compat.configure_cpu_distributed(cfg, env=TORCHRUN)
    assert (dt.distributed_world_size, dt.distributed_rank, dt.device_id) == (2, 1, 1)
    assert (dt.distributed_init_method, dt.distributed_backend) == ("env://", "gloo")
    assert dt.distributed_no_spawn
    # an explicit backend other than nccl is kept
    cfg = training_cfg("--distributed-backend", "mpi")
    compat.configure_cpu_distributed(cfg, env=TORCHRUN)
    assert cfg.distributed_training.distributed_backend == "mpi"
    # one process: untouched
    cfg = training_cfg()
    before = dict(cfg.distributed_training)
    compat.configure_cpu_distributed(cfg, env={})
    assert dict(cfg.distributed_training) == before


def test_configure_cpu_distributed_manual_init_method():
    cfg = training_cfg(
        "--distributed-init-method", "tcp://10.0.0.1:5000", "--distributed-world-size", "3", "--distributed-rank", "2"
    )
    compat.configure_cpu_distributed(cfg, env={})
    dt = cfg.distributed_training
    assert (dt.distributed_world_size, dt.distributed_rank, dt.distributed_backend) == (3, 2, "gloo")
    assert dt.distributed_no_spawn


@pytest.mark.parametrize(
    "flags,env,message",
    [
        (
            ["--distributed-world-size", "2"],
            {},
            "fairseq starts one process per GPU.*torchrun --no-python --nproc_per_node 2 fsa-train",
        ),
        (["--distributed-world-size", "4"], TORCHRUN, "--distributed-world-size 4 but torchrun started 2"),
        (["--distributed-init-method", "tcp://h:1"], TORCHRUN, "drop one of them"),
        (["--distributed-init-method", "tcp://h:1"], {}, "needs --distributed-world-size N > 1"),
    ],
)
def test_configure_cpu_distributed_errors(flags, env, message):
    with pytest.raises(compat.DistributedSetupError, match=message):
        compat.configure_cpu_distributed(training_cfg(*flags), env=env)


def test_cpu_flag_on_a_gpu_machine(monkeypatch):
    """--cpu where 4 GPUs are visible: fairseq's default world is 4 (it would spawn 4 CPU
    processes with nccl); without a launcher that is one process, under torchrun its world."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    # (fairseq computed its default when it was imported here: give the 4-GPU value)
    gpu_default = ["--cpu", "--distributed-world-size", "4"]
    cfg = training_cfg(*gpu_default)
    assert compat._runs_on_cpu(cfg)
    compat.configure_cpu_distributed(cfg, env={})
    assert cfg.distributed_training.distributed_world_size == 1
    assert cfg.distributed_training.distributed_init_method is None
    cfg = training_cfg(*gpu_default)
    compat.configure_cpu_distributed(cfg, env=TORCHRUN)
    dt = cfg.distributed_training
    assert (dt.distributed_world_size, dt.distributed_rank, dt.distributed_backend) == (2, 1, "gloo")


def test_call_main_leaves_gpu_runs_to_fairseq(monkeypatch):
    """With CUDA visible (and no --cpu) fairseq's own setup runs: nccl, nothing changed.
    What fairseq's own does under torchrun's variables differs by version (fairseq-fixed
    0.12.3.1 runs ``main`` in this process with a world of 1; 0.12.2 starts its distributed
    main, on the GPU, here recorded instead): the plugin's goes the same way with the same
    configuration."""
    import torch
    from fairseq.distributed import utils as distributed_utils

    for k, v in TORCHRUN.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

    def run(call_main):
        seen = []
        record = lambda path: lambda i, main, c, kwargs: seen.append((path, dict(c.distributed_training)))  # noqa: E731
        monkeypatch.setattr(distributed_utils, "distributed_main", record("distributed_main"))
        call_main(training_cfg(), lambda c: seen.append(("main", dict(c.distributed_training))))
        return seen

    stock, ours = run(inspect.unwrap(distributed_utils.call_main)), run(distributed_utils.call_main)
    assert ours == stock and len(ours) == 1 and ours[0][1]["distributed_backend"] == "nccl", (ours, stock)
    cfg = training_cfg()
    assert not compat._runs_on_cpu(cfg)
    assert compat._runs_on_cpu(training_cfg("--cpu"))  # --cpu on a GPU machine: the CPU path
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert compat._runs_on_cpu(training_cfg())


# --- --bf16 is not --tpu (bf16_not_tpu) ----------------------------------------------


def stock_training_cfg(*flags):
    """``training_cfg`` through fairseq's own parse_args_and_arch (the patch's original)."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    stock = inspect.unwrap(options.parse_args_and_arch)  # under every patch's wrapper
    args = stock(options.get_training_parser(), ["data-bin", "--arch", "transformer", *flags])
    return convert_namespace_to_omegaconf(args)


@pytest.mark.parametrize("flag", ["--bf16", "--memory-efficient-bf16"])
def test_bf16_without_torch_xla_is_not_a_tpu_run(flag, caplog):
    """fairseq 0.12 sets --tpu for --bf16 (Trainer then asks torch_xla for its device);
    without torch_xla and without --tpu the run stays on CUDA / the CPU, in bf16, and
    fairseq's Adam is not its TPU branch.  One INFO line says so."""
    from fairseq import utils

    assert utils.xm is None  # torch_xla is not installed here
    assert stock_training_cfg(flag).common.tpu  # the stock shortcut
    with caplog.at_level("INFO", logger="fairseq_sparse_attn.compat.bf16_not_tpu"):
        cfg = training_cfg(flag, "--optimizer", "adam")
    assert (cfg.common.bf16, cfg.common.tpu, cfg.optimizer.tpu, cfg.distributed_training.tpu) == (
        True,
        False,
        False,
        False,
    )
    lines = [r.getMessage() for r in caplog.records if r.name.endswith("bf16_not_tpu")]
    assert len(lines) == 1 and lines[0].startswith("--bf16 without torch_xla and without --tpu: bfloat16 on ")
    assert "fairseq issue #4696" in lines[0]


def test_bf16_stays_a_tpu_run_with_torch_xla_or_tpu(monkeypatch, caplog):
    """--tpu asked for, or torch_xla installed: fairseq's behaviour (a TPU run), no line."""
    from fairseq import utils

    with caplog.at_level("INFO", logger="fairseq_sparse_attn.compat.bf16_not_tpu"):
        assert training_cfg("--bf16", "--tpu").common.tpu
        assert not training_cfg("--tpu").common.bf16 and training_cfg("--tpu").common.tpu
        assert not training_cfg().common.tpu and not training_cfg().common.bf16
        monkeypatch.setattr(utils, "xm", object())  # as when torch_xla imports
        assert training_cfg("--bf16").common.tpu
    assert not [r for r in caplog.records if r.name.endswith("bf16_not_tpu")]


def test_asked_for_tpu_reads_the_command_line_as_fairseq_does(monkeypatch):
    from fairseq_sparse_attn.compat import bf16_not_tpu

    assert bf16_not_tpu.asked_for_tpu(["data-bin", "--bf16", "--tpu"])
    assert not bf16_not_tpu.asked_for_tpu(["data-bin", "--bf16", "--tp"])  # no abbreviations
    monkeypatch.setattr("sys.argv", ["fairseq-train", "data-bin", "--tpu"])
    assert bf16_not_tpu.asked_for_tpu(None)  # fairseq's commands parse sys.argv


# --- --fp16 needs CUDA (fp16_needs_cuda) ---------------------------------------------


def test_fp16_training_without_cuda_is_refused_and_generation_is_not(monkeypatch):
    """A training command line with --fp16 (flat master weights) and no CUDA device, or
    --cpu, is one UsageError at parse time naming --bf16; on a CUDA machine it passes;
    fairseq-generate's --fp16 (half precision on any device) is left alone, and so are
    --memory-efficient-fp16 and --fp16 --fp16-no-flatten-grads, which stock fairseq trains
    on a CPU (refused until 2026-11-28)."""
    import torch
    from fairseq import options

    from fairseq_sparse_attn.compat import fp16_needs_cuda
    from fairseq_sparse_attn.errors import UsageError

    def train(*flags):
        parser = options.get_training_parser()
        return options.parse_args_and_arch(parser, ["data", "--arch", "transformer", "--task", "translation", *flags])

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(
        UsageError, match=r"^--fp16 trains on a CUDA GPU .* this machine has no CUDA device: use --bf16"
    ):
        train("--fp16")
    assert train("--memory-efficient-fp16").memory_efficient_fp16 is True
    assert train("--fp16", "--fp16-no-flatten-grads").fp16 is True
    assert train("--memory-efficient-fp16", "--cpu").cpu is True
    assert train().fp16 is False
    generate = options.parse_args_and_arch(options.get_generation_parser(), ["data", "--path", "m.pt", "--fp16"])
    assert generate.fp16 is True
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert train("--fp16").fp16 is True
    with pytest.raises(UsageError, match="and --cpu is given"):
        train("--fp16", "--cpu")
    assert fp16_needs_cuda.fp16_without_cuda(train()) is None


# --- save points at epoch ends (epoch_end_save_points) -------------------------------------
def test_epoch_end_save_point_copies_only_what_this_save_wrote_and_prunes_as_fairseq(tmp_path):
    """The copy is taken from a checkpoint this save wrote: with --no-last-checkpoints a
    checkpoint_last.pt left by an earlier run is not it.  Pruning is fairseq's own rule,
    --keep-interval-updates-pattern included (checkpoints at multiples of it are kept)."""
    from types import SimpleNamespace

    from fairseq_sparse_attn.compat import epoch_end_save_points as E

    def cfg(**kw):
        base = dict(
            save_dir=str(tmp_path),
            no_last_checkpoints=False,
            no_epoch_checkpoints=True,
            save_interval=1,
            save_interval_updates=5,
            keep_interval_updates=2,
            keep_interval_updates_pattern=-1,
        )
        return SimpleNamespace(**{**base, **kw})

    assert E.missed_save_point(cfg(), 10, True) and not E.missed_save_point(cfg(), 10, False)
    assert not E.missed_save_point(cfg(), 12, True) and not E.missed_save_point(cfg(save_interval_updates=0), 10, True)
    (tmp_path / "checkpoint_last.pt").write_text("left from an earlier run")
    assert E._written(cfg(no_last_checkpoints=True), 2, "") is None
    assert E._written(cfg(), 2, "") == str(tmp_path / "checkpoint_last.pt")
    (tmp_path / "checkpoint2.pt").write_text("epoch 2")
    assert E._written(cfg(no_last_checkpoints=True, no_epoch_checkpoints=False), 2, "") == str(
        tmp_path / "checkpoint2.pt"
    )
    for u in (5, 10, 15, 20):
        (tmp_path / f"checkpoint_1_{u}.pt").write_text("")
    E.prune_update_checkpoints(cfg(keep_interval_updates=1, keep_interval_updates_pattern=10))  # 10, 20 kept
    assert sorted(p.name for p in tmp_path.glob("checkpoint_1_*.pt")) == [f"checkpoint_1_{u}.pt" for u in (10, 15, 20)]
    E.prune_update_checkpoints(cfg(keep_interval_updates=1))
    assert sorted(p.name for p in tmp_path.glob("checkpoint_1_*.pt")) == ["checkpoint_1_20.pt"]
