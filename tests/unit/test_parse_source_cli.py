"""data_prep/parse_source.py without spaCy's models: its flags checked before any work,
your own CoNLL-U and PTB files held to the input line by line (counts, extra or missing
sentences, case, bracket escapes), nothing half-written (a failed or interrupted run
leaves an earlier output as it was and no temporary file), and its spaCy/benepar path
with a stand-in pipeline (which parser is asked for, the tags in derived trees, parses
that do not match the input)."""

import sys
from pathlib import Path

import pytest

from fairseq_sparse_attn.syntax.parsing import ParsedSentence

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "data_prep"))

import parse_source  # noqa: E402

TOKENS = "Bush held talks .\ndo n't go\nHello\n"
PTB = (
    "(S (NP (NNP Bush)) (VP (VBD held) (NP (NNS talks))) (. .))\n"
    "(S (VP (VBP do) (RB n't) (VP (VB go))))\n"
    "(INTJ (UH Hello))\n"
)
SENTENCES = [
    "1\tBush\t_\t_\t_\t_\t2\tnsubj\t_\t_\n2\theld\t_\t_\t_\t_\t0\troot\t_\t_\n"
    "3\ttalks\t_\t_\t_\t_\t2\tobj\t_\t_\n4\t.\t_\t_\t_\t_\t2\tpunct\t_\t_\n",
    "1\tdo\t_\t_\t_\t_\t3\taux\t_\t_\n2\tn't\t_\t_\t_\t_\t3\tadvmod\t_\t_\n3\tgo\t_\t_\t_\t_\t0\troot\t_\t_\n",
    "1\tHello\t_\t_\t_\t_\t0\troot\t_\t_\n",
]


def conllu(sentences):
    return "\n".join(sentences)


@pytest.fixture
def cli():
    """The script's module (its helpers replaced through monkeypatch, which puts them back)."""
    return parse_source


@pytest.fixture
def files(tmp_path):
    (tmp_path / "tok.en").write_text(TOKENS)
    (tmp_path / "p.ptb").write_text(PTB)
    (tmp_path / "d.conllu").write_text(conllu(SENTENCES))
    return tmp_path


def run_on(cli, files, *argv):
    """parse_source.py's exit status on ``files/tok.en`` with ``argv`` (paths as they are)."""
    return cli.main(["--input", str(files / "tok.en"), *map(str, argv), "--no-progress"])


def leftovers(folder):
    return sorted(p.name for p in Path(folder).rglob("*") if ".tmp-" in p.name)


def error_of(capsys):
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    return err.splitlines()[-1]


def test_line_count_with_and_without_a_final_newline(cli, tmp_path):
    for text, lines in (("a\nb\n", 2), ("a\nb", 2), ("", 0), ("\n", 1), ("a", 1)):
        (tmp_path / "f").write_text(text)
        assert cli.count_lines(tmp_path / "f") == lines, text


def test_too_few_parses_name_both_counts(cli, files, capsys):
    (files / "tok.en").write_text(TOKENS.rstrip("\n"))  # no final newline: still 3 lines
    (files / "short.ptb").write_text(PTB.splitlines()[0] + "\n")
    rc = run_on(cli, files, "--ptb", files / "short.ptb", "--tree-out", files / "x.tree")
    assert rc == 1
    assert error_of(capsys).endswith(
        "short.ptb has 1 trees but " + str(files / "tok.en") + " has 3 lines (ran out at line 2)"
    )
    (files / "two.conllu").write_text(conllu(SENTENCES[:2]))
    rc = run_on(cli, files, "--conllu", files / "two.conllu", "--dep-out", files / "x.dep")
    assert rc == 1
    assert error_of(capsys).endswith(
        "two.conllu has 2 sentences but " + str(files / "tok.en") + " has 3 lines (ran out at line 3)"
    )
    assert not (files / "x.tree").exists() and not (files / "x.dep").exists() and leftovers(files) == []


