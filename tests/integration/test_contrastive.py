"""Contrastive evaluation: readers for every format, the batched scorer against a
one-sentence-at-a-time incremental computation, decisions and aggregation on hand-made
scores, and the command line on a checkpoint saved here."""

import gzip
import json

import pytest
import torch

from fairseq_sparse_attn.analysis import contrastive as C

from helpers import build_model, model_size_flags


def write(path, text):
    if str(path).endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def write_json(path, obj):
    return write(path, json.dumps(obj, ensure_ascii=False, indent=1))


# --------------------------------------------------------------------------- plain reader


def test_plain_reader_gz_and_group_file(tmp_path):
    src = write(tmp_path / "src.en.gz", "The dog runs .\nThe dogs run .\n")
    good = write(tmp_path / "tgt.correct.de.gz", "Der Hund läuft .\nDie Hunde laufen .\n")
    bad = write(tmp_path / "tgt.incorrect.de.gz", "Der Hund laufen .\nDie Hunde läuft .\n")
    groups = write(tmp_path / "distance.txt", "1\n\n")
    items = C.read_plain(src, good, bad, group_path=groups)
    assert [i.item_id for i in items] == ["1", "2"]
    assert items[1].source == "The dogs run ."
    assert items[1].correct == "Die Hunde laufen ."
    assert items[1].contrastives == ["Die Hunde läuft ."]
    assert [i.groups for i in items] == [["1"], [None]]  # empty label = no group
    assert C.read_plain(src, good, bad)[0].groups == [None]


def test_plain_reader_reads_the_shared_subject_verb_set():
    from conftest import require_shared_data, shared_data_dir

    d = shared_data_dir() / "contrastive" / "subj_verb_agreement"
    require_shared_data(d / "src.en.gz", "contrastive data")
    items = C.read_plain(d / "src.en.gz", d / "tgt.correct.de.gz", d / "tgt.incorrect.de.gz")
    assert len(items) == 6701
    assert all(i.correct != i.contrastives[0] for i in items)


def test_plain_reader_line_count_mismatch_names_both_files(tmp_path):
    src = write(tmp_path / "src.en", "a\nb\nc\n")
    good = write(tmp_path / "good.de", "a\nb\nc\n")
    bad = write(tmp_path / "bad.de", "a\nb\n")
    with pytest.raises(ValueError, match=r"bad\.de has 2 lines but .*src\.en has 3"):
        C.read_plain(src, good, bad)
    groups = write(tmp_path / "groups.txt", "x\n")
    with pytest.raises(ValueError, match=r"groups\.txt has 1 lines but .*src\.en has 3"):
        C.read_plain(src, good, good, group_path=groups)


# --------------------------------------------------------------------------- JSON readers

LINGEVAL = [
    {
        "source": "The house is old .",
        "reference": "Das Haus ist alt .",
        "origin": "newstest2009.1",
        "errors": [
            {"type": "np_agreement", "contrastive": "Der Haus ist alt .", "distance": 1, "frequency": 20},
            {"type": "polarity_particle_nicht_ins", "contrastive": "Das Haus ist nicht alt ."},
            {"type": "subj_verb_agreement", "contrastive": "Das Haus sind alt .", "distance": 2},
        ],
    },
    {
        "source": "They sleep .",
        "reference": "Sie schlafen .",
        "origin": "newstest2009.2",
        "errors": [{"type": "subj_adequacy", "contrastive": "Sie schläft .", "distance": 1}],
    },
]

WSD = [
    {
        "source": "Die Bank ist geschlossen .",
        "reference": "The bank is closed .",
        "ambig word": "Bank",
        "sense": "bank",
        "original translation": "bank",
        "origin": "ted",
        "frequency of sense/ambig word in wmt16": "30/40",
        "errors": [{"contrastive": "The bench is closed .", "type": "word_sense", "replacement": "bench"}],
    },
    {
        "source": "Er sitzt auf der Bank .",
        "reference": "He sits on the bench .",
        "ambig word": "Bank",
        "sense": "bench",
        "original translation": "bench",
        "origin": "tatoeba",
        "errors": [
            {"contrastive": "He sits on the bank .", "type": "word_sense", "replacement": "bank"},
            {"contrastive": "He sits on the bank branch .", "type": "word_sense", "replacement": "bank branch"},
        ],
    },
]


