"""compat patches that need several processes (the in-process checks: tests/unit/test_compat.py)."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


ALL_GATHER = r"""
import json, sys, torch.distributed as dist
sys.path.insert(0, sys.argv[3])
import fairseq_sparse_attn.plugin
from fairseq.distributed import utils as distributed_utils
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[2], world_size=2, rank=rank)
out = distributed_utils.all_gather_list({"rank": rank, "words": ["x"] * (rank + 1)})
try:
    distributed_utils.all_gather_list(list(range(10000)), max_size=1000)
    too_big = None
except ValueError as e:
    too_big = str(e)
# both ranks done before either tears gloo down: exiting with the group alive (or while
# the peer still talks to it) aborted a rank now and then ("terminate called without an
# active exception", SIGABRT)
dist.barrier()
dist.destroy_process_group()
print(json.dumps({"gathered": out, "too_big": too_big}))
"""


def test_all_gather_list_on_cpu_gloo():
    """fairseq's all_gather_list allocates torch.cuda.ByteTensor; on gloo it gathers on CPU."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", ALL_GATHER, str(r), port, str(REPO)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for r in (0, 1)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        result = json.loads(out.strip().splitlines()[-1])
        assert result["gathered"] == [{"rank": 0, "words": ["x"]}, {"rank": 1, "words": ["x", "x"]}]
        assert "exceeds max_size (1000)" in result["too_big"]
