"""Plugin options given at load time (``fsa-generate --mask-encoder-heads``,
``--model-overrides "{'prune_redundant_heads': True}"``) refused for a checkpoint whose
model is not the plugin's.  fairseq applies ``--model-overrides`` only to the options a
checkpoint's configuration holds, and a stock ``transformer`` holds none of the plugin's:
the flag was dropped silently and the output was byte-identical to a run without it.
"""

import functools

BEHAVIOUR_CHANGE = False


def _model_config(state):
    cfg = state.get("cfg")
    model = None
    if cfg is not None:
        try:
            model = cfg["model"]
        except (KeyError, TypeError):
            model = None
    return model if model is not None else state.get("args")


def checkpoint_arch(state):
    """The ``--arch`` a checkpoint was trained with (None when it does not say)."""
    model = _model_config(state)
    for name in ("arch", "_name"):
        try:
            value = getattr(model, name, None)
        except Exception:  # a DictConfig in struct mode raises for unknown keys
            value = None
        if value:
            return value
    return None


def is_plugin_arch(arch) -> bool:
    from fairseq.models import ARCH_MODEL_REGISTRY

    model_class = ARCH_MODEL_REGISTRY.get(arch)
    return model_class is not None and model_class.__module__.startswith("fairseq_sparse_attn")


def override_flag(name):
    return "--mask-encoder-heads" if name == "encoder_masked_heads" else f"--model-overrides {name!r}"


def check_overrides_apply(path, state, arg_overrides):
    """UsageError when ``arg_overrides`` set a plugin option (to something other than its
    default) and the checkpoint's model is not a plugin model."""
    from ..errors import UsageError
    from ..options.schema import OPTION_FIELDS

    if not arg_overrides:
        return
    arch = checkpoint_arch(state)
    if arch is None or is_plugin_arch(arch):
        return
    given = [
        name
        for name, value in arg_overrides.items()
        if name in OPTION_FIELDS and value not in (None, "", False, OPTION_FIELDS[name].default)
    ]
    if given:
        flags = ", ".join(f"{override_flag(n)} {arg_overrides[n]}" for n in given)
        raise UsageError(
            f"{flags}: {path} has no plugin attention (it was trained with --arch "
            f"{arch}, a model of fairseq's own), so the option cannot apply; use a "
            "checkpoint of a fairseq_sparse_attn architecture"
        )


def install():
    from fairseq import checkpoint_utils

    original = checkpoint_utils.load_checkpoint_to_cpu
    if getattr(original, "_fsa_override_check", False):
        return

    @functools.wraps(original)
    def load_checkpoint_to_cpu(path, arg_overrides=None, load_on_all_ranks=False):
        state = original(path, arg_overrides, load_on_all_ranks)
        check_overrides_apply(path, state, arg_overrides)
        return state

    load_checkpoint_to_cpu._fsa_override_check = True
    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu
