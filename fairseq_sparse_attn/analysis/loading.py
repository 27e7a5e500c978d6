"""What ``fsa-analyze`` runs on: a checkpoint, and sentence pairs in batches.

Checkpoints (:func:`load_checkpoint`)
    * a checkpoint trained with the plugin (``--arch sparse_transformer`` or one of its
      presets) is rebuilt as it was trained;
    * a stock fairseq checkpoint of a ``transformer`` architecture (``transformer``,
      ``transformer_iwslt_de_en``, ``transformer_wmt_en_de_big``, ...: every architecture
      fairseq registers for ``TransformerModel``) is rebuilt as the plugin's
      ``sparse_transformer`` with softmax attention and no output norm in all three kinds
      — same parameter names and shapes, same outputs (``tests/test_parity.py``) — and the
      same state dict is loaded (strictly), so that the analysis recorders can see its
      attention;
    * any other architecture is an error that lists what is supported;
    * a plugin checkpoint trained on a fused backend (``--attn-backend triton``, ``sdpa``,
      ...: a speed choice, the same function within rounding) is analysed with ``auto``,
      which takes the materialized path for every call that returns weights (the fused
      backends compute none, so every analysis failed on such a checkpoint), unless
      ``--model-overrides`` names ``attn_backend`` itself; one log line says so.

    Checkpoints are read through fairseq's ``checkpoint_utils``, whose ``torch.load`` the
    plugin's compat shim makes read with ``weights_only=False`` on torch >= 2.6 (fairseq
    checkpoints pickle argparse / omegaconf objects; load only files you trust).

Data (:func:`examples_from_split`, :func:`examples_from_raw`)
    * a split of a fairseq-preprocess directory, read with the task's ``load_dataset``;
    * or raw, line-aligned source / target text files, tokenized (``--tokenizer moses``,
      as data_prep/prepare_multi30k.py does) and BPE-encoded (``--bpe-codes``), then
      mapped to ids with the data directory's dictionaries.

    Either way the result is a list of :class:`Example` (ids and pieces, in file order);
    :func:`iterate_batches` cuts them into length-sorted batches collated exactly as
    fairseq's ``LanguagePairDataset`` does (left-padded source, right-padded target,
    ``prev_output_tokens`` = ``</s>`` + target without its last token), each sample
    carrying ``"id"`` = the position of the example in the list.
"""

import argparse
import copy
import dataclasses
import logging
import os
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import torch

PLUGIN_MODEL = "sparse_transformer"
#: backends whose calls return attention weights when asked (auto takes materialized then)
WEIGHTS_BACKENDS = (None, "auto", "materialized")

logger = logging.getLogger(__name__)


@dataclass
class LoadedModel:
    model: torch.nn.Module
    task: object
    cfg: object
    path: str
    arch: str  # the architecture saved in the checkpoint
    loaded_as: str  # "plugin" or "stock-transformer"

    @property
    def source_dictionary(self):
        return self.task.source_dictionary

    @property
    def target_dictionary(self):
        return self.task.target_dictionary

    def describe(self) -> Dict:
        return {"checkpoint": os.path.abspath(self.path), "arch": self.arch, "loaded_as": self.loaded_as}


def supported_architectures() -> Tuple[List[str], List[str]]:
    """(plugin architectures, stock fairseq transformer architectures), sorted."""
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.models.transformer import TransformerModel

    import fairseq_sparse_attn.plugin  # noqa: F401  (registers the plugin)

    from ..models.sparse_transformer import SparseTransformerModel

    plugin = sorted(a for a, cls in ARCH_MODEL_REGISTRY.items() if cls is SparseTransformerModel)
    stock = sorted(a for a, cls in ARCH_MODEL_REGISTRY.items() if cls is TransformerModel)
    return plugin, stock


def _model_args(cfg, path: str) -> argparse.Namespace:
    """The checkpoint's model arguments as an argparse Namespace (what fairseq-train
    --arch saves); a plain dict / DictConfig is converted."""
    from omegaconf import OmegaConf

    model_cfg = cfg.get("model") if hasattr(cfg, "get") else getattr(cfg, "model", None)
    if isinstance(model_cfg, argparse.Namespace):
        return model_cfg
    if OmegaConf.is_config(model_cfg):
        model_cfg = OmegaConf.to_container(model_cfg, resolve=True)
    if isinstance(model_cfg, dict):
        return argparse.Namespace(**model_cfg)
    raise ValueError(
        f"{path}: the checkpoint has no model configuration (cfg.model is "
        f"{type(model_cfg).__name__}); expected a checkpoint written by fairseq-train"
    )


