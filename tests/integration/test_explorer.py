"""``fsa-analyze explore`` on the fixture checkpoints: the data embedded in the HTML file
against the weights recorded directly (``record_attention`` on a one-sentence forward of
the model loaded by fairseq's ``checkpoint_utils``) and ‖f^h(x_j)‖ recomputed from the
recorded value vectors and ``out_proj`` (Kobayashi et al. Eq. 9); the page itself in
headless Chromium (cells per kind, tokens, the α/norm and subword/word toggles, against
the same independent computation) with a screenshot; ``bertviz_inputs`` shapes and values.

Chromium: Debian's ``chromium`` (scripts/ci/install_chromium.sh installs it where
missing); the browser tests are skipped, with the reason, only when it cannot be found
after that."""

import html
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch

from fairseq_sparse_attn.analysis import cli
from fairseq_sparse_attn.analysis.explorer import WEIGHT_SCALE, bertviz_inputs, decode_weights
from fairseq_sparse_attn.analysis.explorer_html import embedded_data

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "checkpoints"
DATA = FIXTURES / "data-bin"
SOURCE = (FIXTURES / "raw" / "test.en").read_text(encoding="utf-8").splitlines()
TARGET = (FIXTURES / "raw" / "test.de").read_text(encoding="utf-8").splitlines()
KINDS = ("encoder_self", "decoder_self", "cross")
# α is stored in 1/1000 (a non-zero weight below 0.0005 as 0.001), ‖f‖ to 4 digits
ALPHA_TOL = 1.0 / WEIGHT_SCALE + 1e-9
NORM_RTOL = 1e-3


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def explore(name, out, *extra):
    return cli.main(
        [
            "explore",
            "--path",
            str(FIXTURES / f"{name}.pt"),
            "--data",
            str(DATA),
            "-s",
            "en",
            "-t",
            "de",
            "--out",
            str(out),
            "--no-progress",
            *map(str, extra),
        ]
    )


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    d = tmp_path_factory.mktemp("explore")
    out = {}
    for name in ("rela_g", "fixed_8f", "rel_pos_values"):
        assert explore(name, d / f"{name}.html", "--n", "4") == 0
        out[name] = d / f"{name}.html"
    return out


def load_model(name):
    from fairseq import checkpoint_utils

    import fairseq_sparse_attn.plugin  # noqa: F401  (registers the plugin)

    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(FIXTURES / f"{name}.pt")], arg_overrides={"data": str(DATA)}
    )
    return models[0].eval(), task


def recorded(name, index):
    """{(kind, layer): (weights (heads, q, k), ‖f‖ (heads, k) or None)} of one pair, from
    one unpadded forward; plus the model."""
    from fairseq_sparse_attn.analysis.recording import record_attention

    model, task = load_model(name)
    src = task.source_dictionary.encode_line(SOURCE[index], add_if_not_exist=False).long()
    tgt = task.target_dictionary.encode_line(TARGET[index], add_if_not_exist=False).long()
    prev = torch.cat([tgt[-1:], tgt[:-1]])
    modules = dict(model.named_modules())
    with torch.no_grad(), record_attention(model) as taps:
        model(src.unsqueeze(0), torch.tensor([src.numel()]), prev.unsqueeze(0))
    out = {}
    for tap in taps:
        m = modules[tap.site.name]
        heads, d = m.num_heads, m.head_dim
        f = []
        for h in range(heads):  # f^h(x_j) = v^h_j W^{O,h}, W^{O,h} = out_proj.weight[:, h*d:(h+1)*d]
            block = m.out_proj.weight.detach()[:, h * d : (h + 1) * d]
            f.append((tap.values[h].double() @ block.double().t()).norm(dim=-1))
        out[(tap.site.kind, tap.site.layer)] = (tap.weights[0].double(), torch.stack(f))
    return out, model


def page_data(path):
    return embedded_data(Path(path).read_text(encoding="utf-8"))


# ----------------------------------------------------------------- embedded data


def test_embedded_data_matches_a_direct_recording(pages):
    data = page_data(pages["rela_g"])
    assert data["command"] == "explore" and data["numbering"] == "0-based"
    assert data["title"] == "rela_transformer_iwslt_de_en, run checkpoints/rela_g.pt"
    assert data["provenance"]["command"].startswith("fsa-analyze explore")
    assert len(data["sentences"]) == 4
    assert [s["index"] for s in data["sentences"]] == [0, 1, 2, 3]
    s = data["sentences"][1]  # a man rides a bi@@ cy@@ cle
    assert s["source"]["tokens"] == SOURCE[1].split() + ["</s>"]
    assert s["source"]["words"] == ["a", "man", "rides", "a", "bicycle", "</s>"]
    assert s["source"]["word_of"] == [0, 1, 2, 3, 4, 4, 4, 5]
    assert s["decoder_input"]["tokens"] == ["</s>"] + TARGET[1].split()
    assert s["decoder_input"]["word_of"] == list(range(len(TARGET[1].split()) + 1))
    direct, model = recorded("rela_g", 1)
    for kind in KINDS:
        info = data["kinds"][kind]
        assert (info["layers"], info["heads"]) == (2, 4)
        assert info["norms"] and not info["norms_exact"] and "pre-norm" in info["norms_note"]
        assert len(s["attention"][kind]) == 2
        for entry in s["attention"][kind]:
            w, f = direct[(kind, entry["layer"])]
            got = decode_weights(entry["weights"])
            assert got.shape == w.shape
            assert (got - w).abs().max() <= ALPHA_TOL
            assert torch.equal(got == 0, w == 0)  # a stored 0 is an exact zero
            torch.testing.assert_close(torch.tensor(entry["f_norm"], dtype=torch.float64), f, rtol=NORM_RTOL, atol=1e-6)
            visible = torch.ones_like(w[0], dtype=torch.bool)
            if kind == "decoder_self":
                visible = visible.tril()
            for h in range(w.shape[0]):
                zero = (w[h] == 0) & visible
                null = [i for i in range(w.shape[1]) if bool(zero[i][visible[i]].all())]
                assert entry["null_rows"][h] == null
                assert entry["sparsity"][h] == pytest.approx(float(zero.sum()) / float(visible.sum()), abs=1e-4)
    # ReLA's weights have exact zeros and null rows: the page has something to highlight
    assert any(sum(e["sparsity"]) > 0 for e in s["attention"]["cross"])


def test_fixed_heads_are_named_and_undefined_norms_said(pages):
    data = page_data(pages["fixed_8f"])
    model, _ = load_model("fixed_8f")
    want = {}
    for name, m in model.named_modules():
        patterns = getattr(m, "fixed_patterns", ())
        if patterns:
            layer = int(re.search(r"layers\.(\d+)\.", name).group(1))
            want[str(layer)] = {str(h): p for h, p in enumerate(patterns)}
    assert want and data["kinds"]["encoder_self"]["fixed"] == want
    assert data["kinds"]["encoder_self"]["heads"] == 8
    assert data["kinds"]["cross"]["fixed"] == {}
    rel = page_data(pages["rel_pos_values"])
    assert rel["kinds"]["encoder_self"]["norms"] is False
    assert "value term" in rel["kinds"]["encoder_self"]["norms_note"]
    assert all(e["f_norm"] is None for e in rel["sentences"][0]["attention"]["encoder_self"])
    assert rel["kinds"]["cross"]["norms"] and rel["kinds"]["cross"]["norms_exact"]


