"""The call plan (attention/call_plan.py): its inference call gives the same numbers as
the general path, bit for bit, in every kind of call it takes; the calls it must leave to
the general path; the plan following the module; whole-model beam search unchanged; the
plan's projections and cache against stock fairseq's own code."""

import pytest
import torch
from fairseq import utils

import fairseq_sparse_attn.attention.call_plan as call_plan_module
from fairseq_sparse_attn.attention import SparseMultiheadAttention
from fairseq_sparse_attn.attention.intermediates import collect

from helpers import attention_config, build_model, random_batch

E, H = 16, 4
VARIANTS = [
    ("relu", "gated_rmsnorm"),
    ("relu", "rmsnorm_i"),
    ("relu", "none"),
    ("relu_scaled", "none"),
    ("sparsemax", "none"),
    ("entmax15", "gated_rmsnorm"),
    ("gelu", "layernorm"),
    ("leaky_relu", "gated_layernorm"),
]


def state_key(module):
    """The key of a module's cache: one per module, and the plan's ``state_key``."""
    return module._get_full_incremental_state_key("attn_state")


class Seen(list):
    """The plans that ran a method, as their modules' state keys; compared with modules."""

    def count(self, module):
        return list.count(self, state_key(module))

    def __contains__(self, module):
        return list.__contains__(self, state_key(module))

    def __eq__(self, modules):
        return list(self) == [state_key(m) for m in modules]


def spy_on(monkeypatch, method):
    """The modules whose calls went through ``CallPlan.<method>``, in order."""
    seen = Seen()
    real = getattr(call_plan_module.CallPlan, method)

    def spy(plan, *args, **kwargs):
        seen.append(plan.state_key)
        return real(plan, *args, **kwargs)

    monkeypatch.setattr(call_plan_module.CallPlan, method, spy)
    return seen


@pytest.fixture
def calls(monkeypatch):
    """The calls that took the inference call."""
    return spy_on(monkeypatch, "inline_call")


def pair(act, norm, **kw):
    """Two modules with the same parameters: ``auto`` (takes the inference call) and the
    general path (:class:`GeneralPath`, on ``materialized``)."""
    torch.manual_seed(0)
    fast = SparseMultiheadAttention(E, H, config=attention_config(act, norm), **kw).eval()
    with torch.no_grad():  # non-trivial norm parameters (fresh gains are all 1)
        for p in fast.output_norm.parameters():
            p.uniform_(-1.5, 1.5)
    general = GeneralPath(E, H, config=attention_config(act, norm), **kw).eval()
    general.load_state_dict(fast.state_dict())
    general.backend = "materialized"
    return fast, general


class GeneralPath(SparseMultiheadAttention):
    """A module whose every call takes the general path (``attend()``): a module on
    ``materialized`` takes the plan's inline and plain calls as ``auto`` does (they run that
    backend's ops), so this one's plan says it may not, whatever it is rebuilt from."""

    def plan(self):
        return super().plan()._replace(inline=False)


def assert_identical(a, b):
    assert (a is None) == (b is None)
    if a is not None:
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b), (a - b).abs().max()


def assert_same_cache(fast, general, state_f, state_g):
    cf, cg = fast._get_input_buffer(state_f), general._get_input_buffer(state_g)
    assert sorted(cf) == sorted(cg)
    for name in cg:
        assert_identical(cf[name], cg[name])


@pytest.mark.parametrize("act,norm", VARIANTS)
def test_incremental_self_attention_equals_the_general_path(act, norm, calls):
    fast, general = pair(act, norm, self_attention=True)
    xs = torch.randn(6, 3, E)
    state_f, state_g = {}, {}
    with torch.no_grad():
        for t in range(6):
            x = xs[t : t + 1]
            of, wf = fast(x, x, x, incremental_state=state_f, need_weights=t % 2 == 0)
            og, wg = general(x, x, x, incremental_state=state_g, need_weights=t % 2 == 0)
            assert_identical(of, og)
            assert_identical(wf, wg)
            assert_same_cache(fast, general, state_f, state_g)
    assert calls.count(fast) == 6 and general not in calls