def checkpoint_architecture(model_args: argparse.Namespace) -> str:
    return getattr(model_args, "arch", None) or getattr(model_args, "_name", None) or "<none>"


def check_architecture(arch: str, path: str) -> str:
    """``"plugin"`` or ``"stock-transformer"``; anything else is an error listing what
    is supported."""
    plugin, stock = supported_architectures()
    if arch in plugin:
        return "plugin"
    if arch in stock:
        return "stock-transformer"
    raise ValueError(
        f"{path}: architecture {arch!r} is not supported by fsa-analyze. Supported: the "
        f"plugin's {PLUGIN_MODEL} architectures ({', '.join(plugin)}) and stock fairseq "
        f"transformer architectures ({', '.join(stock)}), which are loaded into "
        f"{PLUGIN_MODEL} with softmax attention"
    )


def _read_state(path: str, overrides: Dict):
    from fairseq import checkpoint_utils

    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        state = checkpoint_utils.load_checkpoint_to_cpu(path, overrides)
    except Exception as e:  # a file that is not a (fairseq) torch checkpoint
        raise ValueError(f"{path}: cannot be read as a fairseq checkpoint ({type(e).__name__}: {e})") from e
    if state.get("cfg") is None and state.get("args") is not None:
        from fairseq.dataclass.utils import convert_namespace_to_omegaconf

        state["cfg"] = convert_namespace_to_omegaconf(state["args"])
    if state.get("cfg") is None or "model" not in state:
        raise ValueError(
            f"{path}: not a fairseq checkpoint (no 'cfg'/'args' configuration or "
            f"no 'model' state dict; keys: {sorted(state)})"
        )
    return state


def load_checkpoint(
    path: str,
    data: str,
    source_lang: Optional[str] = None,
    target_lang: Optional[str] = None,
    model_overrides: Optional[Dict] = None,
    device="cpu",
) -> LoadedModel:
    """Load ``path`` for analysis, with the dictionaries (and splits) of ``data``.

    ``model_overrides`` replaces saved model arguments (as fairseq's
    ``--model-overrides``, e.g. ``{"encoder_masked_heads": "0,7"}``).  The model is
    returned in eval mode on ``device``.
    """
    from fairseq import tasks

    import fairseq_sparse_attn.plugin  # noqa: F401  (registers the plugin; torch>=2.6 loading fix)

    # the languages are not overrides of the saved configuration: the direction check
    # (check_dictionaries) compares them with the task the checkpoint saved, which an
    # override would have replaced (-s de -t en on an en->de model passed unnoticed)
    state = _read_state(path, {**(model_overrides or {}), "data": data})
    cfg = state["cfg"]
    task_cfg = cfg.task
    languages = {k: v for k, v in (("source_lang", source_lang), ("target_lang", target_lang)) if v}
    if languages:
        from omegaconf import open_dict

        task_cfg = copy.deepcopy(cfg.task)
        with open_dict(task_cfg):
            for key, value in languages.items():
                setattr(task_cfg, key, value)
    model_args = _model_args(cfg, path)
    arch = checkpoint_architecture(model_args)
    loaded_as = check_architecture(arch, path)
    trained_on = getattr(model_args, "attn_backend", None)
    if trained_on not in WEIGHTS_BACKENDS and "attn_backend" not in (model_overrides or {}):
        model_args = argparse.Namespace(**vars(model_args))
        model_args.attn_backend = "auto"
        logger.info(
            f"{path}: trained with --attn-backend {trained_on}, analysed with auto (the analyses read "
            f"attention weights, which {trained_on} does not return; the same function within rounding)"
        )
    if loaded_as == "stock-transformer":
        # same parameters, softmax attention (the plugin's attention options are filled
        # with their defaults, softmax / no output norm, by the sparse_transformer arch)
        model_args = argparse.Namespace(**vars(model_args))
        model_args.arch = PLUGIN_MODEL
        model_args._name = PLUGIN_MODEL
    task = tasks.setup_task(task_cfg)
    from ..compat.checkpoint_record import check_dictionaries

    check_dictionaries(path, state, task)  # DATA's dictionaries must be the checkpoint's
    model = task.build_model(model_args)
    try:
        model.load_state_dict(state["model"], strict=True, model_cfg=model_args)
    except RuntimeError as e:
        raise ValueError(
            f"{path}: the saved parameters do not fit the rebuilt {arch} model "
            f"({'as ' + PLUGIN_MODEL if loaded_as != 'plugin' else 'plugin'}): {e}"
        ) from e
    model.eval()
    model.to(device)
    return LoadedModel(model, task, cfg, path, arch, loaded_as)