@pytest.mark.parametrize("name", ["dea", "lpea_rhe"])
def test_syntax_models_are_analysed_with_the_parses_of_their_task(name, tmp_path, capsys):
    """DEA / LPEA / RHE checkpoints (--task parse_annotated_translation): every fsa-analyze
    subcommand that runs a model stopped at the first forward, asking for src_dep.  The
    page's encoder weights against a forward of the same sentence batched by the task's own
    dataset (its side files, its collater); DEA's weights are 0 where the parse relates no
    tokens.  Raw text, which has no parses, is refused in one line before any forward."""
    from fairseq_sparse_attn.analysis.recording import record_attention

    out = tmp_path / f"{name}.html"
    assert explore(name, out) == 0
    data = page_data(out)
    model, task = load_model(name)
    task.load_dataset("test")
    dataset = task.dataset("test")
    assert type(dataset).__name__ == "ParseAnnotatedDataset"
    modules = dict(model.named_modules())
    masked = 0
    for s in data["sentences"]:
        sample = dataset.collater([dataset[s["index"]]])
        with torch.no_grad(), record_attention(model) as taps:
            model(**sample["net_input"])
        direct = {(t.site.kind, t.site.layer): (t, t.weights[0].double()) for t in taps}
        for entry in s["attention"]["encoder_self"]:
            tap, w = direct[("encoder_self", entry["layer"])]
            got = decode_weights(entry["weights"])
            assert got.shape == w.shape and (got - w).abs().max() <= ALPHA_TOL
            biases = getattr(modules[tap.site.name], "biases", {})
            if name == "dea" and "dea" in biases:
                dep = sample["net_input"]["src_dep"][0]
                masked += int((~dep).sum())
                assert bool((w[:, ~dep] == 0).all())  # every head of the layer here: DEA
    assert name != "dea" or masked > 0
    raw = FIXTURES / "raw"
    argv = ["stats", str(DATA), "--path", str(FIXTURES / f"{name}.pt"), "--output-dir", str(tmp_path / "raw")]
    argv += ["--raw-source", str(raw / "test.en"), "--raw-target", str(raw / "test.de"), "--no-progress"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "its attention needs the source's syntax (src_dep" in err[0]
    assert not (tmp_path / "raw").exists()


def test_page_needs_no_network(pages):
    text = pages["rela_g"].read_text(encoding="utf-8")
    assert re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text) is None
    assert "<link" not in text and "@import" not in text and "fetch(" not in text
    assert text.count("<script") == 2  # the data and the inline code


def test_bad_input_gives_one_line(tmp_path, capsys):
    args = [
        "explore",
        "--path",
        str(FIXTURES / "rela_g.pt"),
        "-s",
        "en",
        "-t",
        "de",
        "--out",
        str(tmp_path / "x.html"),
        "--no-progress",
    ]
    assert cli.main(args) == 2
    assert "explore: error: the data-bin directory is missing" in capsys.readouterr().err
    assert cli.main([*args, "--data", str(DATA), str(tmp_path)]) == 2
    assert "differ" in capsys.readouterr().err
    assert cli.main([*args[:-3], "--out", str(tmp_path), "--data", str(DATA)]) == 2
    assert "is a directory" in capsys.readouterr().err
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    nope = ["--path", str(tmp_path / "nope.pt")]  # checked before the model is read
    assert cli.main(["explore", *nope, "--out", str(blocker / "x.html"), "--data", str(DATA)]) == 2
    assert f"--out {blocker}/x.html: {blocker} is a file, not a directory" in capsys.readouterr().err
    assert not (tmp_path / "x.html").exists()
    with pytest.raises(SystemExit):
        cli.get_parser().parse_args([*args, "--data", str(DATA), "--n", "0"])