@pytest.mark.parametrize("act,norm", VARIANTS)
def test_cross_attention_with_beams_and_padding_equals_the_general_path(act, norm, calls):
    """Encoder keys kept once per sentence (beam 2), a padded source, fairseq's
    static_kv cache, then a beam reordering."""
    fast, general = pair(act, norm, kdim=E, vdim=E, encoder_decoder_attention=True)
    for m in (fast, general):
        m.set_beam_size(2)
    enc = torch.randn(5, 2, E)[:, [0, 0, 1, 1]]  # (src, bsz * beam, E)
    pad = torch.zeros(4, 5, dtype=torch.bool)
    pad[2:, :2] = True  # sentence 1 is left-padded
    queries = torch.randn(4, 4, E)
    state_f, state_g = {}, {}
    with torch.no_grad():
        for t in range(4):
            x = queries[t : t + 1]
            # fairseq asks the alignment layer's cross-attention for per-head weights
            per_head = t % 2 == 1
            of, wf = fast(
                x, enc, enc, key_padding_mask=pad, incremental_state=state_f, static_kv=True, need_head_weights=per_head
            )
            og, wg = general(
                x, enc, enc, key_padding_mask=pad, incremental_state=state_g, static_kv=True, need_head_weights=per_head
            )
            assert_identical(of, og)
            assert_identical(wf, wg)
            assert wf.shape == ((H, 4, 1, 5) if per_head else (4, 1, 5))
            assert torch.all(wf[..., 2:, :, :2] == 0)  # padded keys get no weight
            assert_same_cache(fast, general, state_f, state_g)
            if t == 1:
                order = torch.tensor([1, 0, 3, 2])
                fast.reorder_incremental_state(state_f, order)
                general.reorder_incremental_state(state_g, order)
    assert calls.count(fast) == 4


@pytest.mark.parametrize("act,norm", [("relu", "gated_rmsnorm"), ("sparsemax", "none")])
def test_one_sentence_with_beams_equals_the_general_path(act, norm, calls):
    """Batch 1 with beam 4 (kv_bsz = 1: one encoder copy for four hypotheses), the shape
    of interactive translation; it used to fail a view in the inference call."""
    fast, general = pair(act, norm, kdim=E, vdim=E, encoder_decoder_attention=True)
    for m in (fast, general):
        m.set_beam_size(4)
    enc = torch.randn(7, 1, E).repeat_interleave(4, dim=1)
    state_f, state_g = {}, {}
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(1, 4, E)
            of, wf = fast(x, enc, enc, incremental_state=state_f, static_kv=True)
            og, wg = general(x, enc, enc, incremental_state=state_g, static_kv=True)
            assert_identical(of, og)
            assert_identical(wf, wg)
            assert_same_cache(fast, general, state_f, state_g)
    assert fast._get_input_buffer(state_f)["prev_key"].size(0) == 1
    assert calls.count(fast) == 3


@pytest.mark.parametrize("act,norm", VARIANTS)
def test_whole_sequence_calls_equal_the_general_path(act, norm, calls):
    """No cache: encoder self-attention with padding, teacher forcing with fairseq's causal
    -inf mask, cross-attention over a whole target (what validation runs without
    gradients)."""
    fast, general = pair(act, norm, self_attention=True)
    x = torch.randn(5, 3, E)
    pad = torch.zeros(3, 5, dtype=torch.bool)
    pad[1, 3:] = True
    future = utils.fill_with_neg_inf(torch.zeros(5, 5)).triu(1)
    with torch.no_grad():
        for kw in (dict(key_padding_mask=pad), dict(attn_mask=future), dict()):
            of, wf = fast(x, x, x, **kw)
            og, wg = general(x, x, x, **kw)
            assert_identical(of, og)
            assert_identical(wf, wg)
    cross_f, cross_g = pair(act, norm, encoder_decoder_attention=True)
    enc = torch.randn(7, 3, E)
    enc_pad = torch.zeros(3, 7, dtype=torch.bool)
    enc_pad[2, 5:] = True
    with torch.no_grad():
        assert_identical(
            cross_f(x, enc, enc, key_padding_mask=enc_pad, need_weights=False)[0],
            cross_g(x, enc, enc, key_padding_mask=enc_pad, need_weights=False)[0],
        )
    assert calls.count(fast) == 3 and calls.count(cross_f) == 1


