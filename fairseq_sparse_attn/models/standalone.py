"""Build a plugin model in Python without a fairseq task or data directory (benchmarks,
notebooks, tests):

    model = build_standalone_model(dictionary, "rela_transformer_iwslt_de_en", encoder_layers=3)
"""

import argparse

from fairseq.data import Dictionary
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY


def synthetic_dictionary(n_symbols: int) -> Dictionary:
    d = Dictionary()
    for i in range(n_symbols):
        d.add_symbol(f"w{i}")
    return d


class _DictionaryTask:
    def __init__(self, source_dictionary, target_dictionary):
        self.source_dictionary = source_dictionary
        self.target_dictionary = target_dictionary


def architecture_args(arch: str, **overrides) -> argparse.Namespace:
    """The namespace fairseq would build for ``--arch arch`` plus ``overrides`` (a value of
    None removes the attribute so that the architecture's default applies)."""
    if arch not in ARCH_CONFIG_REGISTRY:
        raise ValueError(f"unknown architecture {arch!r}")
    args = argparse.Namespace(**{k: v for k, v in overrides.items() if v is not None})
    ARCH_CONFIG_REGISTRY[arch](args)
    return args


def build_standalone_model(
    dictionary: Dictionary, arch: str = "sparse_transformer", target_dictionary: Dictionary = None, **overrides
):
    args = architecture_args(arch, **overrides)
    model_cls = ARCH_MODEL_REGISTRY[arch]
    return model_cls.build_model(args, _DictionaryTask(dictionary, target_dictionary or dictionary))