def test_lingeval97_reader_groups_by_type_and_by_distance(tmp_path):
    path = write_json(tmp_path / "lingeval97.json", LINGEVAL)
    items = C.read_json_suite(path, "lingeval97")
    assert [i.item_id for i in items] == ["0", "1"]
    assert items[0].source == "The house is old ."
    assert items[0].correct == "Das Haus ist alt ."
    assert items[0].contrastives == ["Der Haus ist alt .", "Das Haus ist nicht alt .", "Das Haus sind alt ."]
    assert items[0].groups == ["np_agreement", "polarity_particle_nicht_ins", "subj_verb_agreement"]
    by_distance = C.read_json_suite(path, "lingeval97", group_by="distance")
    assert [i.groups for i in by_distance] == [["1", None, "2"], ["1"]]
    by_origin = C.read_json_suite(path, "lingeval97", group_by="origin")  # an item-level field
    assert by_origin[1].groups == ["newstest2009.2"]


def test_lingeval97_error_types_keep_one_kind_for_fig3(tmp_path):
    """Raganato et al.'s Fig. 3 is subject-verb agreement by distance: ``--group-by
    distance`` alone also bins the other types' errors that carry a distance (np_agreement
    at distance 1 here), so ``error_types`` keeps only the named types' errors, and the
    items that have one (LingEval97's evaluate.py --categories)."""
    path = write_json(tmp_path / "lingeval97.json", LINGEVAL)
    items = C.read_json_suite(path, "lingeval97", group_by="distance", error_types=["subj_verb_agreement"])
    assert [(i.item_id, i.contrastives, i.groups) for i in items] == [("0", ["Das Haus sind alt ."], ["2"])]
    two = C.read_json_suite(path, "lingeval97", error_types=["subj_adequacy", "np_agreement"])
    assert [(i.item_id, i.groups) for i in two] == [("0", ["np_agreement"]), ("1", ["subj_adequacy"])]
    with pytest.raises(
        ValueError, match=r"no error has the type 'subj_verb_agrement'.*the suite's types: np_agreement, "
    ):
        C.read_json_suite(path, "lingeval97", error_types=["subj_verb_agrement"])
    wsd = write_json(tmp_path / "wsd.json", WSD)
    with pytest.raises(ValueError, match="--error-types is for --format lingeval97"):
        C.read_json_suite(wsd, "mucow", error_types=["word_sense"])
    with pytest.raises(ValueError, match="--error-types is for --format lingeval97"):
        C.read_items("plain", ["a", "b", "c"], error_types=["x"])


def test_group_by_a_field_nobody_has_is_an_error(tmp_path):
    path = write_json(tmp_path / "lingeval97.json", LINGEVAL)
    with pytest.raises(ValueError, match=r"lingeval97\.json: no item or error has the field 'distanse'"):
        C.read_json_suite(path, "lingeval97", group_by="distanse")


@pytest.mark.parametrize("fmt,name", [("contrawsd", "de-en.final.json"), ("mucow", "de-en.mucow.scoring.json.gz")])
def test_wsd_readers_group_by_ambiguous_word_and_sense(tmp_path, fmt, name):
    path = write_json(tmp_path / name, WSD)
    items = C.read_json_suite(path, fmt)
    assert items[1].contrastives == ["He sits on the bank .", "He sits on the bank branch ."]
    assert [i.groups for i in items] == [["Bank:bank"], ["Bank:bench", "Bank:bench"]]
    assert [i.groups for i in C.read_json_suite(path, fmt, group_by="origin")] == [["ted"], ["tatoeba"] * 2]


def test_malformed_json_names_file_and_line(tmp_path):
    path = write(tmp_path / "broken.json", '[\n  {"source": "a",\n   "reference": "b" "errors": []}\n]\n')
    with pytest.raises(ValueError, match=r"broken\.json, line 3, column \d+: malformed JSON"):
        C.read_json_suite(path, "lingeval97")


@pytest.mark.parametrize(
    "fmt,entry,message",
    [
        ("lingeval97", {"source": "a", "errors": []}, r"item 1: missing field 'reference'"),
        (
            "lingeval97",
            {"source": "a", "reference": "b", "errors": [{"type": "x", "contrastive": "c"}, {"type": "x"}]},
            r"item 1, errors\[1\]: missing field 'contrastive'",
        ),
        (
            "lingeval97",
            {"source": "a", "reference": "b", "errors": [{"contrastive": "c"}]},
            r"item 1, errors\[0\]: missing field 'type'",
        ),
        (
            "lingeval97",
            {"source": "a", "reference": "b", "errors": "c"},
            r"item 1: field 'errors' should be a list, found str",
        ),
        (
            "contrawsd",
            {"source": "a", "reference": "b", "ambig word": "Bank", "errors": [{"contrastive": "c"}]},
            r"item 1, errors\[0\]: missing field 'sense'",
        ),
        ("mucow", ["not", "an", "object"], r"item 1: expected a JSON object, found list"),
    ],
)
def test_missing_fields_name_file_item_and_field(tmp_path, fmt, entry, message):
    good = LINGEVAL[0] if fmt == "lingeval97" else WSD[0]
    path = write_json(tmp_path / "suite.json", [good, entry])
    with pytest.raises(ValueError, match=r"suite\.json, " + message):
        C.read_json_suite(path, fmt)


