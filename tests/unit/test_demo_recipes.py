"""scripts/demo.py without training: the recipes (cpu = the small recipe's exact commands,
cuda = issue 23's setup as fairseq's own parser reads it), where the shipped data is found,
the repetition rate and length ratio on hand-made sentences, and the terminal cleaning of
fairseq's tqdm output."""

import runpy
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
demo = runpy.run_path(str(REPO / "scripts" / "demo.py"))


def args_of(*argv, cuda=False):
    return demo["parse_args"](list(argv), cuda_available=cuda)


def test_recipe_choice():
    assert demo["choose_recipe"]("auto", cuda_available=True) == "cuda"
    assert demo["choose_recipe"]("auto", cuda_available=False) == "cpu"
    assert demo["choose_recipe"]("cpu", cuda_available=True) == "cpu"
    assert args_of(cuda=True).recipe == "cuda" and args_of(cuda=False).recipe == "cpu"
    assert args_of("--recipe", "cpu", cuda=True).recipe == "cpu"


def test_cpu_recipe_is_the_small_recipe_unchanged(tmp_path):
    """The commands the demo ran before the recipes existed (commit 0e20ef5), flag for flag."""
    args = args_of()
    assert args.seeds == [1] and args.lr == {"softmax": 1e-3, "rela_g": 1e-3, "rela_i": 1e-3}
    save = tmp_path / "checkpoints_softmax"
    cmd = [str(c) for c in demo["train_command"]("softmax", args.lr["softmax"], args, "BIN", save, 1)]
    assert cmd == [
        sys.executable,
        "-m",
        "fairseq_cli.train",
        "BIN",
        "--user-dir",
        str(REPO / "fairseq_sparse_attn"),
        "--arch",
        "softmax_transformer_wmt_en_de",
        "--encoder-layers",
        "3",
        "--decoder-layers",
        "3",
        "--encoder-embed-dim",
        "256",
        "--decoder-embed-dim",
        "256",
        "--encoder-ffn-embed-dim",
        "1024",
        "--decoder-ffn-embed-dim",
        "1024",
        "--encoder-attention-heads",
        "4",
        "--decoder-attention-heads",
        "4",
        "--share-all-embeddings",
        "--dropout",
        "0.1",
        "--attention-dropout",
        "0.0",
        "--optimizer",
        "adam",
        "--adam-betas",
        "(0.9,0.98)",
        "--lr",
        "0.001",
        "--lr-scheduler",
        "inverse_sqrt",
        "--warmup-updates",
        "100",
        "--criterion",
        "label_smoothed_cross_entropy",
        "--label-smoothing",
        "0.1",
        "--max-tokens",
        "2048",
        "--max-update",
        "250",
        "--save-dir",
        str(save),
        "--no-epoch-checkpoints",
        "--num-workers",
        "0",
        "--seed",
        "1",
        "--log-format",
        "simple",
        "--log-interval",
        "1",
        "--validate-interval-updates",
        "50",
    ]
    rela = [str(c) for c in demo["train_command"]("rela_g", 1e-3, args, "BIN", save, 1)]
    assert [c for c in rela if c != "rela_transformer_wmt_en_de"] == [
        c for c in cmd if c != "softmax_transformer_wmt_en_de"
    ]
    gen = [str(c) for c in demo["generate_command"]("CKPT", args, "BIN", "test")]
    assert gen[3:] == [
        "BIN",
        "--user-dir",
        str(REPO / "fairseq_sparse_attn"),
        "--path",
        "CKPT",
        "--gen-subset",
        "test",
        "--beam",
        "4",
        "--batch-size",
        "64",
        "--max-len-a",
        "1.2",
        "--max-len-b",
        "10",
        "--remove-bpe",
        "--tokenizer",
        "moses",
        "--source-lang",
        "de",
        "--target-lang",
        "en",
    ]


def parsed(cmd):
    """fairseq-train's own reading of a command line."""
    from fairseq import options

    import fairseq_sparse_attn.plugin  # noqa: F401

    parser = options.get_training_parser()
    return options.parse_args_and_arch(parser, input_args=[str(c) for c in cmd[3:]])


