"""Kernel options of the fused ReLU backend (issue 22.3), on CPU with fake device
properties: tiles chosen per head dim, dtype and shared memory so that the backward fits."""

from types import SimpleNamespace

import pytest
import torch

from fairseq_sparse_attn.attention import flex_relu as fr

H100, A100, CONSUMER = 232448, 166912, 101376  # 227, 163, 99 KiB
HEAD_DIMS = (32, 64, 128, 256)
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def test_estimate_reproduces_the_h100_failure_of_issue_22():
    # head dim 128, value width 256 (sink column padded), fp16, torch's H100 default tiles
    assert fr._padded_width(128) == 256
    assert fr.bwd_shared_memory(64, 128, 128, 64, 3, 128, 256, torch.float16) == 246784
    assert 246784 > H100


def test_device_shared_memory_from_properties():
    assert fr.device_shared_memory(properties=SimpleNamespace(shared_memory_per_block_optin=H100)) == H100
    assert fr.device_shared_memory(properties=SimpleNamespace()) == 48 * 1024


@pytest.mark.parametrize(
    "smem,expected_bwd",
    [
        # hand-computed: 2 bytes x (N1 + stages M1) x (128 + 256) + 16 M1
        (H100, (64, 128, 128, 64, 2, 8)),  # 3 stages: 246,784 > 232,448; 2 stages: 197,632
        (A100, (64, 64, 64, 64, 2, 4)),  # 197,632 > 166,912 until 64/64 with 2 stages: 148,480
        (CONSUMER, (32, 64, 64, 32, 2, 4)),  # 148,480 > 101,376; 32/64 2 stages: 98,816
    ],
)
def test_head_dim_128_fp16_backward_choice(smem, expected_bwd):
    opts = fr.flex_kernel_options(128, 256, torch.float16, smem)
    got = tuple(
        opts[k]
        for k in ("bwd_BLOCK_M1", "bwd_BLOCK_N1", "bwd_BLOCK_M2", "bwd_BLOCK_N2", "bwd_num_stages", "bwd_num_warps")
    )
    assert got == expected_bwd


@pytest.mark.parametrize("smem", [H100, A100, CONSUMER])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_every_choice_fits_and_is_the_largest_that_fits(head_dim, dtype, smem):
    v_dim = fr._padded_width(head_dim)
    opts = fr.flex_kernel_options(head_dim, v_dim, dtype, smem)
    e = torch.empty((), dtype=dtype).element_size()
    m1, n1, m2, n2, s = (opts[f"bwd_{k}"] for k in ("BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2", "num_stages"))
    width = head_dim + v_dim
    used = max(e * (n1 + s * m1) * width + 16 * m1, e * (m2 + s * n2) * width + 16 * n2)
    assert used <= smem
    m, n, fs = opts["fwd_BLOCK_M"], opts["fwd_BLOCK_N"], opts["fwd_num_stages"]
    assert e * (m * head_dim + fs * n * width) <= smem
    for name in ("fwd_BLOCK_M", "fwd_BLOCK_N", "bwd_BLOCK_M1", "bwd_BLOCK_N1", "bwd_BLOCK_M2", "bwd_BLOCK_N2"):
        assert opts[name] & (opts[name] - 1) == 0 and 128 % opts[name] == 0  # powers of two dividing
        # FlexAttention's 128-wide block-sparse blocks
    # no candidate before the chosen one fits (the choice is the best that fits)
    chosen = fr.BWD_CANDIDATES.index((m1, n1, m2, n2, s, opts["bwd_num_warps"]))
    for c in fr.BWD_CANDIDATES[:chosen]:
        assert fr.bwd_shared_memory(*c[:5], head_dim, v_dim, dtype) > smem


def test_larger_devices_never_get_smaller_tiles():
    for head_dim in HEAD_DIMS:
        for dtype in DTYPES:
            v = fr._padded_width(head_dim)
            ranks = [
                fr.BWD_CANDIDATES.index(
                    tuple(
                        fr.flex_kernel_options(head_dim, v, dtype, smem)[k]
                        for k in (
                            "bwd_BLOCK_M1",
                            "bwd_BLOCK_N1",
                            "bwd_BLOCK_M2",
                            "bwd_BLOCK_N2",
                            "bwd_num_stages",
                            "bwd_num_warps",
                        )
                    )
                )
                for smem in (H100, A100, CONSUMER)
            ]
            assert ranks == sorted(ranks)


def test_nothing_fits_is_one_clear_error():
    with pytest.raises(ValueError, match="no kernel tiles fit 16384 bytes.*head dim 256"):
        fr.flex_kernel_options(256, 512, torch.float32, 16 * 1024)


def test_auto_never_takes_flex_without_a_recorded_benchmark():
    from fairseq_sparse_attn.attention import core
    from fairseq_sparse_attn.attention.activations import build_activation
    from fairseq_sparse_attn.attention.backends import flex
    from fairseq_sparse_attn.attention.heads import HeadPlan

    assert fr.FLEX_MEASURED_FASTER == {} and flex.FLEX_AUTO_DEVICES == frozenset()
    spec = core.AttendSpec(
        activation=build_activation("relu", 4), dropout=torch.nn.Dropout(0.1), heads=HeadPlan(4), flex_min_keys=16
    )
    call = core.Call(
        activation="relu",
        activation_traits=spec.activation.traits,
        needs_weights=False,
        dropout=False,
        score_bias=False,
        bias_providers=False,
        given_heads=False,
        head_selection=False,
        grad=True,
        device="cuda",
        row_sums=False,
        keys=4096,
        dtype=torch.float16,
    )
    assert flex._flex_enabled(spec, call) is False
