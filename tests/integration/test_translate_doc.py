"""docs/translate.md runs as written: its ``bash`` block (fsa-interactive) and its
``python`` block (hub ``from_pretrained`` / ``.translate()`` / ``record_attention``) are
taken from the page and run on a fixture checkpoint laid out as ``make demo`` lays out
``demo_out/`` (symlinks, and BPE codes that segment the fixture's words as its data-bin
does).  Only the languages, the sentence and the generation lengths are replaced: the
fixture is En->De, and its saved ``fairseq-generate`` output (beam 2, max-len-b 12) is
the independent reference.  The attention weights are checked against the plain ReLA
formula relu(q k^T * scaling) on the inputs of the last cross-attention."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "translate.md"
FIXTURES = REPO / "tests" / "fixtures" / "checkpoints"
MODEL = "rela_g"  # ReLA: weights = relu(q k^T * scaling)

# the fixture's sentence 5, whose "apple" its data-bin holds as "ap@@ ple"
SENTENCE = "a child eats an apple"
BPE_SOURCE = "a child eats an ap@@ ple"
# subword-nmt codes (v0.2) that build exactly those pieces
CODES = "#version: 0.2\na n</w>\ne a\nea t\neat s</w>\nc h\nch i\nchi l\nchil d</w>\na p\np l\npl e</w>\n"

BASH_REPLACE = {
    "-s de -t en": "-s en -t de",
    "Ein Hund läuft über die Wiese.": SENTENCE,
    "--beam 4 --max-len-a 1.2 --max-len-b 10": "--beam 2 --max-len-b 12",
}
PYTHON_REPLACE = {
    'source_lang="de", target_lang="en"': 'source_lang="en", target_lang="de"',
    "Ein Hund läuft über die Wiese.": SENTENCE,
    "beam=4, max_len_a=1.2, max_len_b=10": "beam=2, max_len_a=0, max_len_b=12",
}

# run after the doc's python block, in its namespace
CHECK = r"""
import json
layer = net.decoder.layers[max(cross)].encoder_attn
seen = {}
hook = layer.register_forward_pre_hook(lambda m, args, kwargs: seen.update(kwargs), with_kwargs=True)
with torch.no_grad():
    net(src[None], torch.tensor([len(src)]), prev[None])
hook.remove()
q = layer.q_proj(seen["query"]) * layer.scaling  # (tgt, 1, dim)
k = layer.k_proj(seen["key"])                      # (src, 1, dim)
H, d = layer.num_heads, layer.head_dim
q = q.view(q.shape[0], H, d).transpose(0, 1)
k = k.view(k.shape[0], H, d).transpose(0, 1)
plain = torch.relu(q @ k.transpose(1, 2))          # (heads, tgt, src)
print("CHECK " + json.dumps({
    "translation": translation, "src_tokens": src_tokens, "tgt_tokens": tgt_tokens,
    "shape": list(weights.shape), "max_diff": (plain - weights).abs().max().item(),
    "kinds": sorted({(t.site.kind, t.site.layer) for t in taps})}))