# --------------------------------------------------------------------------- data


@dataclass
class Example:
    """One sentence pair: ``source`` / ``target`` ids end with ``</s>``; the pieces are the
    subword strings without it (for alignments and plots)."""

    index: int  # 0-based position in the split / line in the raw files
    source: torch.Tensor
    target: torch.Tensor
    source_pieces: List[str]
    target_pieces: List[str]
    #: the source's syntax for the encoder (``--task parse_annotated_translation``: DEA,
    #: LPEA, RHE), (n, n) over its tokens with ``</s>``, as the task's dataset makes them
    src_dep: Optional[torch.Tensor] = None
    src_rp: Optional[torch.Tensor] = None

    def with_target(self, other: "Example") -> "Example":
        """This source (and its syntax) with ``other``'s target."""
        return dataclasses.replace(self, target=other.target, target_pieces=other.target_pieces)


#: the per-sentence source inputs some encoders need (Example fields, net_input keys), each
#: with the name of the ``parse_annotated_translation`` feature that makes it
#: (``data/parse_annotated_dataset.FEATURES``)
SOURCE_ANNOTATIONS = {"src_dep": "dep", "src_rp": "rp"}


def source_annotations_needed(model) -> Tuple[str, ...]:
    """Which of :data:`SOURCE_ANNOTATIONS` the model's attention needs for each batch."""
    needs = set()
    for module in model.modules():
        needs.update(getattr(module, "source_needs", ()) or ())
    return tuple(name for name in SOURCE_ANNOTATIONS if name in needs)


def check_source_annotations_available(model, examples: Sequence["Example"], where: str, path: str) -> None:
    """UsageError (one line) when the model needs the source's syntax and ``examples`` do
    not carry it: raw text (no parses), or a split loaded without the side files."""
    from ..errors import UsageError

    needs = source_annotations_needed(model)
    missing = [name for name in needs if any(getattr(ex, name) is None for ex in examples)]
    if missing:
        raise UsageError(
            f"{path}: its attention needs the source's syntax ({', '.join(missing)}) for each sentence, "
            f"which {where} does not give: analyse a binarized split with the parse side files of "
            "--task parse_annotated_translation beside it (data_prep/parse_source.py; raw text has no parses)"
        )


def _pieces(dictionary, tokens: torch.Tensor, where: str) -> List[str]:
    if tokens.numel() == 0 or int(tokens[-1]) != dictionary.eos():
        raise ValueError(f"{where}: expected token ids ending with </s>")
    return [dictionary[int(t)] for t in tokens[:-1]]


def split_size(task, split: str) -> int:
    """Number of sentence pairs in ``split`` (loads it)."""
    _load_split(task, split)
    return len(task.dataset(split))


def _load_split(task, split: str):
    data = getattr(task.cfg, "data", "?")
    try:
        task.load_dataset(split)
    except FileNotFoundError as e:
        said = str(e)  # the plugin's own data check already names the split and the folder
        raise FileNotFoundError(
            said if said.startswith(f"split {split!r}") else f"split {split!r} not found in {data}: {said}"
        ) from e
    dataset = task.dataset(split)
    if getattr(dataset, "tgt", None) is None:
        raise ValueError(f"split {split!r} of {data} has no target side; teacher-forced analysis needs sentence pairs")
    return dataset


def examples_from_split(task, split: str, limit: Optional[int] = None) -> List[Example]:
    """The first ``limit`` (all when None) pairs of a binarized split, in file order."""
    dataset = _load_split(task, split)
    n = len(dataset) if limit is None else min(limit, len(dataset))
    out = []
    for i in range(n):
        item = dataset[i]
        where = f"{getattr(task.cfg, 'data', '?')} split {split!r}, sentence {i}"
        out.append(
            Example(
                i,
                item["source"],
                item["target"],
                _pieces(task.source_dictionary, item["source"], where),
                _pieces(task.target_dictionary, item["target"], where),
                item.get("src_dep"),
                item.get("src_rp"),
            )
        )
    return out


