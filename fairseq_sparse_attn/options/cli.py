"""The command line side of the options: the argparse flags made from the schema
(:func:`add_plugin_args`, called by ``sparse_transformer.add_args``), the "sparse
attention" group of ``fsa-train --help`` (:func:`add_help_group`), and the parsers of the
list-valued flags (layers, fixed patterns, head indices).
"""

import re
from dataclasses import fields
from typing import Any, Dict, FrozenSet, Optional, Tuple

from ..attention.fixed_patterns import PATTERN_SETS, check_pattern_names
from .schema import OPTION_FIELDS, PluginOptions, help_values


def add_plugin_args(parser):
    """The plugin's flags, from :class:`PluginOptions` (no argparse defaults, see above)."""
    extra = help_values()
    for f in fields(PluginOptions):
        meta = f.metadata
        choices = meta["choices"]() if callable(meta["choices"]) else meta["choices"]
        kwargs: Dict[str, Any] = {}
        if meta["switch"]:
            kwargs.update(action="store_true", default=meta["switch_default"])
        else:
            if meta["type"] is not None:
                kwargs["type"] = meta["type"]
            if choices is not None:
                kwargs["choices"] = list(choices)
            if meta["metavar"] is not None:
                kwargs["metavar"] = meta["metavar"]
        help_text = meta["help"].format(choices=", ".join(choices) if choices else "", **extra)
        parser.add_argument("--" + f.name.replace("_", "-"), help=help_text, **kwargs)


# ---------------------------------------------------------------- --help
HELP_GROUP = "sparse attention"


def _shown(value) -> str:
    if value is None:
        return "not set"
    if value == "":
        return "''"
    return str(value)


def help_text(name: str, default=None) -> str:
    """The help of ``--NAME`` for ``--help``: the field's help, then its choices (when the
    help does not list them) and ``default``."""
    f = OPTION_FIELDS[name]
    meta = f.metadata
    choices = meta["choices"]() if callable(meta["choices"]) else meta["choices"]
    text = meta["help"].format(choices=", ".join(choices) if choices else "", **help_values())
    text = re.sub(r" \(default [^();]*\)", "", text)  # the default is said once, below
    notes = []
    if choices is not None and not all(re.search(rf"\b{re.escape(str(c))}\b", text) for c in choices):
        notes.append("choices: " + ", ".join(map(str, choices)))
    notes.append("default: " + _shown(default))
    return f"{text} [{'; '.join(notes)}]"


def _takes_plugin_flags(model_class) -> bool:
    """The model adds the plugin's flags (a plugin architecture's model; read from its own
    ``add_args``, so this module needs no import of the models)."""
    import argparse

    probe = argparse.ArgumentParser(add_help=False)
    model_class.add_args(probe)
    return any(action.dest in OPTION_FIELDS for action in probe._actions)


def add_help_group(parser, arch: Optional[str] = None):
    """Gather the plugin's flags in ``parser`` into one argument group, "sparse attention",
    each with its choices and default, for ``fsa-train --help``.

    fairseq adds a model's flags only after parsing ``--arch``, into its
    "Model-specific configuration" group, and its ``--help`` exits before that.  With a
    plugin ``arch`` whose flags ``parser`` already holds, they move to the group (display
    only: parsing is unchanged) and the defaults shown are the ones the preset fills in;
    without ``arch`` they are added with the defaults of :class:`PluginOptions`.  A
    stock fairseq ``arch`` takes none of them: nothing is added.
    """
    import argparse

    defaults = {f.name: f.default for f in fields(PluginOptions)}
    if arch is not None:
        from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

        model = ARCH_MODEL_REGISTRY.get(arch)
        if model is None or not _takes_plugin_flags(model):
            return None
        filled = argparse.Namespace()
        ARCH_CONFIG_REGISTRY[arch](filled)
        defaults.update({k: v for k, v in vars(filled).items() if k in OPTION_FIELDS and v is not None})
    group = parser.add_argument_group(
        HELP_GROUP,
        "the plugin's options (fairseq_sparse_attn), for every plugin architecture"
        + (
            f"; defaults as --arch {arch} sets them"
            if arch
            else " (sparse_transformer and its presets); defaults as sparse_transformer sets them, "
            "a preset may change them: `fsa-train --arch NAME --help` shows its own"
        ),
    )
    flags = {"--" + name.replace("_", "-"): name for name in OPTION_FIELDS}
    present = [a for a in parser._actions if any(o in flags for o in a.option_strings)]
    if not present:
        add_plugin_args(group)
        present = [a for a in parser._actions if any(o in flags for o in a.option_strings)]
    else:
        for other in parser._action_groups:
            if other is not group:
                other._group_actions[:] = [a for a in other._group_actions if a not in present]
        group._group_actions.extend(present)
    for action in present:
        name = flags[next(o for o in action.option_strings if o in flags)]
        action.help = help_text(name, defaults[name])
    return group


# ---------------------------------------------------------------- list-valued flags
def parse_layer_list(value, num_layers: int, flag: str) -> FrozenSet[int]:
    """``"all"``, ``""``/``"none"`` or comma-separated 0-based layer indices."""
    if value is None:
        return frozenset()
    if not isinstance(value, str):
        value = ",".join(str(v) for v in value)
    value = value.strip()
    if value.lower() == "all":
        return frozenset(range(num_layers))
    if value.lower() in ("", "none"):
        return frozenset()
    try:
        layers = frozenset(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise ValueError(
            f"{flag}: expected 'all' or comma-separated 0-based layer indices such as '0,1', got {value!r}"
        ) from None
    bad = sorted(i for i in layers if not 0 <= i < num_layers)
    if bad:
        raise ValueError(
            f"{flag}: layer {bad[0]} out of range, the encoder has {num_layers} layers (0..{num_layers - 1})"
        )
    return layers


def parse_pattern_list(value) -> Tuple[str, ...]:
    """Pattern names from a flag value: ``""``/``"none"`` (no fixed heads), ``"7F"``,
    ``"8F"``, or comma-separated names (``"current,previous,next"``)."""
    if value is None:
        return ()
    if not isinstance(value, str):
        return tuple(check_pattern_names(value))
    value = value.strip()
    if value.lower() in ("", "none"):
        return ()
    if value.upper() in PATTERN_SETS:
        return PATTERN_SETS[value.upper()]
    return tuple(check_pattern_names([v.strip() for v in value.split(",") if v.strip()]))


def parse_head_list(value) -> Tuple[int, ...]:
    """Head indices from a flag value: ``""``/``"none"`` or comma-separated integers."""
    if value is None:
        return ()
    if not isinstance(value, str):
        return tuple(int(v) for v in value)
    value = value.strip()
    if value.lower() in ("", "none"):
        return ()
    try:
        return tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"expected comma-separated head indices such as '0,7', got {value!r}") from None
