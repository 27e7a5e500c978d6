"""The benchmarks' JSON results carry provenance (fairseq_sparse_attn/provenance.py): each
benchmark runs at its smallest size and the file it writes is opened and checked."""

import json
import os
import subprocess
import sys
from pathlib import Path

from fairseq_sparse_attn.provenance import check_provenance

REPO = Path(__file__).resolve().parents[2]


def run(script, *args):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_bench_attention_json(tmp_path):
    out = tmp_path / "bench.json"
    run("bench_attention.py", "--variants", "softmax,rela_g", "--rounds", "1", "--train-batch", "2",
        "--src-len", "6", "--tgt-len", "6", "--decode-steps", "2", "--decode-sentences", "1", "--threads", "1",
        "--json", out)
    data = json.loads(out.read_text())
    record = check_provenance(data)
    assert record["threads"] == 1 and record["seed"] == 0 and "bench_attention.py" in record["command"]
    assert data["measures"]["softmax"]["train_step"]["speed_vs_softmax"] == 1.0
    assert data["measures"]["rela_g"]["train_step"]["speed_vs_softmax"] > 0


def test_bench_attention_json_without_softmax_has_no_nan(tmp_path):
    out = tmp_path / "bench.json"
    run("bench_attention.py", "--variants", "rela_g", "--rounds", "1", "--train-batch", "2", "--src-len", "6",
        "--tgt-len", "6", "--decode-steps", "2", "--decode-sentences", "1", "--threads", "1", "--json", out)
    data = json.loads(out.read_text())  # strict JSON: no NaN for "no softmax to compare with"
    check_provenance(data)
    assert data["measures"]["rela_g"]["train_step"]["speed_vs_softmax"] is None


def test_bench_long_sequences_json(tmp_path):
    out = tmp_path / "long.json"
    run("bench_long_sequences.py", "--lengths", "16", "--dim", "16", "--heads", "2", "--batch", "1", "--block", "8",
        "--repeats", "1", "--json", out)
    data = json.loads(out.read_text())
    check_provenance(data)
    assert set(data["results"]["16"]) == {"softmax_stock", "softmax_explicit", "relu_plain", "relu_chunked"}