@pytest.mark.parametrize("act,norm", VARIANTS)
@pytest.mark.parametrize("p", [0.0, 0.2])
def test_training_calls_equal_the_general_path_with_gradients(act, norm, p, monkeypatch):
    """Training (gradients, attention dropout p): the plan's plain call (no analysis, auto
    choosing materialized) gives the general path's outputs and every parameter's and the
    input's gradient, bit for bit: padding, causal | padding, no mask, cross-attention."""
    plain = spy_on(monkeypatch, "plain")
    fast, general = pair(act, norm, self_attention=True, dropout=p)
    cross_f, cross_g = pair(act, norm, encoder_decoder_attention=True, dropout=p)
    x = torch.randn(5, 3, E)
    pad = torch.zeros(3, 5, dtype=torch.bool)
    pad[1, 3:] = True
    future = utils.fill_with_neg_inf(torch.zeros(5, 5)).triu(1)
    enc = torch.randn(7, 3, E)
    enc_pad = torch.zeros(3, 7, dtype=torch.bool)
    enc_pad[2, 5:] = True
    upstream = torch.randn(5, 3, E)
    for f, g, kw in [
        (fast, general, dict(key_padding_mask=pad)),
        (fast, general, dict(key_padding_mask=pad, attn_mask=future)),
        (fast, general, dict()),
        (cross_f, cross_g, dict(key_padding_mask=enc_pad)),
    ]:
        results = []
        for m in (f, g):
            m.train()
            m.zero_grad()
            inp = x.clone().requires_grad_()
            memory = inp if m.self_attention else enc
            torch.manual_seed(1)  # the same dropout draws
            out, _ = m(inp, memory, memory, need_weights=False, **kw)
            out.backward(upstream)
            results.append([out, inp.grad] + [p.grad for p in m.parameters()])
        for a, b in zip(*results):
            assert_identical(a, b)
    assert plain.count(fast) == 3 and plain.count(cross_f) == 1 and general not in plain


def test_training_calls_that_auto_gives_another_backend_go_to_attend(monkeypatch):
    """The plain call only takes what ``auto`` would run on ``materialized``: a backend
    auto prefers for the call (e.g. triton where a GPU measurement shows it faster) gets it."""
    from fairseq_sparse_attn.attention import core
    from fairseq_sparse_attn.attention.backends.materialized import materialized

    ran = []

    def probe(q, k, v, inputs, spec, call):
        ran.append(call.grad)
        return materialized(q, k, v, inputs, spec, call)

    backend = core.Backend("probe", probe, core.Capabilities(activation_traits=frozenset({"rectified"})), priority=1)
    monkeypatch.setitem(core.BACKENDS, "probe", backend)
    plain = spy_on(monkeypatch, "plain")
    fast, general = pair("relu", "gated_rmsnorm", self_attention=True)
    fast.train()
    x = torch.randn(4, 2, E, requires_grad=True)
    fast(x, x, x, need_weights=False)[0].sum().backward()
    assert ran == [True] and plain == []


def test_a_module_on_materialized_takes_the_plain_and_inference_calls(monkeypatch, calls):
    """``--attn-backend materialized`` names the ops the plain and inference calls run, so
    its training and decoding calls take them as auto's do: the general path's numbers bit
    for bit (outputs, weights, the input's and every parameter's gradient)."""
    plain = spy_on(monkeypatch, "plain")
    named, general = pair("relu", "gated_rmsnorm", self_attention=True)
    named.backend = "materialized"
    pad = torch.zeros(2, 4, dtype=torch.bool)
    pad[1, 3:] = True
    results = []
    for m in (named, general):
        m.train()
        m.zero_grad()
        x = torch.randn(4, 2, E, generator=torch.Generator().manual_seed(5)).requires_grad_()
        out, _ = m(x, x, x, key_padding_mask=pad, need_weights=False)
        out.sum().backward()
        with torch.no_grad():
            m.eval()
            o, w = m(x, x, x, key_padding_mask=pad)
        results.append([out, x.grad, o, w] + [p.grad for p in m.parameters()])
    for a, b in zip(*results):
        assert_identical(a, b)
    assert plain.count(named) == 2 and calls == [named] and general not in plain


@pytest.mark.parametrize("backend", ["auto", "materialized"])
def test_scores_before_the_activation_with_gradients(backend):
    """``before_softmax`` returns the scores on every path, gradients recorded or not
    (the plain training call once returned the attention's output for it)."""
    fast, general = pair("relu", "gated_rmsnorm", self_attention=True)
    fast.backend = backend
    x = torch.randn(4, 2, E)
    scores, v = fast(x, x, x, before_softmax=True)
    ref, v_ref = general(x, x, x, before_softmax=True)
    assert scores.shape == (2 * H, 4, 4)
    assert_identical(scores, ref)
    assert_identical(v, v_ref)


