"""Model flags checked when the model is built, before any batch is read or trained on
(without this the same mistakes surfaced as tracebacks at the first forward, after the data
had loaded, and fairseq's trainer wrote ``crash.pt`` for them: it dumps the state for any
exception inside a training step).  Numeric ranges come from the options' own declaration
(``valid=`` in :mod:`fairseq_sparse_attn.options.schema`, fairseq's transformer sizes and
dropouts in its :data:`TRANSFORMER_RANGES`); the other checks resolve the flags with the functions the
model build uses (the parts of :func:`fairseq_sparse_attn.options.resolve.resolve`) and build from
the resulting configs or call the parse functions the attention code itself uses, so the
accepted values cannot drift apart.  Each error is
one :class:`UsageError` line naming the flag and what was expected.

Called once, from ``SparseTransformerModel.build_model`` (training, generation, validation,
and ``checkpoint_utils`` loading with overrides), before any module is built.
"""

from .errors import UsageError
from .options.resolve import (
    BIAS_PROVIDER_CONFIGS,
    activation_config,
    backend_config,
    encoder_biases_config,
    plugin_options,
)
from .options.schema import ATTENTION_KINDS, CONFIGURATION_OPTIONS, RANGES


def _get(args, name, default=None):
    value = getattr(args, name, default)
    return default if value is None else value


def _flag(name):
    return "--" + name.replace("_", "-")


def _out_of_range(name, value, valid, why=""):
    return UsageError(f"{_flag(name)} {value}: must be {valid}{why}")


def check_option_ranges(args):
    """Every numeric option with a declared range (:data:`.options.schema.RANGES`: the
    plugin's options and fairseq's transformer sizes and dropouts), then embed dims
    divisible by their heads."""
    for name, valid in RANGES.items():
        value = getattr(args, name, None)
        if value is None or isinstance(value, bool):
            continue
        if not isinstance(value, (int, float)) or value != value or value not in valid:
            raise _out_of_range(name, value, valid)
    for side in ("encoder", "decoder"):
        dim = getattr(args, f"{side}_embed_dim", None)
        heads = getattr(args, f"{side}_attention_heads", None)
        if dim and heads and dim % heads:
            raise UsageError(
                f"--{side}-embed-dim {dim} is not divisible by --{side}-attention-"
                f"heads {heads}: each head gets embed_dim / heads dimensions (e.g. "
                f"--{side}-attention-heads {_divisor_near(dim, heads)})"
            )


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


def _divisor_near(dim, heads):
    return min((h for h in range(1, dim + 1) if dim % h == 0), key=lambda h: (abs(h - heads), h))


def check_activations(args):
    """The activation of every attention kind, built from the config the attention layers
    are built from (conditional ranges: a learned entmax alpha must lie in (1, 2))."""
    from .attention.activations import build_activation

    options = plugin_options(args)
    for kind in ATTENTION_KINDS:
        side = "decoder" if kind == "decoder_self" else "encoder"
        heads = _get(args, f"{side}_attention_heads", 1)
        try:
            build_activation(activation_config(options, kind), heads)
        except ValueError as e:
            raise UsageError(str(e)) from None


def check_encoder_biases(args):
    """Syntax attention, Rel_Pos, Localness, RHE flags, resolved as the encoder resolves them
    for its first layer (provider options, layer lists, RHE gate, flags that need each
    other)."""
    layers = _get(args, "encoder_layers", 0)
    if layers < 1:
        return
    try:
        encoder_biases_config(plugin_options(args), layers, 0)
    except ValueError as e:
        raise UsageError(str(e)) from None


def check_fixed_patterns(args):
    from .options.cli import parse_pattern_list

    value = plugin_options(args).encoder_fixed_patterns
    try:
        names = parse_pattern_list(value)
    except (ValueError, TypeError) as e:
        raise UsageError(f"--encoder-fixed-patterns {value}: {e}") from None
    heads = _get(args, "encoder_attention_heads", 0)
    if heads and len(names) > heads:
        raise UsageError(
            f"--encoder-fixed-patterns {value}: {len(names)} fixed patterns do not "
            f"fit in --encoder-attention-heads {heads}"
        )