def open_text(path):
    """Open a UTF-8 text file for reading, gunzipping it when the name ends in .gz."""
    import gzip

    if str(path).endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def read_lines(path, blank_tail: bool = False) -> List[str]:
    """The lines of a text file (``.gz`` allowed), without their line ends
    (:mod:`fairseq_sparse_attn.text_lines`; ``blank_tail``: a trailing blank line is a
    record)."""
    from ..text_lines import read_lines as read

    return read(path, blank_tail=blank_tail)


def read_text_lines(path: str) -> List[str]:
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{path} is a directory, not a text file" if os.path.isdir(path) else f"text file not found: {path}"
        )
    return read_lines(path)


def build_encoder(tokenizer: str, bpe_codes: Optional[str], lang: Optional[str]):
    """Raw text -> model input string with fairseq's own encoders: Moses tokenization
    (``tokenizer="moses"``, language ``lang``) then subword-nmt BPE (``bpe_codes``).

    Moses runs as in this project's data preparation (data_prep/prepare_multi30k.py): no
    XML escaping and no aggressive dash splitting (fairseq's ``--tokenizer moses`` would do
    both by default, turning ``"`` into ``&quot;``, which a model trained on our data never saw)."""
    from fairseq.data import encoders

    steps = []
    if tokenizer == "moses":
        steps.append(
            encoders.build_tokenizer(
                argparse.Namespace(
                    tokenizer="moses",
                    source_lang=lang or "en",
                    target_lang=lang or "en",
                    moses_no_dash_splits=True,
                    moses_no_escape=True,
                )
            )
        )
    elif tokenizer != "none":
        raise ValueError(f"unknown tokenizer {tokenizer!r}; expected 'moses' or 'none'")
    if bpe_codes is not None:
        if not os.path.isfile(bpe_codes):
            raise FileNotFoundError(f"BPE codes file not found: {bpe_codes}")
        steps.append(encoders.build_bpe(argparse.Namespace(bpe="subword_nmt", bpe_codes=bpe_codes, bpe_separator="@@")))

    def encode(text: str) -> str:
        for step in steps:
            text = step.encode(text)
        return text

    return encode


def parse_overrides(text: Optional[str]) -> Dict:
    """``--model-overrides``: a Python dict literal (as fairseq-generate's)."""
    import ast

    if not text:
        return {}
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = None
    if not isinstance(value, dict):
        raise ValueError(f"--model-overrides must be a Python dict literal, got {text!r}")
    return value


def examples_from_raw(
    task,
    source_path: str,
    target_path: str,
    tokenizer: str = "none",
    bpe_codes: Optional[str] = None,
    limit: Optional[int] = None,
    source_lang: Optional[str] = None,
    target_lang: Optional[str] = None,
    target_bpe_codes: Optional[str] = None,
) -> List[Example]:
    """Line-aligned raw text: tokenized (``tokenizer`` ``"moses"`` or ``"none"``), BPE
    (``bpe_codes``, or none when the text is already segmented; ``target_bpe_codes`` for
    the target side when it has codes of its own), ids from the task's dictionaries
    (unknown pieces -> ``<unk>``; the pieces keep their text)."""
    sources, targets = read_text_lines(source_path), read_text_lines(target_path)
    if len(sources) != len(targets):
        raise ValueError(
            f"{target_path} has {len(targets)} lines but {source_path} has "
            f"{len(sources)}: source and target files must be line-aligned"
        )
    source_lang = source_lang or getattr(task.cfg, "source_lang", None)
    target_lang = target_lang or getattr(task.cfg, "target_lang", None)
    encode_source = build_encoder(tokenizer, bpe_codes, source_lang)
    encode_target = build_encoder(tokenizer, target_bpe_codes or bpe_codes, target_lang)
    n = len(sources) if limit is None else min(limit, len(sources))
    out = []
    for i in range(n):
        src_text, tgt_text = encode_source(sources[i]), encode_target(targets[i])
        src = task.source_dictionary.encode_line(src_text, add_if_not_exist=False, append_eos=True).long()
        tgt = task.target_dictionary.encode_line(tgt_text, add_if_not_exist=False, append_eos=True).long()
        out.append(Example(i, src, tgt, src_text.split(), tgt_text.split()))
    return out