def test_an_out_that_names_an_input_is_refused_before_any_work(tmp_path, capsys):
    """--out model.pt wrote the HTML over the checkpoint, --out DATA/dict.en.txt over the
    dictionary, and exited 0."""
    model = tmp_path / "model.pt"
    shutil.copy(FIXTURES / "rela_g.pt", model)
    data = tmp_path / "data-bin"
    shutil.copytree(DATA, data)
    base = ["explore", "--path", str(model), "--data", str(data), "-s", "en", "-t", "de", "--no-progress"]
    for out, what in ((model, "the checkpoint"), (data / "dict.en.txt", f"a file of the data directory {data}")):
        before = out.read_bytes()
        assert cli.main([*base, "--out", str(out)]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and f"--out {out} is {what}" in err[0]
        assert out.read_bytes() == before


# ----------------------------------------------------------------------- bertviz


def test_bertviz_inputs_shapes_and_values():
    direct, model = recorded("rela_g", 1)
    _, task = load_model("rela_g")
    got = bertviz_inputs(model, task.source_dictionary, task.target_dictionary, SOURCE[1], TARGET[1])
    src, tgt = len(SOURCE[1].split()) + 1, len(TARGET[1].split()) + 1
    assert got["encoder_tokens"] == SOURCE[1].split() + ["</s>"]
    assert got["decoder_tokens"] == ["</s>"] + TARGET[1].split()
    shapes = {"encoder_attention": (src, src), "decoder_attention": (tgt, tgt), "cross_attention": (tgt, src)}
    kinds = {"encoder_attention": "encoder_self", "decoder_attention": "decoder_self", "cross_attention": "cross"}
    for name, (q, k) in shapes.items():
        assert isinstance(got[name], tuple) and len(got[name]) == 2
        for layer, t in enumerate(got[name]):
            assert tuple(t.shape) == (1, 4, q, k)
            torch.testing.assert_close(t[0].double(), direct[(kinds[name], layer)][0])
    ids = task.source_dictionary.encode_line(SOURCE[1], add_if_not_exist=False)
    again = bertviz_inputs(
        model,
        task.source_dictionary,
        task.target_dictionary,
        ids,
        task.target_dictionary.encode_line(TARGET[1], add_if_not_exist=False),
    )
    torch.testing.assert_close(again["cross_attention"][1], got["cross_attention"][1])


# ----------------------------------------------------------------------- browser


def chromium_binary():
    found = shutil.which("chromium") or (os.path.exists("/usr/bin/chromium") and "/usr/bin/chromium")
    if not found and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["bash", str(REPO / "scripts" / "ci" / "install_chromium.sh")], capture_output=True, timeout=900)
        found = shutil.which("chromium") or (os.path.exists("/usr/bin/chromium") and "/usr/bin/chromium")
    if not found:
        pytest.skip(
            "chromium not found after scripts/ci/install_chromium.sh (Debian package "
            "'chromium', installed by CI); the browser test needs it"
        )
    return found