def check_masked_heads(args):
    from .options.cli import parse_head_list

    value = plugin_options(args).encoder_masked_heads
    try:
        heads = parse_head_list(value)
    except ValueError as e:
        raise UsageError(f"--mask-encoder-heads / encoder_masked_heads: {e}") from None
    n = _get(args, "encoder_attention_heads", 0)
    bad = [h for h in heads if not 0 <= h < n]
    if n and bad:
        raise UsageError(
            f"--mask-encoder-heads {value}: head {bad[0]} is out of range, the "
            f"encoder has {n} heads per layer (0..{n - 1})"
        )


def chunked_kinds(args):
    """The attention kinds whose activation runs in the key-block path when
    --attn-key-block-size is set."""
    from .attention.activations import ACTIVATION_REGISTRY

    options = plugin_options(args)
    return [
        k
        for k in ATTENTION_KINDS
        if ACTIVATION_REGISTRY.get_or_raise(activation_config(options, k).name).supports_chunking
    ]


def check_key_blocks(args):
    """The key-block path cannot replay a dropout mask (attention/multihead.py)."""
    block = backend_config(plugin_options(args)).key_block_size
    dropout = _get(args, "attention_dropout", 0.0)
    if block and dropout > 0 and chunked_kinds(args):
        raise UsageError(
            f"--attn-key-block-size {block} needs --attention-dropout 0 (got "
            f"{dropout}): the key-block path cannot replay a dropout mask"
        )


def syntax_inputs_needed(args):
    """The per-batch syntax tensors the encoder biases need, as the selected providers
    declare them (``BiasProvider.needs``: src_dep for DEA, src_rp for LPEA) and RHE
    (src_dep), without the ``src_`` prefix: e.g. ``["dep", "rp"]``."""
    from .attention.biases import BIAS_REGISTRY
    from .attention.rhe import RHE_NEEDS

    options = plugin_options(args)
    needs = {
        need
        for name, resolve_provider in BIAS_PROVIDER_CONFIGS.items()
        if resolve_provider(options) is not None
        for need in BIAS_REGISTRY.get_or_raise(name).needs
    }
    if options.rhe:
        needs.update(RHE_NEEDS)
    return [need[len("src_") :] for need in sorted(needs)]


def _fairseq_task_cfg(task):
    """The task's config; None for the dictionary-only stand-in of
    ``build_standalone_model`` (Python use without a task: nothing to check against)."""
    return getattr(task, "cfg", None) if task is not None else None


def check_syntax_inputs(args, task):
    need = syntax_inputs_needed(args)
    cfg = _fairseq_task_cfg(task)
    if not need or cfg is None:
        return
    options = plugin_options(args)
    what = ", ".join(f"src_{n}" for n in need)
    why = []
    if options.encoder_syntax_attention != "none":
        why.append(f"--encoder-syntax-attention {options.encoder_syntax_attention}")
    if options.rhe:
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


def check_subword_style(args, task):
    """Word-based fixed patterns read word boundaries from the source dictionary's subword
    markers: a style the dictionary does not use would give wrong words silently."""
    options = plugin_options(args)
    if options.encoder_fixed_pattern_unit != "word" or _fairseq_task_cfg(task) is None:
        return
    dictionary = getattr(task, "source_dictionary", None)
    if dictionary is None:
        return
    style = options.encoder_subword_style
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


def validate_model_args(args, task=None):
    """All checks; raises UsageError (one line) for the first problem."""
    check_option_ranges(args)
    check_shared_embeddings(args, task)
    check_activations(args)
    check_encoder_biases(args)
    check_fixed_patterns(args)
    check_masked_heads(args)
    check_key_blocks(args)
    check_syntax_inputs(args, task)
    check_subword_style(args, task)


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
            f"or {ALLOW_FLAG} to resume with the new ones"
        )