def test_activation_hooks_run_in_the_plain_and_inference_calls(monkeypatch, calls):
    """A hook on the activation module sees the scores and the mask there too, with the
    general path's numbers (the activation is then called as a module)."""
    plain = spy_on(monkeypatch, "plain")
    fast, general = pair("relu", "gated_rmsnorm", self_attention=True)
    seen = {id(fast): [], id(general): []}
    for m in (fast, general):
        m.activation.register_forward_hook(lambda mod, args, out, m=m: seen[id(m)].append((args[1], out)))
    pad = torch.zeros(2, 4, dtype=torch.bool)
    pad[0, 2:] = True
    x = torch.randn(4, 2, E)
    outs = []
    for m in (fast, general):
        m.train()
        outs.append(m(x, x, x, key_padding_mask=pad, need_weights=False)[0])
        with torch.no_grad():
            outs.append(m.eval()(x, x, x, key_padding_mask=pad)[0])
    assert plain.count(fast) == 2 and calls == [fast]
    assert len(seen[id(fast)]) == len(seen[id(general)]) == 2
    for (mask_f, w_f), (mask_g, w_g) in zip(seen[id(fast)], seen[id(general)]):
        assert mask_f is not None and torch.equal(mask_f, mask_g)
        assert_identical(w_f.view(w_g.shape), w_g)
    assert_identical(outs[0], outs[2])
    assert_identical(outs[1], outs[3])


def test_entmax_bisect_with_learned_alpha_equals_the_general_path(monkeypatch, calls):
    """Learned per-head alpha (--entmax-alpha-learned) in the plain training call and the
    inference call: its per-head alpha needs (bsz, heads, tgt, src) scores."""
    from fairseq_sparse_attn.attention.config import ActivationConfig

    plain = spy_on(monkeypatch, "plain")
    act = ActivationConfig(name="entmax_bisect", entmax_alpha_learned=True, entmax_alpha=1.3)
    fast, general = pair(act, "none", self_attention=True)
    with torch.no_grad():
        for m in (fast, general):
            m.activation.alpha_logit.copy_(torch.tensor([-2.0, -0.5, 0.5, 2.0]))  # distinct heads
    pad = torch.zeros(2, 4, dtype=torch.bool)
    pad[1, 3:] = True
    x = torch.randn(4, 2, E)
    results = []
    for m in (fast, general):
        m.train()
        out = m(x, x, x, key_padding_mask=pad, need_weights=False)[0]
        out.sum().backward()
        with torch.no_grad():
            o, w = m.eval()(x, x, x, key_padding_mask=pad)
        results.append([out, o, w, m.activation.alpha_logit.grad, m.q_proj.weight.grad])
    for a, b in zip(*results):
        assert_identical(a, b)
    assert plain.count(fast) == 2 and calls == [fast]


def test_backward_hooks_run_in_the_plain_calls(monkeypatch):
    """A full backward hook on the activation or a projection (here: halving the gradient it
    passes back) sees the plain training call as it sees the general path's."""
    plain = spy_on(monkeypatch, "plain")
    for part in ("activation", "k_proj"):
        fast, general = pair("relu", "gated_rmsnorm", self_attention=True)
        grads, fired = [], []
        for m in (fast, general, None):  # None: the module without the hook
            hooked = m is not None
            m = m or pair("relu", "gated_rmsnorm", self_attention=True)[1]
            if hooked:
                getattr(m, part).register_full_backward_hook(
                    lambda module, gin, gout, fired=fired: (
                        fired.append(1) or tuple(None if g is None else g * 0.5 for g in gin)
                    )
                )
            m.train()
            x = torch.randn(4, 2, E, generator=torch.Generator().manual_seed(2)).requires_grad_()
            m(x, x, x, need_weights=False)[0].sum().backward()
            grads.append([x.grad] + [p.grad for p in m.parameters()])
        for a, b in zip(grads[0], grads[1]):
            assert_identical(a, b)
        assert fired == [1, 1] and not torch.equal(grads[0][0], grads[2][0])  # the hook acted
    assert plain.count(fast) == 1  # the hooked projection is still called as a module, in plain


def test_masked_calls_under_inference_mode(calls):
    """torch.inference_mode (no version counters): a masked call computes its masks each time
    and gives the no_grad numbers."""
    fast, general = pair("relu", "gated_rmsnorm", self_attention=True)
    x = torch.randn(4, 2, E)
    pad = torch.zeros(2, 4, dtype=torch.bool)
    pad[1, 3:] = True
    with torch.no_grad():
        want = fast(x, x, x, key_padding_mask=pad)[0]
    for m in (fast, general):
        with torch.inference_mode():
            pad_i = pad.clone()
            out = m(x, x, x, key_padding_mask=pad_i)[0]
            assert_identical(out, want)
            pad_i[1, 3:] = False  # changed in place: seen (nothing was cached for it)
            assert_identical(m(x, x, x, key_padding_mask=pad_i)[0], m(x, x, x)[0])


def test_scaling_set_after_a_call_is_used():
    fast, _ = pair("relu", "gated_rmsnorm", self_attention=True)
    x = torch.randn(4, 2, E)
    with torch.no_grad():
        before = fast(x, x, x)[0]
        fast.scaling = fast.scaling * 2
        after = fast(x, x, x)[0]
        fresh, _ = pair("relu", "gated_rmsnorm", self_attention=True)
        fresh.scaling = fast.scaling
        assert not torch.equal(before, after)
        assert_identical(after, fresh(x, x, x)[0])


@pytest.mark.parametrize("act,norm", [("relu", "gated_rmsnorm"), ("sparsemax", "rmsnorm_i")])
def test_low_precision_modules_equal_the_general_path(act, norm, calls):
    """bfloat16 parameters and inputs: scores and weights in float32, the value mix in the
    values' dtype, as in the general path."""
    fast, general = pair(act, norm, self_attention=True)
    fast, general = fast.bfloat16(), general.bfloat16()
    xs = torch.randn(4, 2, E, dtype=torch.bfloat16)
    state_f, state_g = {}, {}
    with torch.no_grad():
        for t in range(4):
            x = xs[t : t + 1]
            of, wf = fast(x, x, x, incremental_state=state_f)
            og, wg = general(x, x, x, incremental_state=state_g)
            assert of.dtype == torch.bfloat16 and wf.dtype == torch.float32
            assert_identical(of, og)
            assert_identical(wf, wg)
    assert calls.count(fast) == 4


def test_self_attention_projects_the_query_whatever_key_is_passed(calls):
    fast, general = pair("relu", "gated_rmsnorm", self_attention=True)
    x, other = torch.randn(3, 2, E), torch.randn(3, 2, E)
    with torch.no_grad():
        assert_identical(fast(x, other, other)[0], general(x, other, other)[0])
        assert_identical(fast(x, other, other)[0], fast(x, x, x)[0])
    assert calls == [fast, fast, fast]


def test_calls_that_need_the_general_path_do_not_take_it(calls):
    fast, general = pair("relu", "gated_rmsnorm", self_attention=True)
    x = torch.randn(4, 2, E)
    bias = torch.zeros(4, 4)
    bias[:, 1] = 0.5  # an additive (not hiding) mask value
    fast(x, x, x)  # gradients recorded
    with torch.no_grad():
        fast(x, x, x, before_softmax=True)
        fast(x, x, x, attn_mask=bias)
        with collect("weights"):
            fast(x, x, x)
        fast.train()
        fast.dropout_module.p = 0.3
        fast(x, x, x)  # attention dropout applies
        fast.eval()
        fast.dropout_module.apply_during_inference = True  # --retain-dropout
        fast(x, x, x)
        fast.dropout_module.apply_during_inference = False
        fast.dropout_module.p = 0.0
    assert calls == []
    with torch.no_grad():
        out, _ = fast(x, x, x, attn_mask=bias)
        ref, _ = general(x, x, x, attn_mask=bias)
        assert_identical(out, ref)  # the bias was applied (by the general path)
        fast(x, x, x)
    assert calls == [fast]


@pytest.mark.parametrize(
    "kw,reason",
    [
        (dict(activation="softmax", output_norm="rmsnorm"), "softmax"),
        (dict(masked_heads=(1,)), "masked"),
        (dict(add_bias_kv=True), "bias_kv"),
        (dict(add_zero_attn=True), "zero attention"),
    ],
)
def test_modules_that_need_the_general_path_have_no_plan(kw, reason):
    from fairseq_sparse_attn.attention.call_plan import inline_reason

    config = dict(activation="relu", output_norm="gated_rmsnorm")
    config.update((k, kw.pop(k)) for k in list(kw) if k in ("activation", "output_norm", "masked_heads"))
    m = SparseMultiheadAttention(E, H, self_attention=True, config=attention_config(**config), **kw)
    assert reason in inline_reason(m)
    assert m._spec_and_stock()[2].inline is False