def chromium(binary, *args):
    profile = tempfile.mkdtemp(prefix="fsa-chromium-")
    try:
        proc = subprocess.run(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--virtual-time-budget=10000",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    return proc


def selftest(binary, page):
    proc = chromium(binary, "--dump-dom", page.as_uri() + "#selftest")
    m = re.search(r'<pre id="selftest-result">(.*?)</pre>', proc.stdout, re.S)
    assert m, f"no self-check result in the page (chromium rc {proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(html.unescape(m.group(1)))


def merged(matrix, query_words, key_words):
    """Word view by hand: mean over the query pieces of a word, sum over its key pieces."""
    nq, nk = max(query_words) + 1, max(key_words) + 1
    out = torch.zeros(nq, nk, dtype=torch.float64)
    count = torch.zeros(nq, dtype=torch.float64)
    for i, t in enumerate(query_words):
        count[t] += 1
        for j, u in enumerate(key_words):
            out[t, u] += matrix[i, j]
    return out / count.unsqueeze(1)


def shown(big):
    return torch.tensor([[float("nan") if v is None else v for v in row] for row in big["values"]], dtype=torch.float64)


def test_page_in_headless_chromium(pages, tmp_path):
    binary = chromium_binary()
    page = pages["rela_g"]
    result = selftest(binary, page)
    data = page_data(page)
    # one cell per layer x head of each kind
    assert result["cells"] == result["expected_cells"] == {k: 2 * 4 for k in KINDS}
    # the toggle changes what is displayed, and back
    assert result["alpha_sums"] == result["alpha_sums_again"]
    assert result["norm_sums"] != result["alpha_sums"]
    s = data["sentences"][0]
    assert "the dog runs home" in result["pair_text"] and TARGET[0] in result["pair_text"]
    # the sentence picker lists every pair and shows the one picked
    assert result["picker_options"] == len(data["sentences"]) == 4
    last = data["sentences"][-1]
    assert " ".join(last["source"]["words"][:-1]) in result["picked_pair_text"]
    assert " ".join(last["decoder_input"]["words"][1:]) in result["picked_pair_text"]
    assert result["picked_sums"] != result["alpha_sums"]
    direct, _ = recorded("rela_g", 0)
    for kind in KINDS:
        o = result["opened"][kind]
        assert o["modal_visible"] and o["layer"] == 1 and o["head"] == 3
        assert "layer 1, head 3" in o["heading"]
        q_side = s["source"] if kind == "encoder_self" else s["decoder_input"]
        k_side = s["decoder_input"] if kind == "decoder_self" else s["source"]
        assert o["alpha_subword"]["keys"] == k_side["tokens"]
        assert o["alpha_subword"]["queries"] == q_side["tokens"]
        assert o["alpha_word"]["keys"] == k_side["words"]
        assert o["alpha_word"]["queries"] == q_side["words"]
        w, f = direct[(kind, 1)]
        alpha, norm = w[3], w[3].abs() * f[3].unsqueeze(0)
        hidden = torch.zeros_like(alpha, dtype=torch.bool)
        if kind == "decoder_self":
            hidden = ~torch.ones_like(hidden).tril()
            alpha, norm = alpha.masked_fill(hidden, 0), norm.masked_fill(hidden, 0)
        tol = dict(rtol=2e-3, atol=2e-3 * max(1.0, float(f[3].max())))
        got = shown(o["alpha_subword"])
        assert torch.equal(got.isnan(), hidden)  # hidden keys show no value
        torch.testing.assert_close(got.nan_to_num(0.0), alpha, rtol=0, atol=ALPHA_TOL)
        torch.testing.assert_close(shown(o["norm_subword"]).nan_to_num(0.0), norm, **tol)
        qw, kw = q_side["word_of"], k_side["word_of"]
        torch.testing.assert_close(
            shown(o["alpha_word"]).nan_to_num(0.0),
            merged(alpha, qw, kw),
            rtol=0,
            atol=ALPHA_TOL * len(k_side["tokens"]),
        )
        torch.testing.assert_close(shown(o["norm_word"]).nan_to_num(0.0), merged(norm, qw, kw), **tol)
    # the screenshot: a PNG of the page with a head opened
    shot = tmp_path / "explorer.png"
    proc = chromium(
        binary, "--window-size=1400,1000", f"--screenshot={shot}", page.as_uri() + "#open=cross/1/3&view=word"
    )
    assert shot.exists(), proc.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10000
    keep = os.environ.get("FSA_TEST_ARTIFACTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / "explorer.png")


def test_fixed_heads_labelled_in_the_page(pages):
    binary = chromium_binary()
    result = selftest(binary, pages["fixed_8f"])
    data = page_data(pages["fixed_8f"])
    want = sorted(
        ["encoder_self", int(layer), int(h), f"fixed: {name}"]
        for layer, heads in data["kinds"]["encoder_self"]["fixed"].items()
        for h, name in heads.items()
    )
    assert sorted(result["fixed_labels"]) == want
    assert result["cells"]["encoder_self"] == 2 * 8


def test_bertviz_inputs_through_the_hub_interface():
    """docs/analysis.md's notebook example, on a fixture checkpoint."""
    from fairseq.models.transformer import TransformerModel

    import fairseq_sparse_attn

    hub = TransformerModel.from_pretrained(
        str(FIXTURES), "rela_g.pt", data_name_or_path=str(DATA), user_dir=fairseq_sparse_attn.user_dir()
    )
    inputs = bertviz_inputs(hub.models[0], hub.src_dict, hub.tgt_dict, SOURCE[1], TARGET[1])
    direct, _ = recorded("rela_g", 1)
    tgt, src = len(TARGET[1].split()) + 1, len(SOURCE[1].split()) + 1
    assert [tuple(t.shape) for t in inputs["cross_attention"]] == [(1, 4, tgt, src)] * 2
    for layer, t in enumerate(inputs["cross_attention"]):
        torch.testing.assert_close(t[0].double(), direct[("cross", layer)][0])