def test_json_top_level_must_be_a_list(tmp_path):
    path = write_json(tmp_path / "suite.json", {"source": "a"})
    with pytest.raises(ValueError, match=r"suite\.json: expected a JSON list of items, found dict"):
        C.read_json_suite(path, "mucow")


# --------------------------------------------------------------------------- scoring


def incremental_score(model, dictionary, source: str, target: str) -> float:
    """Independent computation: one sentence, one decoding step at a time, each step's
    next-token distribution from a fresh forward pass on the prefix (no padding, no
    batching, no teacher-forcing shift), log_softmax of the output logits, summed over
    the target tokens and the final EOS."""
    src = dictionary.encode_line(source, add_if_not_exist=False).long()
    tgt = dictionary.encode_line(target, add_if_not_exist=False).long()
    total = 0.0
    with torch.no_grad():
        for t in range(len(tgt)):
            prefix = torch.cat([torch.tensor([dictionary.eos()]), tgt[:t]])
            logits, _ = model(src[None], torch.tensor([len(src)]), prefix[None])
            total += torch.log_softmax(logits[0, -1].double(), dim=-1)[tgt[t]].item()
    return total


@pytest.fixture(scope="module")
def tiny():
    model, dictionary = build_model(arch="softmax_transformer_wmt_en_de")
    return model, dictionary


ITEMS = [
    C.ContrastiveItem("1", "w1 w2 w3 w4 w5", "w6 w7 w8", ["w6 w8 w7", "w9"], ["a", "b"]),
    C.ContrastiveItem("2", "w4", "w10 w11 w12 w13 w14 w15", ["w10 w11 w12 w13 w14 w16"], ["a"]),
    C.ContrastiveItem("3", "w5 w5 w5", "w3 unknownword w4", ["w3 w4"], [None]),
    C.ContrastiveItem("4", "w7 w1 w2 w8 w9 w10 w11 w12", "w2", ["w3", "w2 w2"], ["b", "b"]),
]


def test_batched_scores_match_incremental_computation(tiny):
    model, d = tiny
    scores = C.score_items(model, ITEMS, d, d, batch_size=4)
    for item, (good, bads) in zip(ITEMS, scores):
        expected = [incremental_score(model, d, item.source, t) for t in [item.correct] + item.contrastives]
        assert [good] + bads == pytest.approx(expected, abs=1e-5)
    assert all(s < 0 for good, bads in scores for s in [good] + bads)


def test_eos_is_scored(tiny):
    model, d = tiny
    ((good, _),) = C.score_items(model, [C.ContrastiveItem("1", "w1 w2", "w3", ["w4"], [None])], d, d)
    src = d.encode_line("w1 w2", add_if_not_exist=False).long()
    with torch.no_grad():
        logits, _ = model(src[None], torch.tensor([len(src)]), torch.tensor([[d.eos(), d.index("w3")]]))
    lp = torch.log_softmax(logits[0].double(), dim=-1)
    assert good == pytest.approx(lp[0, d.index("w3")].item() + lp[1, d.eos()].item(), abs=1e-6)


def flat(scores):
    return [s for good, bads in scores for s in [good] + bads]


def test_batching_and_order_do_not_change_scores(tiny):
    model, d = tiny
    reference = flat(C.score_items(model, ITEMS, d, d, batch_size=1))
    for kwargs in [dict(batch_size=3), dict(batch_size=None, max_tokens=20), dict(batch_size=100)]:
        assert flat(C.score_items(model, ITEMS, d, d, **kwargs)) == pytest.approx(reference, abs=1e-5)
    reversed_scores = C.score_items(model, ITEMS[::-1], d, d, batch_size=2)
    assert flat(reversed_scores[::-1]) == pytest.approx(reference, abs=1e-5)


def test_scoring_leaves_no_gradient_and_uses_eval_mode(tiny):
    model, d = tiny
    model.train()
    first = C.score_items(model, ITEMS[:1], d, d)
    assert not model.training
    assert all(p.grad is None for p in model.parameters())
    assert C.score_items(model, ITEMS[:1], d, d) == first


def test_encoder_is_applied_before_lookup(tiny):
    model, d = tiny
    raw = [C.ContrastiveItem("1", "W1 W2", "W3", ["W4"], [None])]
    lower = [C.ContrastiveItem("1", "w1 w2", "w3", ["w4"], [None])]
    assert C.score_items(model, raw, d, d, encode_source=str.lower) == C.score_items(model, lower, d, d)