def test_forced_backend_and_key_blocks_have_no_plan():
    m = SparseMultiheadAttention(E, H, self_attention=True, config=attention_config("relu", "gated_rmsnorm"))
    assert m._spec_and_stock()[2].inline is True
    m.backend = "materialized"  # the inline calls run materialized's own ops
    assert m._spec_and_stock()[2].inline is True
    m.backend = "query_block"
    assert m._spec_and_stock()[2].inline is False
    m.backend = "auto"
    m.key_block_size = 4
    assert m._spec_and_stock()[2].inline is False
    m.key_block_size = 0
    assert m._spec_and_stock()[2].inline is True


def test_long_calls_go_to_the_backend_auto_chooses(monkeypatch, calls):
    """A call over at least --attn-flex-min-keys keys goes to attend(), which takes
    query_block on CPU, as in the general path; with weights asked for, the materialized
    operations run."""
    chosen = []
    real = call_plan_module.attend

    def spy(q, k, v, inputs, spec):
        out, inter = real(q, k, v, inputs, spec)
        chosen.append(inter.backend)
        return out, inter

    monkeypatch.setattr(call_plan_module, "attend", spy)
    fast, general = pair("relu_scaled", "gated_rmsnorm", encoder_decoder_attention=True)
    fast.flex_min_keys = general.flex_min_keys = 6
    x, enc = torch.randn(3, 2, E), torch.randn(8, 2, E)
    pad = torch.zeros(2, 8, dtype=torch.bool)
    pad[1, 6:] = True
    general.backend = "query_block"  # the general path on the backend auto should choose
    with torch.no_grad():
        out, w = fast(x, enc, enc, key_padding_mask=pad, need_weights=False)
        ref, _ = general(x, enc, enc, key_padding_mask=pad, need_weights=False)
        weighted, w = fast(x, enc, enc, key_padding_mask=pad, need_weights=True)
        general.backend = "materialized"
        assert_identical(weighted, general(x, enc, enc, key_padding_mask=pad)[0])
    # every call of the plan reaches attend() through call_plan: the inference call of the
    # long call (query_block), the general one forced to query_block, then the two weighted
    # calls (the inference call with weights runs the materialized operations inline)
    assert chosen == ["query_block", "query_block", "materialized"] and w is not None
    assert_identical(out, ref)
    assert calls == [fast, fast]


def test_projection_hooks_run_and_replaced_submodules_are_used(calls):
    fast, general = pair("relu", "gated_rmsnorm", self_attention=True)
    x = torch.randn(3, 2, E)
    seen = []
    handle = fast.v_proj.register_forward_hook(lambda mod, args, out: seen.append(out.shape))
    with torch.no_grad():
        fast(x, x, x)
    handle.remove()
    assert seen == [torch.Size([3, 2, E])] and calls == [fast]
    fast.out_proj = torch.nn.Linear(E, E)
    general.out_proj = fast.out_proj
    with torch.no_grad():
        assert_identical(fast(x, x, x)[0], general(x, x, x)[0])
    fast.output_norm = torch.nn.Identity()
    with torch.no_grad():
        out = fast(x, x, x, need_weights=False)[0]
        general.output_norm = torch.nn.Identity()
        assert_identical(out, general(x, x, x, need_weights=False)[0])


@pytest.mark.parametrize(
    "act,norm", [("relu", "gated_rmsnorm"), ("relu", "rmsnorm_i"), ("relu_scaled", "none"), ("entmax15", "none")]
)
def test_beam_search_of_a_whole_model_is_unchanged(act, norm, calls, monkeypatch):
    """fairseq's SequenceGenerator (beam 3, a padded batch): the same hypotheses, scores
    and attention as with every attention call on the general path."""
    from fairseq.sequence_generator import SequenceGenerator

    model, d = build_model(attn_activation=act, attn_output_norm=norm, seed=3)
    src, lengths, _ = random_batch(d, bsz=3, src_len=7)
    sample = {"net_input": {"src_tokens": src, "src_lengths": lengths}}

    def generate():
        gen = SequenceGenerator([model], d, beam_size=3, max_len_b=6, min_len=6)
        with torch.no_grad():
            return gen.generate([model], sample)

    fast = generate()
    assert calls, "the inference call was not taken"
    monkeypatch.setattr(call_plan_module, "inline_reason", lambda module: "the general path")
    for m in model.attention_modules():
        m.backend = "materialized"  # (its plan rebuilt)
    calls.clear()
    general = generate()
    assert calls == []
    for hyps_f, hyps_g in zip(fast, general):
        for hf, hg in zip(hyps_f, hyps_g):
            assert torch.equal(hf["tokens"], hg["tokens"])
            assert torch.equal(hf["positional_scores"], hg["positional_scores"])
            assert_identical(hf["attention"], hg["attention"])


