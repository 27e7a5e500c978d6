"""Users' checkpoints keep working: the fixture checkpoints made by the code before the
attention core v2 redesign (tests/fixtures/make_fixture_checkpoints.py, never regenerated)
load through fairseq's ``checkpoint_utils`` and reproduce their saved outputs (1e-6)."""

from pathlib import Path

import pytest
import torch

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "checkpoints"
EXPECTED = torch.load(FIXTURES / "expected.pt", weights_only=False)
NAMES = sorted(EXPECTED["outputs"])


def test_every_required_configuration_has_a_fixture():
    required = {"rela_g", "rela_i", "sparsemax", "entmax15", "reluformer_softmax_ffn",
                "fixed_7f1l_word", "fixed_8f", "lpea_rhe", "dea", "rel_pos_values", "localness"}
    assert required <= set(NAMES)
    for name in NAMES:
        size = (FIXTURES / f"{name}.pt").stat().st_size
        assert size < 1024 * 1024, (name, size)


@pytest.mark.parametrize("name", NAMES)
def test_fixture_checkpoint_reproduces_its_outputs(name):
    import fairseq_sparse_attn  # noqa: F401  (registers the plugin)
    from fairseq import checkpoint_utils

    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(FIXTURES / f"{name}.pt")], arg_overrides={"data": str(FIXTURES / "data-bin")})
    model = models[0].eval()
    task_name = EXPECTED["configs"][name][2]
    net_input = EXPECTED["batches"][task_name]
    expected = EXPECTED["outputs"][name]
    with torch.no_grad():
        enc_input = {k: v for k, v in net_input.items() if k != "prev_output_tokens"}
        enc = model.encoder(**enc_input)
        logits, _ = model(**net_input)
    torch.testing.assert_close(enc["encoder_out"][0], expected["encoder_out"], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(logits, expected["logits"], atol=1e-6, rtol=1e-6)