def test_cuda_recipe_is_issue_23s_setup(tmp_path):
    args = args_of(cuda=True)
    assert args.seeds == [1, 2] and args.lenpen == 0.6 and args.beam == 4
    assert args.jobs == 4 and args_of().jobs == 1  # cuda: the 4 runs side by side; cpu: one at a time
    assert args_of("--jobs", "2", cuda=True).jobs == 2 and "jobs" not in demo["changed_settings"](args)
    for name, arch in (("softmax", "softmax_transformer_iwslt_de_en"), ("rela_g", "rela_transformer_iwslt_de_en")):
        a = parsed(demo["train_command"](name, args.lr[name], args, "BIN", tmp_path / "c", 2))
        assert a.arch == arch
        assert (a.encoder_layers, a.decoder_layers, a.encoder_embed_dim, a.encoder_attention_heads) == (6, 6, 512, 4)
        assert (a.max_tokens, a.max_update, a.lr, a.warmup_updates, a.dropout) == (4096, 1500, [7e-4], 800, 0.3)
        assert a.lr_scheduler == "inverse_sqrt" and a.seed == 2 and not a.fp16
        # the explicit size flags are the architecture's own defaults (fairseq's transformer_iwslt_de_en)
        bare = parsed(
            [
                None,
                None,
                None,
                "BIN",
                "--user-dir",
                str(REPO / "fairseq_sparse_attn"),
                "--arch",
                "transformer_iwslt_de_en",
            ]
        )
        for field in (
            "encoder_layers",
            "decoder_layers",
            "encoder_embed_dim",
            "decoder_embed_dim",
            "encoder_ffn_embed_dim",
            "decoder_ffn_embed_dim",
            "encoder_attention_heads",
            "decoder_attention_heads",
        ):
            assert getattr(a, field) == getattr(bare, field), field
    assert "--lenpen" in (gen := [str(c) for c in demo["generate_command"]("C", args, "BIN", "test")])
    assert gen[gen.index("--lenpen") + 1] == "0.6" and gen[gen.index("--beam") + 1] == "4"


def test_hypothesis_flags_reach_fairseq(tmp_path):
    args = args_of(
        "--update-freq",
        "6",
        "--attn-init",
        "rela_official",
        "--attention-dropout",
        "0.1",
        "--activation-dropout",
        "0.1",
        "--heads",
        "8",
        "--warmup",
        "800",
        "--max-update",
        "2000",
        "--no-repeat-ngram-size",
        "3",
        "--lenpen",
        "0.6",
    )
    a = parsed(demo["train_command"]("rela_g", 7e-4, args, "BIN", tmp_path / "c", 1))
    assert a.update_freq == [6] and a.attn_init == "rela_official" and a.encoder_attention_heads == 8
    assert (a.attention_dropout, a.activation_dropout, a.warmup_updates, a.max_update) == (0.1, 0.1, 800, 2000)
    gen = [str(c) for c in demo["generate_command"]("C", args, "BIN", "test")]
    assert gen[gen.index("--no-repeat-ngram-size") + 1] == "3" and gen[gen.index("--lenpen") + 1] == "0.6"
    assert demo["changed_settings"](args)["heads"] == (4, 8)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--seeds", "1,1"], "--seeds"),
        (["--heads", "3"], "multiple of --heads"),
        (["--validate-interval", "999"], "--validate-interval"),
        (["--models", "softmax"], "at least two"),
        (["--update-freq", "0"], "--update-freq"),
        (["--jobs", "0"], "--jobs"),
    ],
)
def test_bad_flags_name_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit):
        args_of(*argv)
    assert message in capsys.readouterr().err


def test_shipped_data_is_found_as_the_makefile_finds_it(tmp_path):
    repo = tmp_path / "checkout"
    repo.mkdir()
    assert demo["shipped_multi30k"](repo, {}) is None  # nothing shipped: data_prep downloads
    shared = tmp_path / "shared" / "data" / "multi30k"
    shared.mkdir(parents=True)
    assert demo["shipped_multi30k"](repo, {}) == shared
    assert demo["shipped_multi30k"](repo, {"MULTI30K_DIR": ""}) == shared  # `make` exports it empty when absent
    assert demo["shipped_multi30k"](repo, {"MULTI30K_DIR": "/elsewhere"}) == Path("/elsewhere")


def test_repetition_rate_and_length_ratio():
    repeats = demo["repeats"]
    assert repeats("a dog runs runs".split()) and repeats("the dog the dog runs".split())
    assert not repeats("a man in a hat in a hat".split())  # a repeated trigram, no repeat at once
    assert not repeats("a b a c".split()) and not repeats([])
    # 13a tokens: "hat." is "hat ." and "!!" is "! !", a repeated token
    assert demo["bleu_tokens"]("A hat.") == ["A", "hat", "."]
    assert demo["repetition_rate"](["a a", "b c", "b c b c", "Wow!!"]) == 3 / 4
    assert demo["length_ratio"](["a b c", "d"], ["a b", "c, d"]) == 4 / 5


def test_terminal_text_keeps_what_the_screen_shows():
    raw = "\r 10%|#   | 1/10\r 20%|##  | 2/10\r\nINFO valid | loss 7.1\r\n\x1b[A\x1b[2K\r done\r\n\r\n"
    assert demo["clean_terminal_text"](raw) == " 20%|##  | 2/10\nINFO valid | loss 7.1\n done\n"
