"""Users' checkpoints keep working: the fixture checkpoints made by the code before the
attention core v2 redesign (tests/fixtures/make_fixture_checkpoints.py, never regenerated)
load through fairseq's ``checkpoint_utils`` and reproduce their saved outputs.

Tolerance 1e-5 (absolute and relative), float32: the saved outputs were computed on another
CPU, and float32 matrix kernels sum in a CPU-dependent order.  On an AMD EPYC VM
(2026-11-25) the DEA, Localness and Rel_Pos-with-values fixtures differed from their saved
logits by at most 1.6e-6 absolute, above the 1e-6 this test used before; anything a code
change would alter (a norm's eps, a mask, an init, a head order) moves the logits by
orders of magnitude more (see test_fixture_tolerance_catches_a_small_change)."""

from pathlib import Path

import pytest
import torch

TOLERANCE = dict(atol=1e-5, rtol=1e-5)

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "checkpoints"
EXPECTED = torch.load(FIXTURES / "expected.pt", weights_only=False)
NAMES = sorted(EXPECTED["outputs"])


def test_every_required_configuration_has_a_fixture():
    required = {
        "rela_g",
        "rela_i",
        "sparsemax",
        "entmax15",
        "reluformer_softmax_ffn",
        "fixed_7f1l_word",
        "fixed_8f",
        "lpea_rhe",
        "dea",
        "rel_pos_values",
        "localness",
    }
    assert required <= set(NAMES)
    for name in NAMES:
        size = (FIXTURES / f"{name}.pt").stat().st_size
        assert size < 1024 * 1024, (name, size)


@pytest.mark.parametrize("name", NAMES)
def test_fixture_checkpoint_reproduces_its_outputs(name):
    from fairseq import checkpoint_utils

    import fairseq_sparse_attn.plugin  # noqa: F401  (registers the plugin)

    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(FIXTURES / f"{name}.pt")], arg_overrides={"data": str(FIXTURES / "data-bin")}
    )
    model = models[0].eval()
    task_name = EXPECTED["configs"][name][2]
    net_input = EXPECTED["batches"][task_name]
    expected = EXPECTED["outputs"][name]
    with torch.no_grad():
        enc_input = {k: v for k, v in net_input.items() if k != "prev_output_tokens"}
        enc = model.encoder(**enc_input)
        logits, _ = model(**net_input)
    torch.testing.assert_close(enc["encoder_out"][0], expected["encoder_out"], **TOLERANCE)
    torch.testing.assert_close(logits, expected["logits"], **TOLERANCE)


def _load(name):
    from fairseq import checkpoint_utils

    import fairseq_sparse_attn.plugin  # noqa: F401  (registers the plugin)

    models, _, _ = checkpoint_utils.load_model_ensemble_and_task(
        [str(FIXTURES / f"{name}.pt")], arg_overrides={"data": str(FIXTURES / "data-bin")}
    )
    return models[0].eval()


def test_fixture_tolerance_catches_a_small_change():
    """The tolerance is far below what a small change does: scaling every attention score by
    1.001 (one in a thousand) moves the ReLA-g fixture's logits by more than 10x it."""
    from fairseq_sparse_attn.attention.multihead import SparseMultiheadAttention

    model = _load("rela_g")
    net_input = EXPECTED["batches"][EXPECTED["configs"]["rela_g"][2]]
    expected = EXPECTED["outputs"]["rela_g"]["logits"]
    for module in model.modules():
        if isinstance(module, SparseMultiheadAttention):
            module.scaling *= 1.001
    with torch.no_grad():
        logits, _ = model(**net_input)
    assert (logits - expected).abs().max() > 10 * TOLERANCE["atol"]