def check_lengths(examples: Sequence[Example], model, where: str) -> None:
    """Every pair must fit the model's maximum positions."""
    limits = model.max_positions()
    src_max, tgt_max = limits if isinstance(limits, tuple) else (limits, limits)
    for ex in examples:
        for side, tokens, limit in (("source", ex.source, src_max), ("target", ex.target, tgt_max)):
            if limit is not None and tokens.numel() > limit:
                raise ValueError(
                    f"{where}, sentence {ex.index}: the {side} has {tokens.numel()} "
                    f"tokens (with </s>) but the model accepts at most {limit}"
                )


def length_batches(lengths: Sequence[int], batch_size: Optional[int], max_tokens: Optional[int]) -> List[List[int]]:
    """Indices sorted by length (longest first), cut into batches of at most ``batch_size``
    pairs and ``max_tokens`` padded tokens (a pair longer than ``max_tokens`` is a batch of
    its own).  ``lengths[i]`` = max(source, target) length of pair i."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches, current = [], []
    for i in order:
        width = lengths[current[0]] if current else lengths[i]  # the longest comes first
        full = (batch_size is not None and len(current) >= batch_size) or (
            max_tokens is not None and (len(current) + 1) * width > max_tokens
        )
        if current and full:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def make_batches(examples: Sequence[Example], batch_size: Optional[int], max_tokens: Optional[int]) -> List[List[int]]:
    """Positions in ``examples``, longest pair first, in batches of at most ``batch_size``
    pairs and ``max_tokens`` padded tokens (a longer pair is a batch of its own)."""
    lengths = [max(ex.source.numel(), ex.target.numel()) for ex in examples]
    return length_batches(lengths, batch_size, max_tokens)


def collate(
    examples: Sequence[Example],
    positions: Sequence[int],
    pad: int,
    eos: int,
    left_pad_source: bool = True,
    left_pad_target: bool = False,
) -> Dict:
    """fairseq's LanguagePairDataset batch (sorted by source length, longest first) with
    ``"id"`` = position in ``examples``."""
    from fairseq.data.language_pair_dataset import collate as fairseq_collate

    samples = [{"id": p, "source": examples[p].source, "target": examples[p].target} for p in positions]
    batch = fairseq_collate(samples, pad, eos, left_pad_source=left_pad_source, left_pad_target=left_pad_target)
    annotations = [n for n in SOURCE_ANNOTATIONS if all(getattr(examples[p], n) is not None for p in positions)]
    if annotations and batch:  # placed as the task's collater places them
        from ..data.parse_annotated_dataset import collate_structure

        for sample in samples:
            for name in annotations:
                sample[name] = getattr(examples[sample["id"]], name)
        features = tuple(SOURCE_ANNOTATIONS[name] for name in annotations)
        batch["net_input"].update(
            collate_structure(samples, batch["id"], batch["net_input"]["src_tokens"], pad, features)
        )
    return batch


def iterate_batches(
    examples: Sequence[Example],
    pad: int,
    eos: int,
    batch_size: Optional[int] = 32,
    max_tokens: Optional[int] = None,
    device="cpu",
    left_pad_source: bool = True,
) -> Iterator[Dict]:
    from fairseq import utils

    for positions in make_batches(examples, batch_size, max_tokens):
        sample = collate(examples, positions, pad, eos, left_pad_source)
        yield utils.move_to_cuda(sample, device) if str(device).startswith("cuda") else sample


def shuffle_targets(examples: Sequence[Example], seed: int = 1) -> Tuple[List[Example], List[int]]:
    """ReLA's hallucination test input: every source with the target of *another*
    sentence.  The permutation is a random cyclic one (Sattolo's algorithm), so no
    sentence keeps its own target; returns (shuffled examples, perm) with example i
    holding target ``perm[i]``."""
    import random

    n = len(examples)
    if n < 2:
        raise ValueError(f"shuffling targets across sentences needs at least 2 sentences, got {n}")
    perm = list(range(n))
    rng = random.Random(seed)
    for i in range(n - 1, 0, -1):  # Sattolo: j < i, one cycle through all positions
        j = rng.randrange(i)
        perm[i], perm[j] = perm[j], perm[i]
    out = [ex.with_target(examples[perm[i]]) for i, ex in enumerate(examples)]
    return out, perm