def test_too_long_sentence_is_a_clear_error(tiny):
    model, d = tiny
    limit = model.max_positions()[1]
    item = C.ContrastiveItem("7", "w1", "w2", [" ".join(["w3"] * limit)], [None])
    with pytest.raises(ValueError, match=rf"item 7: contrastive target 1 has {limit + 1} tokens .* at most {limit}"):
        C.score_items(model, [item], d, d)


def test_make_batches_respects_limits_and_covers_everything():
    lengths = [3, 9, 1, 4, 4, 7, 2, 12]
    for batch_size, max_tokens in [(2, None), (None, 16), (3, 20), (None, 5)]:
        batches = C.make_batches(lengths, batch_size, max_tokens)
        assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
        for b in batches:
            if batch_size:
                assert len(b) <= batch_size
            if max_tokens and len(b) > 1:
                assert len(b) * max(lengths[i] for i in b) <= max_tokens


# --------------------------------------------------------------------------- decisions and report


def hand_items():
    return [
        C.ContrastiveItem("1", "s", "c", ["x", "y"], ["2", "10"]),
        C.ContrastiveItem("2", "s", "c", ["x"], ["2"]),
        C.ContrastiveItem("3", "s", "c", ["x", "y"], [None, "10"]),
    ]


HAND_SCORES = [(-1.0, [-2.0, -0.5]), (-3.0, [-3.0]), (-1.0, [-1.5, -4.0])]


def test_decisions_per_variant_ties_are_wrong():
    decisions = C.decide(hand_items(), HAND_SCORES, "variant")
    assert [(d.item_id, d.group, d.correct) for d in decisions] == [
        ("1", "2", True),
        ("1", "10", False),
        ("2", "2", False),
        ("3", None, True),
        ("3", "10", True),
    ]
    report = C.summarize(decisions)
    assert report["overall"] == {"correct": 3, "total": 5, "accuracy": 0.6}
    assert list(report["by_group"]) == ["2", "10"]  # numeric order
    assert report["by_group"]["2"] == {"correct": 1, "total": 2, "accuracy": 0.5}
    assert report["by_group"]["10"] == {"correct": 1, "total": 2, "accuracy": 0.5}


def test_decisions_per_item_need_every_variant_beaten():
    items = [
        C.ContrastiveItem(str(i), "s", "c", ["x"] * len(b), ["g"] * len(b)) for i, (_, b) in enumerate(HAND_SCORES)
    ]
    decisions = C.decide(items, HAND_SCORES, "item")
    assert [(d.correct, d.score_incorrect) for d in decisions] == [(False, -0.5), (False, -3.0), (True, -1.5)]
    assert C.summarize(decisions)["by_group"]["g"] == {"correct": 1, "total": 3, "accuracy": 1 / 3}
    with pytest.raises(ValueError, match=r"item 1: its contrastive variants are in different groups"):
        C.decide(hand_items(), HAND_SCORES, "item")


def test_the_average_of_named_groups_weighs_each_group_the_same():
    """--average-groups (Raganato et al.'s MuCoW figure, the average of the TED and Tatoeba
    results): the mean of the groups' accuracies, not the accuracy over their union."""
    decisions = [C.Decision(str(i), "ted", -1.0, -2.0) for i in range(3)] + [C.Decision("3", "tatoeba", -2.0, -1.0)]
    decisions.append(C.Decision("4", "other", -2.0, -1.0))
    report = C.summarize(decisions, ["ted", "tatoeba"])
    assert report["average"] == {"groups": ["ted", "tatoeba"], "accuracy": 0.5}  # (1 + 0) / 2, not 3 / 4
    assert report["overall"]["accuracy"] == 0.6 and "average" not in C.summarize(decisions)
    assert "average(ted,tatoeba)\t-\t0.5000" in C.format_report(report)
    with pytest.raises(ValueError, match="no decision in the group"):
        C.summarize(decisions, ["ted", "news"])
    items = [C.ContrastiveItem("0", "s", "c", ["x"], ["ted"]), C.ContrastiveItem("1", "s", "c", ["x"], [None])]
    C.check_average_groups(items, ["ted"])
    with pytest.raises(ValueError, match=r"--average-groups: no item is in the group\(s\) TED; the groups are: ted"):
        C.check_average_groups(items, ["TED"])


