"""The plugin's options, in three modules:

* :mod:`.schema`: the flags (:class:`PluginOptions`: types, choices, ranges, help, preset
  defaults) and the ranges of the fairseq flags the plugin checks;
* :mod:`.resolve`: flags -> configs (:func:`plugin_options`, :func:`resolve`);
* :mod:`.cli`: the argparse flags, the ``--help`` group and the list-valued flag parsers.

The names below are re-exported for code outside the package; the package's own modules
import from the module that defines a name.  ``resolve`` is the module here (its functions:
``options.resolve.resolve``, ``options.resolve.resolve_model``).  Nothing under ``options/``
imports the models.
"""

from .cli import (  # noqa: F401
    HELP_GROUP,
    add_help_group,
    add_plugin_args,
    help_text,
    parse_head_list,
    parse_layer_list,
    parse_pattern_list,
)
from .resolve import (  # noqa: F401
    BIAS_PROVIDER_CONFIGS,
    activation_config,
    backend_config,
    encoder_biases_config,
    encoder_heads_config,
    output_norm_config,
    plugin_options,
)
from .schema import (  # noqa: F401
    ATTENTION_KINDS,
    FFN_TYPES,
    NON_NEGATIVE,
    OPTION_FIELDS,
    POSITIVE,
    RANGES,
    TRANSFORMER_RANGES,
    PluginOptions,
    Range,
    fill_defaults,
    option,
    preset_defaults,
)