@pytest.mark.parametrize("flag", ["--ptb", "--conllu"])
def test_more_parses_than_lines_is_an_error(cli, files, flag, capsys):
    if flag == "--ptb":
        (files / "long").write_text(PTB + "(X (X extra))\n")
        out = ["--tree-out", str(files / "x.out")]
    else:
        (files / "long").write_text(conllu(SENTENCES + ["1\textra\t_\t_\t_\t_\t0\troot\t_\t_\n"]))
        out = ["--dep-out", str(files / "x.out")]
    assert run_on(cli, files, flag, files / "long", *out) == 1
    what = "trees" if flag == "--ptb" else "sentences"
    assert error_of(capsys).endswith(f"long has more {what} than {files / 'tok.en'} has lines (3)")
    assert not (files / "x.out").exists() and leftovers(files) == []


def test_a_failed_run_keeps_the_earlier_output(cli, files, capsys):
    (files / "x.tree").write_text("the earlier trees\n")
    (files / "bad.ptb").write_text(PTB.replace("(NNS talks)", "(NNS talk)"))
    rc = run_on(cli, files, "--ptb", files / "bad.ptb", "--tree-out", files / "x.tree")
    assert rc == 1 and "does not match" in error_of(capsys)
    assert (files / "x.tree").read_text() == "the earlier trees\n" and leftovers(files) == []


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s.replace("4\t.\t_\t_\t_\t_\t2\tpunct\t_\t_\n", ""), "missing word '.' at position 4"),
        (lambda s: s.replace("Bush", "bush"), "token 1: parse has 'bush', sentence has 'Bush'"),
    ],
    ids=["a word short", "case"],
)
def test_a_parse_must_have_the_sentence_s_words_exactly(cli, files, edit, message, capsys):
    (files / "d.conllu").write_text(edit(conllu(SENTENCES)))
    rc = run_on(cli, files, "--conllu", files / "d.conllu", "--dep-out", files / "x.dep")
    assert rc == 1
    err = error_of(capsys)
    assert f"tok.en:1: the CoNLL-U sentence ({files / 'd.conllu'}:1) does not match" in err and message in err
    assert not (files / "x.dep").exists()


def test_ptb_bracket_escapes_match_the_brackets_of_the_input(cli, files):
    (files / "tok.en").write_text("a ( b )\n")
    tree = "(S (X a) (-LRB- -LRB-) (X b) (-RRB- -RRB-))\n"
    (files / "p.ptb").write_text(tree)
    rc = run_on(cli, files, "--ptb", files / "p.ptb", "--tree-out", files / "x.tree")
    assert rc == 0 and (files / "x.tree").read_text() == tree


def argv_errors(files):
    tok, ptb, dep, tree = (str(files / n) for n in ("tok.en", "p.ptb", "x.dep", "x.tree"))
    (files / "adir").mkdir()
    (files / "afile").write_text("")
    return [
        (["--input", tok], "nothing to do: give --dep-out and/or --tree-out"),
        (["--input", tok, "--ptb", ptb, "--trees-from-dependencies", "--tree-out", tree], "exclude each other"),
        (["--input", tok, "--trees-from-dependencies", "--dep-out", dep], "need --tree-out"),
        (["--input", tok, "--dep-out", dep, "--n-process", "0"], "--batch-size and --n-process must be >= 1"),
        (["--input", tok, "--dep-out", dep, "--batch-size", "0"], "--batch-size and --n-process must be >= 1"),
        (["--input", tok, "--conllu", str(files / "no.conllu"), "--dep-out", dep], "--conllu: file not found"),
        (["--input", tok, "--ptb", str(files / "no.ptb"), "--tree-out", tree], "--ptb: file not found"),
        (["--input", str(files / "no.en"), "--dep-out", dep], "--input: file not found"),
        (["--input", tok, "--dep-out", dep, "--tree-out", dep], "--dep-out and --tree-out name the same file"),
        (["--input", tok, "--dep-out", str(files / "adir")], "--dep-out " + str(files / "adir") + " is a directory"),
        (["--input", tok, "--tree-out", str(files / "afile" / "x.tree")], "is a file, not a directory"),
    ]


