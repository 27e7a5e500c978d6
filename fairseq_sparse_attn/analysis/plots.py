"""PNG plots of ``fsa-analyze`` (matplotlib, Agg canvas; pyplot and the process-wide
backend are not touched, so importing this module changes nothing for a notebook).

* :func:`attention_heatmaps` — one sentence, every head of one layer: weights and
  norms side by side (one row per head, plus the layer row when given), tokens on both
  axes, one colour scale per column (:func:`shared_scale`) with colour bars;
* :func:`layer_curves` — per-layer curves of one or more statistics for one or several
  checkpoints on the same axes (one panel per statistic);
* :func:`real_vs_shuffled` — ReLA's hallucination test: cross-attention null rate per
  layer for real and shuffled targets.

Each returns the matplotlib ``Figure`` after saving it (tests read the plotted data back).
Titles name the model and its run (``Context.title``: architecture and run folder); layers
and heads are numbered from 0, as everywhere in the project (docs/analysis.md).
"""

from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple, Union

import torch


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def _finish(fig, title: str, height: float) -> None:
    """Suptitle above the panels (wrapped to the figure's width, room kept for it), tight
    layout."""
    import textwrap

    if title:
        lines = textwrap.wrap(title, width=max(30, int(fig.get_figwidth() * 12)))
        fig.suptitle("\n".join(lines), fontsize=9)
        fig.tight_layout(rect=(0, 0, 1, 1 - (0.2 + 0.17 * len(lines)) / height))
    else:
        fig.tight_layout()


def _save(fig, path: Union[str, Path]):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(str(path), dpi=100, format="png")
    return fig


def attention_heatmaps(
    panels: Sequence[Tuple[str, Sequence[torch.Tensor]]],
    row_labels: Sequence[str],
    query_labels: Sequence[str],
    key_labels: Sequence[str],
    path: Union[str, Path],
    title: str = "",
    titles: Optional[Sequence[Sequence[str]]] = None,
    query_axis: str = "query",
    key_axis: str = "key",
):
    """A grid of heatmaps: one column per ``(column title, matrices)`` of ``panels``
    (e.g. ``("α", [head 0, head 1, ...])`` and ``("‖α f(x)‖", [...])``), one row per
    entry of ``row_labels`` (heads, then possibly the layer); a panel is titled
    "<row label>: <column title>" unless ``titles[row][column]`` is given.  Every matrix
    is ``(queries, keys)``, drawn with the tokens on both axes (``query_axis`` /
    ``key_axis`` name them).  The panels of a column are compared, so they share one
    colour scale, from 0 (or the column's minimum when negative) to the column's
    maximum, with a colour bar beside each panel."""
    n_rows, n_cols = len(row_labels), len(panels)
    for name, matrices in panels:
        if len(matrices) != n_rows:
            raise ValueError(f"panel {name!r} has {len(matrices)} matrices for {n_rows} rows")
        for m in matrices:
            if tuple(m.shape) != (len(query_labels), len(key_labels)):
                raise ValueError(
                    f"panel {name!r}: matrix of shape {tuple(m.shape)}, expected "
                    f"({len(query_labels)} queries, {len(key_labels)} keys)"
                )
    cell = 0.22
    width = max(4.0, n_cols * (len(key_labels) * cell + 2.2))
    height = max(3.0, n_rows * (len(query_labels) * cell + 1.6))
    fig = _figure(width, height)
    axes = fig.subplots(n_rows, n_cols, squeeze=False)
    for c, (name, matrices) in enumerate(panels):
        data = [m.detach().float().cpu().numpy() for m in matrices]
        vmin, vmax = shared_scale(data)
        for r, values in enumerate(data):
            ax = axes[r][c]
            image = ax.imshow(values, cmap="viridis", vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
            bar = fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02)
            bar.ax.tick_params(labelsize=6)
            bar.set_label(name, fontsize=7)
            ax.set_title(titles[r][c] if titles else f"{row_labels[r]}: {name}", fontsize=8)
            ax.set_xticks(range(len(key_labels)))
            ax.set_xticklabels(key_labels, rotation=90, fontsize=6)
            ax.set_yticks(range(len(query_labels)))
            ax.set_yticklabels(query_labels, fontsize=6)
            ax.set_xlabel(key_axis, fontsize=7)
            ax.set_ylabel(query_axis, fontsize=7)
    _finish(fig, title, height)
    return _save(fig, path)


def shared_scale(matrices) -> Tuple[float, float]:
    """``(vmin, vmax)`` of one colour scale for every matrix: from 0 (or the smallest value
    when one is negative) to the largest value (1 when every value is 0)."""
    values = [float(v) for m in matrices if m.size for v in (m.min(), m.max())]
    low = min([0.0, *values])
    high = max([0.0, *values])
    return low, (high if high > low else low + 1.0)


def matplotlib_color_cycle():
    """The default property cycle's entries (``{"color": ...}``)."""
    import matplotlib

    return list(matplotlib.rcParams["axes.prop_cycle"])


def layer_curves(
    series: Dict[str, Dict[str, Sequence[Tuple[int, Optional[float]]]]],
    path: Union[str, Path],
    title: str = "",
    ylabels: Optional[Dict[str, str]] = None,
):
    """``series[statistic][label] = [(layer, value), ...]``: one panel per statistic, one
    line per label (checkpoint) on the same axes; ``None``/``nan`` values are gaps."""
    import math

    if not series:
        raise ValueError("nothing to plot: no statistic given")
    names = list(series)
    height = 3.4
    fig = _figure(4.2 * len(names), height)
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    # one colour per label in every panel: a panel where some label has no values (AER
    # only where align ran) must not shift the others' colours
    labels = list(dict.fromkeys(label for name in names for label in series[name]))
    cycle = [c["color"] for c in matplotlib_color_cycle()]
    colors = {label: cycle[i % len(cycle)] for i, label in enumerate(labels)}
    for ax, name in zip(axes, names):
        for label, points in series[name].items():
            xs = [int(layer) for layer, _ in points]
            ys = [
                float("nan") if v is None or (isinstance(v, float) and math.isnan(v)) else float(v) for _, v in points
            ]
            ax.plot(xs, ys, marker="o", label=label, color=colors[label])
        ax.set_xlabel("layer")
        ax.set_ylabel((ylabels or {}).get(name, name))
        ax.set_title(name, fontsize=9)
        layers = sorted({int(layer) for pts in series[name].values() for layer, _ in pts})
        if layers:
            ax.set_xticks(layers)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    _finish(fig, title, height)
    return _save(fig, path)


def real_vs_shuffled(
    layers: Sequence[int],
    real: Sequence[float],
    shuffled: Sequence[float],
    path: Union[str, Path],
    title: str = "cross-attention null rate",
):
    """Grouped bars per layer: null rate with the real targets and with shuffled ones."""
    if not (len(layers) == len(real) == len(shuffled)):
        raise ValueError(f"{len(layers)} layers, {len(real)} real and {len(shuffled)} shuffled values")
    fig = _figure(max(4.0, 0.9 * len(layers) + 2), 3.4)
    ax = fig.subplots()
    xs = list(range(len(layers)))
    ax.bar([x - 0.2 for x in xs], list(real), width=0.4, label="real targets")
    ax.bar([x + 0.2 for x in xs], list(shuffled), width=0.4, label="shuffled targets")
    ax.set_xticks(xs)
    ax.set_xticklabels([str(layer) for layer in layers])
    ax.set_xlabel("decoder layer")
    ax.set_ylabel("null rate")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    _finish(fig, "", 3.4)
    return _save(fig, path)