"""


def _block(language):
    blocks = re.findall(rf"^```{language}\n(.*?)^```", DOC.read_text(), re.S | re.M)
    assert len(blocks) == 1, f"docs/translate.md: expected one ```{language} block, found {len(blocks)}"
    return blocks[0]


def _substituted(code, replacements):
    for old, new in replacements.items():
        assert old in code, f"docs/translate.md no longer contains {old!r}: update this test with it"
        code = code.replace(old, new)
    return code


def _saved_hypothesis(index=5):
    for line in (FIXTURES / f"{MODEL}.generate.txt").read_text().splitlines():
        if line.startswith(f"H-{index}\t"):
            _, score, text = line.split("\t")
            return float(score), text
    raise AssertionError(f"no H-{index} in the fixture's generate output")


@pytest.fixture
def demo_out(tmp_path):
    """tmp_path/demo_out laid out as make demo leaves it, holding the fixture model."""
    out = tmp_path / "demo_out"
    (out / "checkpoints_rela_g").mkdir(parents=True)
    (out / "multi30k" / "bpe").mkdir(parents=True)
    (out / "checkpoints_rela_g" / "checkpoint_last.pt").symlink_to(FIXTURES / f"{MODEL}.pt")
    (out / "multi30k" / "data-bin").symlink_to(FIXTURES / "data-bin")
    (out / "multi30k" / "bpe" / "codes").write_text(CODES)
    return tmp_path


def _env(tmp_path):
    """This checkout first on the path, and an fsa-interactive that runs it with this
    interpreter (as the console script does)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "fsa-interactive"
    script.write_text(
        f"#!{sys.executable}\nimport sys\nsys.argv[0] = 'fsa-interactive'\n"
        "from fairseq_sparse_attn.cli import interactive\ninteractive()\n"
    )
    script.chmod(0o755)
    return dict(
        os.environ,
        PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        PATH=str(bin_dir) + os.pathsep + os.environ["PATH"],
        OMP_NUM_THREADS="1",
    )


def test_interactive_example_translates_as_fairseq_generate(demo_out):
    code = _substituted(_block("bash"), BASH_REPLACE)
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", code],
        cwd=demo_out,
        env=_env(demo_out),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = {line.split("\t")[0]: line.split("\t") for line in proc.stdout.splitlines() if "\t" in line}
    assert lines["S-0"][1] == BPE_SOURCE  # tokenized and split by the BPE codes
    score, hypothesis = _saved_hypothesis()
    assert lines["H-0"][2] == hypothesis
    assert abs(float(lines["H-0"][1]) - score) < 1e-5
    assert lines["D-0"][2] == hypothesis  # the fixture's German has no pieces nor punctuation
    # quiet: no warning, no start-up lines of the plugin (tests/integration/test_cli_help.py: -v)
    assert "Warning" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "compat patches" not in proc.stderr and "already been imported" not in proc.stderr


def test_python_example_translates_and_records_the_attention(demo_out):
    import json

    code = _substituted(_block("python"), PYTHON_REPLACE) + CHECK
    script = demo_out / "example.py"
    script.write_text(code)
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=demo_out, env=_env(demo_out), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.splitlines()
    result = json.loads(next(line for line in out if line.startswith("CHECK "))[len("CHECK ") :])
    _, hypothesis = _saved_hypothesis()
    assert out[0] == hypothesis == result["translation"]
    assert result["src_tokens"] == BPE_SOURCE.split() + ["</s>"]
    assert result["tgt_tokens"] == hypothesis.split() + ["</s>"]
    heads = 4  # the fixture models' decoder_attention_heads
    assert result["shape"] == [heads, len(result["tgt_tokens"]), len(result["src_tokens"])]
    assert result["max_diff"] < 1e-6
    # every attention call recorded: 2 encoder and 2 decoder layers in the fixtures
    assert result["kinds"] == [[k, layer] for k in ("cross", "decoder_self", "encoder_self") for layer in (0, 1)]
    # the printed table: one row per target token
    table = out[out.index("cross-attention, last layer, mean over heads:") + 1 :]
    assert [row.split()[0] for row in table if " -> " in row] == result["tgt_tokens"]


def test_missing_languages_with_moses_is_one_line(tmp_path):
    proc = subprocess.run(
        [
            "fsa-interactive",
            str(FIXTURES / "data-bin"),
            "--path",
            str(FIXTURES / f"{MODEL}.pt"),
            "--tokenizer",
            "moses",
            "-t",
            "de",
        ],
        input=SENTENCE + "\n",
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("fsa-interactive: error: --tokenizer moses needs -s/--source-lang")
    assert "-t/--target-lang" not in lines[0]  # given
    assert "dictionaries for: de, en" in lines[0]
