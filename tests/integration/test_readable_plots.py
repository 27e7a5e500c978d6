"""Plots people can read: the demo heatmap (scripts/demo.py ``heatmap``) and
``fsa-analyze heatmap`` on a fixture checkpoint.  Layers and heads are numbered the same
way (from 0) in both: the demo's "layer L, head h" panel is the matrix that
``fsa-analyze heatmap --layer L`` reports as head h, and the one the explorer embeds;
every heatmap has a colour bar, one scale per model in the demo's (softmax's weights stay
below 1, ReLA's do not), one scale where panels of one model are compared, tokens on both axes
and a title that names the model and the run."""

import importlib.util
from pathlib import Path

import pytest
import torch

from fairseq_sparse_attn.analysis import cli, plots

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "checkpoints"
DATA = FIXTURES / "data-bin"
SENTENCE = 1  # a man rides a bi@@ cy@@ cle


def demo_module():
    spec = importlib.util.spec_from_file_location("fsa_demo", REPO / "scripts" / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load(name):
    from fairseq import checkpoint_utils

    import fairseq_sparse_attn.plugin  # noqa: F401

    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(FIXTURES / f"{name}.pt")], arg_overrides={"data": str(DATA)}
    )
    task.load_dataset("test")
    return models[0].eval(), task


def images(fig):
    return [ax for ax in fig.axes if ax.images and ax.get_label() != "<colorbar>"]


def colorbars(fig):
    return [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]


@pytest.fixture(scope="module")
def demo_figure(tmp_path_factory):
    demo = demo_module()
    model, task = load("rela_g")
    w, src, tgt, layer = demo.cross_attention_of(model, task, SENTENCE)
    out = tmp_path_factory.mktemp("demo_out") / "cross_attention_heatmap.png"
    softmax, stask = load("softmax")
    w2, src2, tgt2, layer2 = demo.cross_attention_of(softmax, stask, SENTENCE)
    fig = demo.heatmap([("rela_g", w, src, tgt, layer), ("softmax", w2, src2, tgt2, layer2)], out)
    return fig, w, w2, src, tgt, layer, out


def test_demo_heatmap_is_readable(demo_figure):
    fig, w, w2, src, tgt, layer, out = demo_figure
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    axes = images(fig)
    assert len(axes) == 2 * 4
    # one scale per model (row): 0 .. that model's largest weight, so softmax's row (at most 1)
    # is not dimmed by ReLA-g's larger weights (issue 34); its colour bar and the title say so
    assert float(w2.max()) <= 1.0 + 1e-6
    for ax in axes[:4]:
        assert ax.images[0].get_clim() == (0.0, pytest.approx(float(w.max())))
    for ax in axes[4:]:
        assert ax.images[0].get_clim() == (0.0, pytest.approx(float(w2.max())))
    bars = colorbars(fig)
    assert len(bars) == 2
    assert bars[0].get_ylabel().startswith("rela_g: attention weight") and "this row's scale" in bars[0].get_ylabel()
    assert bars[1].get_ylabel().startswith("softmax: attention weight")
    assert "one colour scale per model (row)" in fig._suptitle.get_text()
    for ax in axes:
        assert [t.get_text() for t in ax.get_xticklabels()] == src
        assert [t.get_text() for t in ax.get_yticklabels()] == tgt
        assert ax.get_xlabel() == "source token" and ax.get_ylabel() == "target token predicted"
    assert "rela_g" in fig._suptitle.get_text() and "softmax" in fig._suptitle.get_text()
    assert f"run {out.parent.name}" in fig._suptitle.get_text()


def test_layers_and_heads_numbered_alike_in_demo_analyze_and_explorer(demo_figure, tmp_path, monkeypatch):
    fig, w, _, src, tgt, layer, _ = demo_figure
    assert layer == 1  # the last of 2 decoder layers, counted from 0
    titles = [ax.get_title() for ax in images(fig)[:4]]
    assert titles == [f"rela_g: cross-attention layer 1, head {h}" for h in range(4)]
    drawn = []
    real = plots.attention_heatmaps
    monkeypatch.setattr(plots, "attention_heatmaps", lambda *a, **k: drawn.append(real(*a, **k)) or drawn[-1])
    out = tmp_path / "analyze"
    assert (
        cli.main(
            [
                "heatmap",
                str(DATA),
                "--path",
                str(FIXTURES / "rela_g.pt"),
                "-s",
                "en",
                "-t",
                "de",
                "--output-dir",
                str(out),
                "--sentence",
                str(SENTENCE),
                "--layer",
                str(layer),
                "--kind",
                "cross",
                "--allow-output-norm",
                "--no-progress",
            ]
        )
        == 0
    )
    import json

    report = json.loads((out / "heatmap.json").read_text(encoding="utf-8"))
    assert report["layer"] == layer
    for h in range(4):  # the demo's "head h" of "layer 1" is fsa-analyze's head h of --layer 1
        torch.testing.assert_close(torch.tensor(report["weights"][h]), w[h].float(), rtol=1e-5, atol=1e-6)
    # the fsa-analyze figure: model and run in the title, colour bars, a shared scale per column
    (afig,) = drawn
    title = afig._suptitle.get_text().replace("\n", " ")
    assert title.startswith("rela_transformer_iwslt_de_en, run checkpoints/rela_g.pt: cross attention, layer 1")
    axes = images(afig)
    assert len(colorbars(afig)) == len(axes) == 2 * 5
    alpha = [ax for ax in axes if ax.get_title().endswith(": α") or "mean over heads of α" in ax.get_title()]
    assert len(alpha) == 5 and len({ax.images[0].get_clim() for ax in alpha}) == 1
    assert [t.get_text() for t in axes[0].get_xticklabels()] == report["key_tokens"]
    assert [t.get_text() for t in axes[0].get_yticklabels()] == report["query_tokens"]
    assert axes[0].get_xlabel() == "source (key)" and axes[0].get_ylabel().startswith("decoder input")
    # the explorer's layer 1, head h: the same matrices
    from fairseq_sparse_attn.analysis.explorer import WEIGHT_SCALE, decode_weights
    from fairseq_sparse_attn.analysis.explorer_html import embedded_data

    page = tmp_path / "explore.html"
    assert (
        cli.main(
            [
                "explore",
                "--path",
                str(FIXTURES / "rela_g.pt"),
                "--data",
                str(DATA),
                "-s",
                "en",
                "-t",
                "de",
                "--n",
                str(SENTENCE + 1),
                "--out",
                str(page),
                "--no-progress",
            ]
        )
        == 0
    )
    entry = embedded_data(page.read_text(encoding="utf-8"))["sentences"][SENTENCE]["attention"]["cross"][layer]
    assert entry["layer"] == layer
    assert (decode_weights(entry["weights"]) - w.double()).abs().max() <= 1.0 / WEIGHT_SCALE


def test_shared_scale_of_a_column():
    import numpy as np

    assert plots.shared_scale([np.array([[0.0, 0.5]]), np.array([[2.0]])]) == (0.0, 2.0)
    assert plots.shared_scale([np.array([[-1.0, 0.5]])]) == (-1.0, 0.5)
    assert plots.shared_scale([np.zeros((2, 2))]) == (0.0, 1.0)