# --- the plan's projections and cache against stock fairseq's own code -----------------------


def stock_and_plugin(**kw):
    """Stock fairseq ``MultiheadAttention`` and the plugin's module with the same parameters,
    softmax forced through the plugin's pipeline (``materialized``): every call of the
    plugin's module goes through ``CallPlan.project``."""
    from fairseq.modules import MultiheadAttention

    torch.manual_seed(0)
    stock = MultiheadAttention(E, H, **kw).eval()
    plugin = SparseMultiheadAttention(E, H, config=attention_config("softmax"), **kw).eval()
    plugin.load_state_dict(stock.state_dict())
    plugin.backend = "materialized"  # (a stock module with backend auto delegates to fairseq)
    return stock, plugin


@pytest.fixture
def projected(monkeypatch):
    """The calls projected by a call plan."""
    return spy_on(monkeypatch, "project")


def assert_cache_equals_stock(stock, plugin, state_s, state_p):
    cs, cp = stock._get_input_buffer(state_s), plugin._get_input_buffer(state_p)
    assert sorted(cs) == sorted(cp) == ["prev_key", "prev_key_padding_mask", "prev_value"]
    for name in cs:
        assert_identical(cp[name], cs[name])  # the projections themselves: bit for bit


# (stock fairseq's own incremental path fails an assertion with add_bias_kv: whole sequences only)
@pytest.mark.parametrize("extra", [{}, {"add_zero_attn": True}])
def test_incremental_self_attention_cache_equals_stock_fairseq(extra, projected):
    stock, plugin = stock_and_plugin(self_attention=True, **extra)
    xs = torch.randn(5, 4, E)
    state_s, state_p = {}, {}
    with torch.no_grad():
        for t in range(5):
            x = xs[t : t + 1]
            out_s, w_s = stock(x, x, x, incremental_state=state_s)
            out_p, w_p = plugin(x, x, x, incremental_state=state_p)
            torch.testing.assert_close(out_p, out_s, rtol=0, atol=1e-6)
            torch.testing.assert_close(w_p, w_s, rtol=0, atol=1e-6)
            assert_cache_equals_stock(stock, plugin, state_s, state_p)
            if t == 2:  # beam reordering (fairseq's own, on the plan's cache)
                order = torch.tensor([3, 3, 0, 1])
                stock.reorder_incremental_state(state_s, order)
                plugin.reorder_incremental_state(state_p, order)
    assert projected == [plugin] * 5


def test_incremental_self_attention_with_a_padding_mask_that_comes_and_goes_equals_stock(projected):
    """fairseq's decoder passes a step's key padding mask only when a pad is among the step's
    tokens: the cached mask is extended with the new step's (or a filler of False) in
    order, as stock fairseq's ``_append_prev_key_padding_mask`` does: outputs, weights and
    cache equal."""
    stock, plugin = stock_and_plugin(self_attention=True)
    xs = torch.randn(5, 3, E)
    pads = [None, [[False], [True], [False]], [[True], [False], [False]], None, [[False], [False], [True]]]
    state_s, state_p = {}, {}
    with torch.no_grad():
        for t in range(5):
            x, pad = xs[t : t + 1], (None if pads[t] is None else torch.tensor(pads[t]))
            out_s, w_s = stock(x, x, x, key_padding_mask=pad, incremental_state=state_s)
            out_p, w_p = plugin(x, x, x, key_padding_mask=pad, incremental_state=state_p)
            torch.testing.assert_close(out_p, out_s, rtol=0, atol=1e-6)
            torch.testing.assert_close(w_p, w_s, rtol=0, atol=1e-6)
            assert_cache_equals_stock(stock, plugin, state_s, state_p)
    assert plugin._get_input_buffer(state_p)["prev_key_padding_mask"].tolist() == [
        [False, False, True, False, False],
        [False, True, False, False, False],
        [False, False, False, False, True],
    ]
    assert projected == [plugin] * 5


