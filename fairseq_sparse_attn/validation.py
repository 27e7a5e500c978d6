"""The checks of a model's flags against its task, and of a resume against the checkpoint.

:func:`validate_model_args` is the model's configuration, resolved once
(:func:`fairseq_sparse_attn.options.resolve.resolve_model`: every check of the flags alone,
each bound the one declared with the option), plus the checks that need the task's data:
shared embeddings need one dictionary, syntax-based attention needs the parse side data,
word patterns need the dictionary's subword style.  Without these the same mistakes
surfaced as tracebacks at the first forward, after the data had loaded, and fairseq's
trainer wrote ``crash.pt`` for them.  Each error is one :class:`UsageError` line naming the
flag and what was expected.

Called once, from ``SparseTransformerModel.build_model`` (training, generation, validation,
and ``checkpoint_utils`` loading with overrides), before any module is built.
"""

from .errors import UsageError
from .options.resolve import ModelConfig, resolve_model
from .options.schema import CONFIGURATION_OPTIONS


def _get(args, name, default=None):
    value = getattr(args, name, default)
    return default if value is None else value


def check_shared_embeddings(args, task):
    """``--share-all-embeddings`` needs one embedding table: equal embed dims and one
    (joined) dictionary for both languages (fairseq: a ValueError traceback)."""
    if not _get(args, "share_all_embeddings", False):
        return
    enc, dec = _get(args, "encoder_embed_dim"), _get(args, "decoder_embed_dim")
    if enc is not None and dec is not None and enc != dec:
        raise UsageError(
            f"--share-all-embeddings needs --encoder-embed-dim ({enc}) equal to --decoder-embed-dim ({dec})"
        )
    src = getattr(task, "source_dictionary", None) if task is not None else None
    tgt = getattr(task, "target_dictionary", None) if task is not None else None
    if src is not None and tgt is not None and src != tgt:
        data = getattr(_fairseq_task_cfg(task), "data", None)
        where = f" in {data}" if data else ""
        raise UsageError(
            "--share-all-embeddings needs one dictionary for both languages, but "
            f"the source and target dictionaries{where} differ ({len(src)} and "
            f"{len(tgt)} entries): binarize with fairseq-preprocess "
            "--joined-dictionary, or use --share-decoder-input-output-embed"
        )


def syntax_inputs_needed(config: ModelConfig):
    """The per-batch syntax tensors the encoder biases need, as the selected providers
    declare them (``BiasProvider.needs``: src_dep for DEA, src_rp for LPEA) and RHE
    (src_dep), without the ``src_`` prefix: e.g. ``["dep", "rp"]``."""
    from .attention.biases import BIAS_REGISTRY
    from .attention.rhe import RHE_NEEDS

    needs = {need for name in config.bias_providers for need in BIAS_REGISTRY.get_or_raise(name).needs}
    if config.rhe:
        needs.update(RHE_NEEDS)
    return [need[len("src_") :] for need in sorted(needs)]


def _fairseq_task_cfg(task):
    """The task's config; None for the dictionary-only stand-in of
    ``build_standalone_model`` (Python use without a task: nothing to check against)."""
    return getattr(task, "cfg", None) if task is not None else None


def check_syntax_inputs(config: ModelConfig, task):
    need = syntax_inputs_needed(config)
    cfg = _fairseq_task_cfg(task)
    if not need or cfg is None:
        return
    what = ", ".join(f"src_{n}" for n in need)
    why = []
    if config.syntax_attention != "none":
        why.append(f"--encoder-syntax-attention {config.syntax_attention}")
    if config.rhe:
        why.append("--rhe")
    why = " and ".join(why)
    inputs = getattr(cfg, "syntax_inputs", None)
    if inputs is None:
        raise UsageError(
            f"this model ({why}) needs {what} for every batch: train and generate "
            "with --task parse_annotated_translation (parse side files beside the "
            "data or in --parse-dir)"
        )
    from .tasks.parse_annotated_translation import parse_features

    have = parse_features(inputs)
    missing = [n for n in need if n not in have]
    if missing:
        raise UsageError(
            f"this model ({why}) needs {what}, but --syntax-inputs {inputs} builds "
            f"{', '.join('src_' + h for h in have)} only: use --syntax-inputs "
            f"{','.join(sorted(set(have) | set(need)))}"
        )