def test_report_files(tmp_path):
    decisions = C.decide(hand_items(), HAND_SCORES, "variant")
    report = C.summarize(decisions)
    C.write_json(report, tmp_path / "report.json")
    assert json.loads((tmp_path / "report.json").read_text()) == json.loads(json.dumps(report))
    C.write_decisions_tsv(decisions, tmp_path / "decisions.tsv")
    rows = [line.split("\t") for line in (tmp_path / "decisions.tsv").read_text().splitlines()]
    assert rows[0] == ["item_id", "group", "score_correct", "score_incorrect", "correct"]
    assert rows[2] == ["1", "10", "-1.000000", "-0.500000", "0"]
    assert rows[4] == ["3", "", "-1.000000", "-1.500000", "1"]
    assert C.summarize([])["overall"] == {"correct": 0, "total": 0, "accuracy": None}


def test_encoder_matches_data_preparation_tokenizer_and_bpe(tmp_path):
    """build_encoder = sacremoses as in data_prep (no escaping, no dash splits) + subword-nmt."""
    from sacremoses import MosesTokenizer
    from subword_nmt.apply_bpe import BPE

    codes = write(tmp_path / "codes", "#version: 0.2\nh u\nhu n\ne n</w>\nl ä\nlä u\n")
    sentences = ['„Der Hund läuft“, sagte er & "lachte" - un-glaublich.', "Die Hunde laufen (schnell)."]
    tok = MosesTokenizer(lang="de")
    with open(codes, encoding="utf-8") as f:
        bpe = BPE(f)
    encode = C.build_encoder("moses", str(codes), "de")
    for text in sentences:
        expected = bpe.process_line(tok.tokenize(text, aggressive_dash_splits=False, escape=False, return_str=True))
        assert encode(text) == expected
    assert encode("hund hunde") == "hun@@ d hun@@ d@@ e"  # BPE really applied
    assert C.build_encoder("none", None, "de")(sentences[0]) == sentences[0]
    with pytest.raises(FileNotFoundError, match="BPE codes file not found: .*missing.codes"):
        C.build_encoder("none", str(tmp_path / "missing.codes"), "de")