def test_incremental_cross_attention_with_beams_cache_equals_stock_fairseq(projected):
    stock, plugin = stock_and_plugin(kdim=E, vdim=E, encoder_decoder_attention=True)
    for m in (stock, plugin):
        m.set_beam_size(3)
    enc = torch.randn(6, 2, E).repeat_interleave(3, dim=1)  # (src, bsz * beam, E)
    pad = torch.zeros(6, 6, dtype=torch.bool)
    pad[3:, :2] = True
    state_s, state_p = {}, {}
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(1, 6, E)
            out_s, _ = stock(x, enc, enc, key_padding_mask=pad, incremental_state=state_s, static_kv=True)
            out_p, _ = plugin(x, enc, enc, key_padding_mask=pad, incremental_state=state_p, static_kv=True)
            torch.testing.assert_close(out_p, out_s, rtol=0, atol=1e-6)
            assert_cache_equals_stock(stock, plugin, state_s, state_p)
            assert state_p[plugin._get_full_incremental_state_key("attn_state")]["prev_key"].size(0) == 2
            order = torch.tensor([2, 0, 1, 5, 5, 3])
            stock.reorder_incremental_state(state_s, order)
            plugin.reorder_incremental_state(state_p, order)
    assert projected == [plugin] * 3


@pytest.mark.parametrize("extra", [{}, {"add_bias_kv": True}, {"add_zero_attn": True}])
def test_whole_sequence_projections_equal_stock_fairseq(extra, projected):
    """Training-time calls (gradients on): outputs and gradients of stock fairseq."""
    stock, plugin = stock_and_plugin(self_attention=True, **extra)
    x = torch.randn(5, 3, E, requires_grad=True)
    pad = torch.zeros(3, 5, dtype=torch.bool)
    pad[1, 3:] = True
    out_s, _ = stock(x, x, x, key_padding_mask=pad)
    out_p, _ = plugin(x, x, x, key_padding_mask=pad)
    torch.testing.assert_close(out_p, out_s, rtol=0, atol=1e-6)
    (g_s,) = torch.autograd.grad(out_s.square().sum(), x)
    (g_p,) = torch.autograd.grad(out_p.square().sum(), x)
    torch.testing.assert_close(g_p, g_s, rtol=0, atol=1e-5)
    assert projected == [plugin]


def test_the_plan_follows_the_cache_key():
    """A new incremental-state id (fairseq's init_incremental_state) moves the plan's cache
    key with it: reordering and the plan read the same slot."""
    m = SparseMultiheadAttention(E, H, self_attention=True, config=attention_config("relu", "gated_rmsnorm"))
    before = m._spec_and_stock()[2].state_key
    m.init_incremental_state()
    after = m._spec_and_stock()[2].state_key
    assert after != before and after == m._get_full_incremental_state_key("attn_state")


def test_projection_and_cache_code_exists_once():
    """Issue 26.3: no projection or cache code twice.  In the attention package only
    call_plan.py applies the q/k/v projections or writes fairseq's cache entries."""
    import pathlib
    import re

    import fairseq_sparse_attn.attention as attention

    root = pathlib.Path(attention.__file__).parent
    patterns = [r"\b[qkv]_proj\(", r"_linear\(plan\.[qkv]_proj", r"\[\"prev_(key|value|key_padding_mask)\"\]\s*="]
    owners = {
        path.relative_to(root).as_posix()
        for path in root.rglob("*.py")
        for pat in patterns
        if re.search(pat, path.read_text())
    }
    assert owners == {"call_plan.py"}, owners


def test_key_blocks_answer_fairseq_s_default_weight_request_with_none():
    """fairseq asks every attention call for head-averaged weights (need_weights defaults to
    True); with --attn-key-block-size the call stays on the key blocks (never materializing
    the (tgt, src) weights it exists to avoid) and returns None, with the materialized
    path's output."""
    torch.manual_seed(0)
    blocks = SparseMultiheadAttention(E, H, self_attention=True, config=attention_config("relu_scaled", "none"))
    ref = SparseMultiheadAttention(E, H, self_attention=True, config=attention_config("relu_scaled", "none"))
    ref.load_state_dict(blocks.state_dict())
    blocks.key_block_size = 4
    x = torch.randn(9, 2, E, requires_grad=True)
    out, weights = blocks(x, x, x)
    want, want_weights = ref(x, x, x)
    assert weights is None and want_weights.shape == (2, 9, 9)
    torch.testing.assert_close(out, want, atol=1e-6, rtol=1e-6)
