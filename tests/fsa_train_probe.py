"""``fsa-train`` with observation points, for tests/test_distributed.py (not a user tool).

    FSA_PROBE_DIR=DIR python tests/fsa_train_probe.py DATA-BIN <fairseq-train args>

runs exactly what ``fsa-train`` runs (``fairseq_sparse_attn.cli.train``) in this process
and writes, per rank R (torchrun's RANK, else SLURM_PROCID, else 0):

- ``DIR/updates.rankR.jsonl``: one line per update, from inside fairseq's
  ``Trainer.train_step``: the update number, the training loss fairseq logs for it before
  rounding (summed ``loss`` / summed ``sample_size`` / ln 2 over the logging outputs after
  they were gathered from all ranks, as label_smoothed_cross_entropy computes it), the
  example ids this rank's batches held, and the world size torch.distributed reports;
- ``DIR/params.rankR.pt``: the model's parameters when training has finished.

``FSA_PROBE_COMMAND=fairseq-train`` runs fairseq's own ``fairseq-train`` (``fairseq_cli.train``)
instead, which imports the plugin only for a ``--user-dir`` on the command line.

``FSA_PROBE_SAVE_DIR_PER_RANK=1`` turns ``--save-dir X`` into ``X/rankR``, to see which
ranks write checkpoints.

Interruptions at a known point (for tests/integration/test_resume.py):

- ``FSA_PROBE_SIGNAL=INT@17`` (or ``KILL@17``): the process sends itself that signal right
  after update 17 was recorded;
- ``FSA_PROBE_SIGNAL_RANK=1``: only that rank sends itself ``FSA_PROBE_SIGNAL``, and
  only in the first run of a torchrun group (``TORCHELASTIC_RESTART_COUNT`` 0);
- ``FSA_PROBE_WAIT_AT=6``: after update 6, each rank writes ``DIR/waiting.rankR`` (its pid)
  and waits, at most 120 s, until it has received SIGUSR1 or SIGTERM (the preemption
  patch's flag), so that a test signals or kills a job at a known update;
- ``FSA_PROBE_SLOW_REQUEUE_S=2``: the preemption patch's ``scontrol requeue`` (master rank)
  takes 2 s more before and after it runs, as on a loaded machine: the other ranks reach
  their exit first, and SLURM's SIGTERM for the requeue comes before the next log line;
- ``FSA_PROBE_KILL_IN_COPY=25``: SIGKILL halfway through writing ``checkpoint_last*``
  while the checkpoint of update 25 is saved (fairseq copies the new checkpoint to
  ``checkpoint_last.pt``; the plugin copies it to a temporary file first).
"""

import json
import math
import os
import shutil
import signal
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's plugin, not another installed one


def _rank():
    return int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", 0)))


def _per_rank_save_dir(argv, rank):
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--save-dir":
            out[i + 1] = os.path.join(out[i + 1], f"rank{rank}")
        elif arg.startswith("--save-dir="):
            out[i] = os.path.join(arg, f"rank{rank}")
    return out


def _wait_for_a_signal(path, timeout_s=120.0):
    from fairseq_sparse_attn.compat import preemption

    path.write_text(str(os.getpid()))
    deadline = time.monotonic() + timeout_s
    while not preemption._STATE.signum and time.monotonic() < deadline:
        time.sleep(0.05)


def main():
    import torch
    import torch.distributed as dist
    from fairseq.trainer import Trainer

    probe = Path(os.environ["FSA_PROBE_DIR"])
    probe.mkdir(parents=True, exist_ok=True)
    rank = _rank()
    if os.environ.get("FSA_PROBE_SAVE_DIR_PER_RANK") == "1":
        sys.argv = [sys.argv[0]] + _per_rank_save_dir(sys.argv[1:], rank)
    records = open(probe / f"updates.rank{rank}.jsonl", "w")
    trainers = []

    original_init = Trainer.__init__

    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        trainers.append(self)

    original_train_step = Trainer.train_step

    def train_step(self, samples, raise_oom=False):
        self._probe_ids = [int(i) for s in samples if s for i in s["id"].tolist()]
        self._probe_in_train_step = True
        try:
            return original_train_step(self, samples, raise_oom=raise_oom)
        finally:
            self._probe_in_train_step = False

    original_reduce = Trainer._reduce_and_log_stats

    def _reduce_and_log_stats(self, logging_outputs, sample_size, grad_norm=None):
        if getattr(self, "_probe_in_train_step", False) and logging_outputs:
            loss = sum(float(log.get("loss", 0)) for log in logging_outputs)
            size = sum(float(log.get("sample_size", 0)) for log in logging_outputs)
            records.write(
                json.dumps(
                    {
                        "update": self.get_num_updates(),
                        "loss": loss / size / math.log(2),
                        "ids": self._probe_ids,
                        "world_size": dist.get_world_size() if dist.is_initialized() else 1,
                    }
                )
                + "\n"
            )
            records.flush()
            if signal_at is not None and self.get_num_updates() == signal_at[1]:
                os.kill(os.getpid(), signal_at[0])
            if self.get_num_updates() == wait_at:
                _wait_for_a_signal(probe / f"waiting.rank{rank}")
        return original_reduce(self, logging_outputs, sample_size, grad_norm)

    signal_at = None
    signal_rank = os.environ.get("FSA_PROBE_SIGNAL_RANK")
    first_run = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    if os.environ.get("FSA_PROBE_SIGNAL") and (signal_rank is None or (int(signal_rank) == rank and first_run)):
        name, update = os.environ["FSA_PROBE_SIGNAL"].split("@")
        signal_at = (getattr(signal, "SIG" + name), int(update))
        if signal_at[0] == signal.SIGINT:
            # a test run from a background job (`cmd &` in a non-interactive shell) inherits
            # SIGINT ignored, and Python then installs no KeyboardInterrupt handler: the
            # probe's Ctrl-C would be lost and the run would not be interrupted
            signal.signal(signal.SIGINT, signal.default_int_handler)
    wait_at = int(os.environ.get("FSA_PROBE_WAIT_AT", 0)) or None
    kill_in_copy = int(os.environ.get("FSA_PROBE_KILL_IN_COPY", 0))
    original_copyfile = shutil.copyfile

    def copyfile(src, dst, *args, **kwargs):
        if (
            kill_in_copy
            and os.path.basename(str(dst)).startswith("checkpoint_last")
            and trainers
            and trainers[-1].get_num_updates() == kill_in_copy
        ):
            with open(src, "rb") as f, open(dst, "wb") as g:
                g.write(f.read()[: os.path.getsize(src) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        return original_copyfile(src, dst, *args, **kwargs)

    shutil.copyfile = copyfile

    slow_requeue_s = float(os.environ.get("FSA_PROBE_SLOW_REQUEUE_S", 0))
    if slow_requeue_s:
        from fairseq_sparse_attn.compat import preemption

        original_requeue = preemption.slurm_requeue

        def slurm_requeue(*args, **kwargs):
            time.sleep(slow_requeue_s)
            problem = original_requeue(*args, **kwargs)
            time.sleep(slow_requeue_s)
            return problem

        preemption.slurm_requeue = slurm_requeue

    Trainer.__init__ = __init__
    Trainer.train_step = train_step
    Trainer._reduce_and_log_stats = _reduce_and_log_stats

    if os.environ.get("FSA_PROBE_COMMAND") == "fairseq-train":
        from fairseq_cli.train import cli_main

        cli_main()
    else:
        from fairseq_sparse_attn import cli

        cli.train()
    records.close()
    model = trainers[-1].get_model()
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, probe / f"params.rank{rank}.pt")


if __name__ == "__main__":
    main()