# --------------------------------------------------------------------------- command line


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A data-bin with two dictionaries and a checkpoint of an untrained tiny plugin model,
    saved in the layout fairseq-train writes (cfg + model), so that fairseq's own loader
    reads it back."""
    from fairseq import checkpoint_utils, options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    import fairseq_sparse_attn.plugin  # noqa: F401

    root = tmp_path_factory.mktemp("contrastive_cli")
    data_bin = root / "data-bin"
    data_bin.mkdir()
    for lang, words in [
        ("en", ["the", "dog", "dogs", "runs", "run", "."]),
        # and the target words of the WSD suite, whose variants would otherwise be the same
        # <unk> ids (refused: a tie counts as the model's error)
        ("de", ["der", "die", "hund", "hunde", "läuft", "laufen", ".", "The", "He", "bank", "bench", "branch"]),
    ]:
        (data_bin / f"dict.{lang}.txt").write_text("".join(f"{w} {100 - i}\n" for i, w in enumerate(words)))
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        [
            str(data_bin),
            "--task",
            "translation",
            "-s",
            "en",
            "-t",
            "de",
            "--arch",
            "softmax_transformer_wmt_en_de",
            *model_size_flags(layers=1, dim=16, ffn=32, heads=2),
            "--optimizer",
            "adam",
            "--lr",
            "1e-3",
            "--max-tokens",
            "100",
        ],
    )
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    torch.manual_seed(0)
    model = task.build_model(cfg.model)
    path = root / "checkpoint.pt"
    checkpoint_utils.torch_persistent_save(
        {
            "cfg": cfg,
            "model": model.state_dict(),
            "last_optimizer_state": None,
            "optimizer_history": [
                {
                    "criterion_name": "CrossEntropyCriterion",
                    "optimizer_name": "Adam",
                    "lr_scheduler_state": {"best": None},
                    "num_updates": 0,
                }
            ],
            "extra_state": {"train_iterator": {"epoch": 1, "iterations_in_epoch": 0}},
        },
        str(path),
    )
    return path, data_bin, model.eval(), task


def test_cli_end_to_end_matches_in_process_evaluation(tmp_path, checkpoint):
    path, data_bin, model, task = checkpoint
    # raw text: Moses splits the final period off, as in the pre-tokenized items below
    src = write(tmp_path / "src.en", "the dog runs.\nthe dogs run.\nthe dog runs.\n")
    good = write(tmp_path / "good.de.gz", "der hund läuft.\ndie hunde laufen.\nder hund läuft.\n")
    bad = write(tmp_path / "bad.de", "der hund laufen.\ndie hunde läuft.\ndie hund läuft.\n")
    groups = write(tmp_path / "groups", "1\n1\n2\n")
    report = C.cli_main(
        [
            str(data_bin),
            str(src),
            str(good),
            str(bad),
            "--path",
            str(path),
            "--group-file",
            str(groups),
            "--tokenizer",
            "moses",
            "--cpu",
            "--batch-size",
            "2",
            "--output-json",
            str(tmp_path / "r.json"),
            "--output-tsv",
            str(tmp_path / "d.tsv"),
            "--no-progress",
        ]
    )
    items = [
        C.ContrastiveItem("1", "the dog runs .", "der hund läuft .", ["der hund laufen ."], ["1"]),
        C.ContrastiveItem("2", "the dogs run .", "die hunde laufen .", ["die hunde läuft ."], ["1"]),
        C.ContrastiveItem("3", "the dog runs .", "der hund läuft .", ["die hund läuft ."], ["2"]),
    ]
    expected, decisions = C.evaluate(model, items, task.source_dictionary, task.target_dictionary)
    assert report["overall"] == expected["overall"]
    assert report["by_group"] == expected["by_group"]
    assert json.loads((tmp_path / "r.json").read_text())["by_group"] == expected["by_group"]
    rows = [line.split("\t") for line in (tmp_path / "d.tsv").read_text().splitlines()[1:]]
    assert [float(r[2]) for r in rows] == pytest.approx([d.score_correct for d in decisions], abs=1e-5)
    assert [float(r[3]) for r in rows] == pytest.approx([d.score_incorrect for d in decisions], abs=1e-5)
    assert report["decision"] == "variant"


def test_cli_json_format_and_max_items(tmp_path, checkpoint):
    path, data_bin, _, _ = checkpoint
    suite = write_json(tmp_path / "wsd.json", WSD)
    report = C.cli_main(
        [
            str(data_bin),
            str(suite),
            "--format",
            "mucow",
            "--path",
            str(path),
            "--max-items",
            "1",
            "--no-progress",
            "--cpu",
        ]
    )
    assert report["decision"] == "item"
    assert report["overall"]["total"] == 1
    assert list(report["by_group"]) == ["Bank:bank"]
    # by corpus, with the average of the two (Raganato et al.'s MuCoW figure)
    args = [str(data_bin), str(suite), "--format", "mucow", "--path", str(path), "--no-progress", "--cpu"]
    report = C.cli_main(args + ["--group-by", "origin", "--average-groups", "ted,tatoeba"])
    by_corpus = report["by_group"]
    assert report["average"]["groups"] == ["ted", "tatoeba"]
    assert report["average"]["accuracy"] == (by_corpus["ted"]["accuracy"] + by_corpus["tatoeba"]["accuracy"]) / 2


def test_cli_average_of_a_group_no_item_has_is_refused_before_the_model_is_read(tmp_path, capsys):
    suite = write_json(tmp_path / "wsd.json", WSD)
    argv = [str(tmp_path), str(suite), "--format", "mucow", "--path", str(tmp_path / "no-such.pt"), "--group-by"]
    with pytest.raises(SystemExit):
        C.cli_main(argv + ["origin", "--average-groups", "TED,tatoeba"])
    assert "--average-groups: no item is in the group(s) TED; the groups are: tatoeba, ted" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        C.cli_main(argv + ["origin", "--average-groups", " , "])
    assert "--average-groups: give group names separated by commas" in capsys.readouterr().err


def test_cli_error_types_refused_before_the_model_is_read(tmp_path, capsys):
    suite = write_json(tmp_path / "lingeval97.json", LINGEVAL)
    argv = [str(tmp_path), str(suite), "--format", "lingeval97", "--path", str(tmp_path / "no-such.pt")]
    with pytest.raises(SystemExit):
        C.cli_main(argv + ["--group-by", "distance", "--error-types", "subj_verb_agrement"])
    assert "no error has the type 'subj_verb_agrement' given to --error-types" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        C.cli_main(argv + ["--error-types", " , "])
    assert "--error-types: give error types separated by commas" in capsys.readouterr().err


def test_cli_bad_arguments(tmp_path, checkpoint, capsys):
    path, data_bin, _, _ = checkpoint
    src = write(tmp_path / "src.en", "a\n")
    with pytest.raises(SystemExit):
        C.cli_main([str(data_bin), str(src), str(src), "--path", str(path)])
    assert "--format plain needs 3 input files" in capsys.readouterr().err
    short = write(tmp_path / "short.de", "")
    with pytest.raises(SystemExit):
        C.cli_main([str(data_bin), str(src), str(src), str(short), "--path", str(path)])
    assert "short.de has 0 lines" in capsys.readouterr().err
    other = write(tmp_path / "other.de", "b\n")
    with pytest.raises(SystemExit):
        C.cli_main([str(data_bin), str(src), str(src), str(other), "--path", str(path), "--model-overrides", "[1]"])
    assert "--model-overrides must be a Python dict literal, got '[1]'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        C.cli_main([str(data_bin), str(src), str(src), str(other), "--path", str(tmp_path / "nope.pt")])
    assert "checkpoint not found: " in capsys.readouterr().err


def test_cli_model_overrides_reach_the_model(tmp_path, checkpoint, capsys):
    path, data_bin, _, _ = checkpoint
    src = write(tmp_path / "src.en", "the dog runs .\n")
    good = write(tmp_path / "good.de", "der hund läuft .\n")
    bad = write(tmp_path / "bad.de", "der hund laufen .\n")
    args = [str(data_bin), str(src), str(good), str(bad), "--path", str(path), "--no-progress", "--cpu"]
    assert C.cli_main(args)["overall"]["total"] == 1
    capsys.readouterr()
    with pytest.raises(SystemExit):
        C.cli_main(args + ["--model-overrides", "{'max_target_positions': 4}"])
    assert (
        f"{src} / {good} / {bad}, line 1: the correct target has 5 tokens (with EOS) but the model accepts at most 4"
        in (capsys.readouterr().err)
    )


def test_cli_json_has_provenance_and_the_file_is_announced(tmp_path, checkpoint, capsys):
    from fairseq_sparse_attn.provenance import check_provenance

    path, data_bin, _, _ = checkpoint
    src = write(tmp_path / "src.en", "the dog runs .\n")
    good = write(tmp_path / "good.de", "der hund läuft .\n")
    bad = write(tmp_path / "bad.de", "der hund laufen .\n")
    out = tmp_path / "r.json"
    report = C.cli_main(
        [
            str(data_bin),
            str(src),
            str(good),
            str(bad),
            "--path",
            str(path),
            "--no-progress",
            "--cpu",
            "--output-json",
            str(out),
        ]
    )
    written = json.loads(out.read_text())
    record = check_provenance(written)
    assert "--output-json" in record["command"] and record["sacrebleu_signature"] is None
    assert {k: v for k, v in written.items() if k != "provenance"} == json.loads(json.dumps(report))
    assert f"wrote {out}" in capsys.readouterr().out


def test_cli_refuses_what_it_cannot_score_before_the_model_loads(tmp_path, checkpoint, capsys):
    """An empty suite (accuracy null), a contrastive line equal to the correct one (a tie,
    counted as the model's error) and an output that cannot be written are one line naming
    the file, before the checkpoint is read (a missing one here)."""
    _, data_bin, _, _ = checkpoint
    nope = ["--path", str(tmp_path / "nope.pt")]
    empty = write(tmp_path / "empty.json", "[]")
    no_errors = write(tmp_path / "no_errors.json", json.dumps([{"source": "a", "reference": "b", "errors": []}]))
    for suite in (empty, no_errors):
        with pytest.raises(SystemExit):
            C.cli_main([str(data_bin), str(suite), "--format", "lingeval97", *nope])
        assert f"{suite}: no contrastive pair to score" in capsys.readouterr().err
    src = write(tmp_path / "src.en", "the dog runs .\nthe dogs run .\n")
    good = write(tmp_path / "good.de", "der hund läuft .\ndie hunde laufen .\n")
    bad = write(tmp_path / "bad.de", "der hund laufen .\ndie hunde laufen .\n")
    with pytest.raises(SystemExit):
        C.cli_main([str(data_bin), str(src), str(good), str(bad), *nope])
    assert f"{bad} line 2: the contrastive translation equals the correct one" in capsys.readouterr().err
    suite = write(
        tmp_path / "tie.json",
        json.dumps(
            [
                {
                    "source": "a",
                    "reference": "b",
                    "errors": [{"contrastive": "c", "type": "t"}, {"contrastive": "b", "type": "t"}],
                }
            ]
        ),
    )
    with pytest.raises(SystemExit):
        C.cli_main([str(data_bin), str(suite), "--format", "lingeval97", *nope])
    assert f"{suite}, item 0, contrastive 2: the contrastive translation equals" in capsys.readouterr().err
    bad = write(tmp_path / "bad.de", "der hund laufen .\ndie hunde läuft .\n")
    for flags in (["--output-tsv", str(tmp_path)], ["--output-json", str(good / "x.json")]):
        with pytest.raises(SystemExit):
            C.cli_main([str(data_bin), str(src), str(good), str(bad), *nope, *flags])
        err = capsys.readouterr().err
        assert "is a directory, not a file" in err or "is a file, not a directory" in err
        assert "checkpoint not found" not in err


def test_the_command_exits_0_and_writes_both_outputs(tmp_path, checkpoint, capsys):
    """The console script is ``main``: ``sys.exit`` of cli_main's report was status 1 after
    every run, with the report's repr on stderr."""
    from pathlib import Path

    path, data_bin, _, _ = checkpoint
    repo = Path(__file__).resolve().parents[2]
    assert '"fsa-contrastive = fairseq_sparse_attn.analysis.contrastive:main"' in (repo / "setup.py").read_text()
    src = write(tmp_path / "src.en", "the dog runs .\n")
    good = write(tmp_path / "good.de", "der hund läuft .\n")
    bad = write(tmp_path / "bad.de", "der hund laufen .\n")
    out = tmp_path / "out"
    args = [str(data_bin), str(src), str(good), str(bad), "--path", str(path), "--no-progress", "--cpu"]
    assert C.main(args + ["--output-json", str(out / "r.json"), "--output-tsv", str(out / "d.tsv")]) is None
    assert sorted(p.name for p in out.iterdir()) == ["d.tsv", "r.json"]
    assert (out / "d.tsv").read_text().splitlines()[0] == "item_id\tgroup\tscore_correct\tscore_incorrect\tcorrect"


def test_cli_checks_its_files_before_the_model_loads(tmp_path, checkpoint, capsys):
    """A directory as an input, missing --bpe-codes and an output that names an input: one
    line before the model loads (the checkpoint path does not exist: a load would say so);
    a sentence longer than the model's positions: one line naming the files and the line
    (before: IsADirectoryError and FileNotFoundError tracebacks, the input overwritten, and
    'item 1: ...' naming no file)."""
    path, data_bin, _, _ = checkpoint
    src = write(tmp_path / "src.en", "the dog runs .\nthe dogs run .\n")
    good = write(tmp_path / "good.de", "der hund läuft .\ndie hunde laufen .\n")
    bad = write(tmp_path / "bad.de", "der hund laufen .\ndie hunde läuft .\n")
    missing = str(tmp_path / "no-such.pt")
    base = [str(data_bin), str(src), str(good), "--path", missing, "--cpu", "--no-progress"]
    for argv, said in (
        (base[:3] + [str(tmp_path)] + base[3:], f"error: {tmp_path}: Is a directory"),
        (base[:3] + [str(bad)] + base[3:] + ["--bpe-codes", str(tmp_path / "codes")], "--bpe-codes "),
        (base[:3] + [str(bad)] + base[3:] + ["--output-json", str(bad)], f"--output-json {bad} is an input"),
    ):
        with pytest.raises(SystemExit):
            C.cli_main(argv)
        err = capsys.readouterr().err
        assert said in err and "no-such.pt" not in err, err
    assert bad.read_text() == "der hund laufen .\ndie hunde läuft .\n"
    long_good = write(tmp_path / "long.de", "der hund läuft .\n" + "der " * 1100 + "\n")
    long_bad = write(tmp_path / "longi.de", "die hund läuft .\n" + "die " * 1100 + "\n")
    with pytest.raises(SystemExit):
        C.cli_main(
            [str(data_bin), str(src), str(long_good), str(long_bad), "--path", str(path), "--cpu", "--no-progress"]
        )
    err = capsys.readouterr().err
    assert f"{src} / {long_good} / {long_bad}, line 2: the correct target has 1101 tokens" in err, err


def test_pairs_that_encode_to_the_same_ids_are_refused_before_scoring(tmp_path, checkpoint, capsys):
    """Variants that differ only in words the dictionary lacks (a BPE model run without
    --bpe-codes, another vocabulary) became the same <unk> ids, tied, and counted as the
    model's errors with nothing said (0/20 on a real suite)."""
    path, data_bin, _, _ = checkpoint
    src, good, bad = tmp_path / "src.en", tmp_path / "good.de", tmp_path / "bad.de"
    src.write_text("the dog runs .\nthe dogs run .\n")
    good.write_text("der hund läuft .\ndie hunde giraffe .\n")
    bad.write_text("der hund laufen .\ndie hunde zebra .\n")  # line 2: two words the dictionary lacks
    argv = [str(data_bin), str(src), str(good), str(bad), "--path", str(path), "--no-progress", "--cpu"]
    with pytest.raises(SystemExit):
        C.cli_main(argv)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "line 2: contrastive target 1 has the same token ids as the correct one" in err[0]
    assert "(so have 1 of the pairs)" in err[0]
    good.write_text("der hund läuft .\ndie hunde laufen .\n")
    bad.write_text("der hund laufen .\ndie hunde läuft .\n")
    assert C.cli_main(argv)["overall"]["total"] == 2