def test_bad_flags_are_one_line_before_any_work(cli, files, capsys):
    for argv, message in argv_errors(files):
        with pytest.raises(SystemExit) as e:
            cli.parse_args(argv)
        assert e.value.code == 2, argv
        assert message in error_of(capsys), argv
    assert not (files / "x.dep").exists() and not (files / "x.tree").exists()


def test_a_malformed_tree_is_one_line(cli, files, capsys):
    (files / "p.ptb").write_text("(S (X a)\n")
    rc = run_on(cli, files, "--ptb", files / "p.ptb", "--tree-out", files / "x.tree")
    assert rc == 1 and error_of(capsys).startswith("[parse_source] error:")
    assert not (files / "x.tree").exists() and leftovers(files) == []


def test_ctrl_c_exits_130_and_leaves_nothing_behind(cli, files, monkeypatch, capsys):
    (files / "x.tree").write_text("the earlier trees\n")
    real = cli.read_ptb

    def interrupted(path):
        it = real(path)
        yield next(it)
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "read_ptb", interrupted)
    rc = run_on(cli, files, "--ptb", files / "p.ptb", "--tree-out", files / "x.tree")
    assert rc == 130 and "interrupted" in capsys.readouterr().err
    assert (files / "x.tree").read_text() == "the earlier trees\n" and leftovers(files) == []


class StandIn:
    """spaCy's pipeline as parse_source sees it: ``load_spacy``'s arguments recorded,
    ``parse_tokenized`` answering each sentence with a prepared parse."""

    def __init__(self, parses):
        self.parses, self.loaded = parses, []

    def install(self, cli, monkeypatch):
        def load_spacy(model, dependencies=True, benepar_model=None):
            self.loaded.append((dependencies, benepar_model))
            return type("Pipeline", (), {"pipe_names": ["tagger", "parser"]})()

        def parse_tokenized(nlp, sentences, batch_size, n_process):
            for _ in sentences:  # consumes the input as spaCy does
                pass
            return iter(self.parses)

        monkeypatch.setattr(cli, "load_spacy", load_spacy)
        monkeypatch.setattr(cli, "parse_tokenized", parse_tokenized)


def parsed(words, heads, tags, tree=None):
    return ParsedSentence(words.split(), heads, ["dep"] * len(heads), tags.split(), tree)


GOOD = [
    parsed("Bush held talks .", [1, -1, 1, 1], "NNP VBD NNS ."),
    parsed("do n't go", [2, 2, -1], "VBP RB VB"),
    parsed("Hello", [-1], "UH"),
]


def test_trees_from_spacy_dependencies_alone_carry_its_tags(cli, files, monkeypatch):
    """--trees-from-dependencies with only --tree-out: spaCy's dependency parser is loaded
    (no benepar), and the derived trees' preterminals are spaCy's tags."""
    stand_in = StandIn(GOOD)
    stand_in.install(cli, monkeypatch)
    rc = run_on(cli, files, "--tree-out", files / "x.tree", "--trees-from-dependencies")
    assert rc == 0 and stand_in.loaded == [(True, None)]
    trees = (files / "x.tree").read_text().splitlines()
    assert trees[0] == "(XP (NNP Bush) (VBD held) (NNS talks) (. .))" and trees[2] == "(UH Hello)"


@pytest.mark.parametrize(
    "parses, message",
    [
        ([GOOD[0], parsed("do not go", [2, 2, -1], "VBP RB VB"), GOOD[2]], "tok.en:2: the spaCy parse does not match"),
        (
            [GOOD[0]._replace(tree="(S (NNP Bush) (VBD held) (NNS talk) (. .))"), *GOOD[1:]],
            "tok.en:1: the benepar tree does not match",
        ),
        ([*GOOD, GOOD[2]], "internal error: spaCy returned more sentences than"),
    ],
    ids=["spaCy words", "benepar leaves", "one parse too many"],
)
def test_a_pipeline_that_does_not_answer_the_input_is_an_error(cli, files, monkeypatch, parses, message, capsys):
    StandIn(parses).install(cli, monkeypatch)
    rc = run_on(cli, files, "--dep-out", files / "x.dep")
    assert rc == 1 and message in error_of(capsys)
    assert not (files / "x.dep").exists() and leftovers(files) == []
