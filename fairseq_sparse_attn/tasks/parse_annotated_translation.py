"""``--task parse_annotated_translation``: translation whose batches carry the source's
syntax for the encoder (redundant-head enlivening: DEA / LPEA heads).

Besides fairseq's binarized data the task reads, for each split, the word-level side files
made by ``data_prep/parse_source.py`` beside the binarized data (or in ``--parse-dir``):

* ``<split>.<src>.dep`` — dependencies, for ``src_dep``;
* ``<split>.<src>.tree`` — constituency trees, for ``src_rp``;

(``<split>1``, ``<split>2``, ... too when fairseq combines shards of a split).  It checks
that each side file has one line per example of the binarized source, maps words to BPE
pieces from the ``@@`` markers, and its collater adds ``src_dep`` (bool) and ``src_rp``
(int16), ``(bsz, T, T)`` padded like ``src_tokens``, to ``net_input``.  The interface is
described in :mod:`fairseq_sparse_attn.syntax.structure`.  Generation needs nothing else:
fairseq's SequenceGenerator hands every ``net_input`` key to the encoder.

``--syntax-inputs dep`` (or ``rp``) builds and requires only one of the two.
Raw-text input (``fairseq-interactive``, the hub interface) is not supported: it has no
parses; binarize the input with its side files and use ``fairseq-generate``.
"""

import itertools
import logging
import os
from dataclasses import dataclass, field
from typing import List, Optional

from fairseq import utils
from fairseq.data import ConcatDataset, data_utils, indexed_dataset
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from ..data.parse_annotated_dataset import FEATURES, ParseAnnotatedDataset, ParseSideData
from ..errors import DataNotFoundError, UsageError
from ..syntax.structure import RULE2_READINGS, check_rule2

logger = logging.getLogger(__name__)

SIDE_SUFFIX = {"dep": "dep", "rp": "tree"}


@dataclass
class ParseAnnotatedTranslationConfig(TranslationConfig):
    parse_dir: Optional[str] = field(
        default=None,
        metadata={
            "help": "directory of the parse side files <split>.<src>.dep/.tree "
            "(colon-separated like DATA for sharded training data); default: "
            "beside the binarized data"
        },
    )
    syntax_inputs: str = field(
        default="dep,rp",
        metadata={
            "help": "encoder inputs to build: 'dep' (src_dep, from .dep files), 'rp' "
            "(src_rp, from .tree files) or 'dep,rp'"
        },
    )
    local_phrase_rule2: str = field(
        default="symmetric",
        metadata={
            "help": "LPEA Rule 2 when building src_rp: 'symmetric' (j in LP(i) iff i in "
            "LP(j) by Rule 1, or the reverse; default) or 'literal' (the paper's "
            "'if x_i in LP(x_j), j < i, then x_j in LP(x_i)': only earlier words "
            f"are added); one of {', '.join(RULE2_READINGS)}"
        },
    )


def parse_features(value: str) -> List[str]:
    names = [v.strip() for v in str(value).split(",") if v.strip()]
    bad = [n for n in names if n not in FEATURES]
    if bad or not names:
        raise ValueError(f"--syntax-inputs {value!r}: expected a comma-separated subset of {', '.join(FEATURES)}")
    return [f for f in FEATURES if f in names]


@register_task("parse_annotated_translation", dataclass=ParseAnnotatedTranslationConfig)
class ParseAnnotatedTranslationTask(TranslationTask):
    @classmethod
    def setup_task(cls, cfg, **kwargs):
        parse_features(cfg.syntax_inputs)
        check_rule2(cfg.local_phrase_rule2)
        return super().setup_task(cfg, **kwargs)

    def _shard_prefixes(self, data_path: str, split: str, combine: bool) -> List[str]:
        """The binarized source files of the split, as fairseq's load_langpair_dataset finds
        them (``split``, then ``split1``, ... when combining)."""
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        prefixes = []
        for k in itertools.count():
            split_k = split + (str(k) if k > 0 else "")
            found = None
            for a, b in ((src, tgt), (tgt, src)):
                prefix = os.path.join(data_path, f"{split_k}.{a}-{b}.{src}")
                if indexed_dataset.dataset_exists(prefix, impl=self.cfg.dataset_impl):
                    found = prefix
                    break
            if found is None or (k > 0 and not combine):
                break
            prefixes.append((split_k, found))
        return prefixes

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        base = self.datasets[split]
        features = parse_features(self.cfg.syntax_inputs)

        paths = utils.split_paths(self.cfg.data)
        parse_paths = utils.split_paths(self.cfg.parse_dir) if self.cfg.parse_dir else paths
        if split != self.cfg.train_subset:
            paths, parse_paths = paths[:1], parse_paths[:1]
        data_path = paths[(epoch - 1) % len(paths)]
        parse_path = parse_paths[(epoch - 1) % len(parse_paths)]

        src = self.cfg.source_lang
        shards = []
        for split_k, prefix in self._shard_prefixes(data_path, split, combine):
            files = {}
            for feat in features:
                path = os.path.join(parse_path, f"{split_k}.{src}.{SIDE_SUFFIX[feat]}")
                if not os.path.isfile(path):
                    raise DataNotFoundError(
                        f"{path} not found: --task parse_annotated_translation needs the parse "
                        f"side file of {prefix}.bin (one line per sentence, beside the binarized "
                        f"data or in --parse-dir); make it with data_prep/parse_source.py "
                        f"--input <tokenized {split_k}.{src}> "
                        f"--{'dep' if feat == 'dep' else 'tree'}-out {path}"
                    )
                files[feat] = path
            side = ParseSideData(files.get("dep"), files.get("rp"))
            n_examples = len(data_utils.load_indexed_dataset(prefix, None, self.cfg.dataset_impl))
            if len(side) != n_examples:
                path = files.get("dep") or files.get("rp")
                raise UsageError(
                    f"{path} has {len(side)} lines but {prefix}.bin has {n_examples} sentences: "
                    "the side files must have one line per sentence of the binarized source "
                    "(parse the same tokenized file that was binarized)"
                )
            shards.append((side, f"{prefix}.bin"))

        if len(shards) == 1:
            side, desc = shards[0]
        else:
            ratios = [1] * len(shards)
            ratios[0] = self.cfg.upsample_primary
            side = ConcatDataset([s for s, _ in shards], ratios)
            desc = ", ".join(d for _, d in shards)
        dataset = ParseAnnotatedDataset(
            base,
            side,
            self.src_dict,
            features,
            truncated_length=self.cfg.max_source_positions if self.cfg.truncate_source else None,
            source_desc=desc,
            rule2=self.cfg.local_phrase_rule2,
        )
        # fail at load time, not mid-epoch (in a DataLoader worker), when a side-file line
        # does not belong to its sentence: every example is parsed and aligned once here
        try:
            for i in range(len(dataset)):
                dataset.aligned_parse(i, base[i]["source"])
        except ValueError as e:  # ParseFormatError (a ValueError) names file:line
            raise UsageError(" ".join(str(e).split())) from None
        logger.info(f"{split}: parses from {parse_path} ({', '.join(features)}) for {len(dataset)} examples")
        self.datasets[split] = dataset

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        raise UsageError(
            "--task parse_annotated_translation has no parses for raw-text input "
            "(fairseq-interactive, hub translate): parse the tokenized input with "
            "data_prep/parse_source.py, binarize it with fairseq-preprocess, put the side files "
            "beside it and translate with fairseq-generate"
        )