def check_subword_style(config: ModelConfig, task):
    """Word-based fixed patterns read word boundaries from the source dictionary's subword
    markers: a style the dictionary does not use would give wrong words silently."""
    if config.encoder_heads.fixed_pattern_unit != "word" or _fairseq_task_cfg(task) is None:
        return
    dictionary = getattr(task, "source_dictionary", None)
    if dictionary is None:
        return
    style = config.subword_style
    symbols = [s for s in dictionary.symbols[dictionary.nspecial :] if not s.startswith("madeupword")]
    spm = sum(s.startswith("\u2581") for s in symbols)
    bpe = sum(s.endswith("@@") for s in symbols)
    if style == "sentencepiece" and spm == 0:
        hint = " (it has subword-nmt '@@' pieces: use --encoder-subword-style bpe)" if bpe else ""
        raise UsageError(
            f"--encoder-subword-style sentencepiece, but the source dictionary has no '\u2581' word-start pieces{hint}"
        )
    if style == "bpe" and bpe == 0 and spm > 0:
        raise UsageError(
            "--encoder-subword-style bpe (the default), but the source dictionary "
            f"has no '@@' pieces and {spm} SentencePiece '\u2581' pieces: use "
            "--encoder-subword-style sentencepiece"
        )


def validate_model_args(args, task=None) -> ModelConfig:
    """The model's configuration (:func:`~fairseq_sparse_attn.options.resolve.resolve_model`),
    then the task's data checks; raises UsageError (one line) for the first problem."""
    config = resolve_model(args)
    check_shared_embeddings(args, task)
    check_syntax_inputs(config, task)
    check_subword_style(config, task)
    return config


# --- resuming a checkpoint with other attention flags --------------------------------

ALLOW_FLAG = "--allow-attention-change"


def plugin_option_names(model_class):
    """The model options the plugin adds to fairseq's transformer (attention, FFN, fixed
    patterns, biases), from the model's own ``add_args``, less the options the schema
    declares no part of the configuration (``configuration=False``: key-block size,
    bisection iterations, ...)."""
    import argparse

    from fairseq.models.transformer import TransformerModel

    def dests(cls):
        parser = argparse.ArgumentParser(add_help=False)
        cls.add_args(parser)
        return {a.dest for a in parser._actions}

    from .options.schema import OPTION_FIELDS

    added = dests(model_class) - dests(TransformerModel)
    return sorted(n for n in added if n not in OPTION_FIELDS or n in CONFIGURATION_OPTIONS)


def attention_config_differences(saved, given, names):
    """[(name, saved value, given value)] for options both namespaces hold and that differ
    (a checkpoint from an older version lacks newer options: those are not compared)."""
    out = []
    for name in names:
        if not hasattr(saved, name):
            continue
        a, b = getattr(saved, name), getattr(given, name, None)
        if a != b:
            out.append((name, a, b))
    return out


def check_resume_config(path, saved, given, model_class):
    """UsageError naming both configurations when ``saved`` (the checkpoint's model args)
    and ``given`` (this run's) differ in an attention option."""
    if getattr(given, "allow_attention_change", False):
        return
    diffs = attention_config_differences(saved, given, plugin_option_names(model_class))
    if diffs:
        flag = lambda n: "--" + n.replace("_", "-")  # noqa: E731
        listed = "; ".join(f"{flag(n)}: checkpoint {a!r}, given {b!r}" for n, a, b in diffs)
        raise UsageError(
            f"{path} was trained with other attention options than the flags "
            f"given ({listed}): pass the checkpoint's flags, another --save-dir, "
            f"or {ALLOW_FLAG} to resume with the new ones (where the two models have the same parameters: "
            "another activation or backend; a model with another output norm, fixed heads or biases cannot "
            "load these parameters)"
        )
