"""Parsing and parse-annotated data (redundant-head enlivening, data side).

DEA relations and LPEA relative phrasal positions against hand-derived matrices (the
paper's "Bush held a talk with Sharon" and harder trees) and against a brute-force
computation written here from the definitions; word -> BPE expansion; PTB / CoNLL-U /
side-file readers; spaCy parsing of pre-tokenized text; the parse_source CLI (your own
parses, mismatches, missing models); the task: side files, count mismatch, collation with
left and right padding, batches from fairseq's iterator, SequenceGenerator; and the
Multi30k En->De slice parsed with spaCy (``parsed_data``)."""

import importlib.util
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fairseq_sparse_attn.syntax import NO_PHRASE
from fairseq_sparse_attn.syntax.readers import (
    ParseFormatError,
    Tree,
    format_dep_line,
    leaf_matches,
    parse_dep_line,
    parse_ptb,
    read_conllu,
    read_ptb,
)
from fairseq_sparse_attn.syntax.structure import (
    AlignmentError,
    align_pieces,
    dependency_matrix,
    local_phrases,
    phrase_rp_matrix,
    projectivize,
    sentence_structure,
    tree_from_dependencies,
)

from syntax_fixtures import REPO, SPACY_MODEL, spacy_model_available, subprocess_env

X = NO_PHRASE
PAPER_TREE = "(S (NP (NNP Bush)) (VP (VBD held) (NP (DT a) (NN talk)) (PP (IN with) (NP (NNP Sharon)))))"
PAPER_WORDS = "Bush held a talk with Sharon".split()
# UD-style: Bush -> held (nsubj), held root, a -> talk, talk -> held, with -> Sharon, Sharon -> held
PAPER_HEADS = [1, -1, 3, 1, 5, 1]
PAPER_BPE = "Bu@@ sh held a talk with Sha@@ ron".split()

needs_spacy = pytest.mark.skipif(not spacy_model_available(), reason=f"spaCy model {SPACY_MODEL} not installed")


def t(rows, dtype):
    return torch.tensor(rows, dtype=dtype)


# ----------------------------------------------------------------- independent computations


def brute_force_rp(tree: Tree):
    """RP from the definitions, with explicit ancestor lists (no spans, no shared code)."""
    leaves = []  # (word index, list of ancestor nodes from the root down to the leaf's parent)

    def walk(node, ancestors):
        for child in node.children:
            if isinstance(child, str):
                leaves.append(ancestors + [node])
            else:
                walk(child, ancestors + [node])

    walk(tree, [])
    n = len(leaves)

    def words_under(node):
        count = 0
        for anc in leaves:
            if any(a is node for a in anc):
                count += 1
        return count

    def members(node):
        return {k for k, anc in enumerate(leaves) if any(a is node for a in anc)}

    rule1 = []
    for i, anc in enumerate(leaves):
        phrase = {i}
        for node in reversed(anc):  # lowest ancestor first
            if words_under(node) > 1:
                phrase = members(node)
                break
        rule1.append(phrase)
    layer = [len(anc) for anc in leaves]  # root at 0: the leaf sits one below its parent
    rp = [[X] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            if j in rule1[i] or i in rule1[j]:
                rp[i][j] = layer[j] - layer[i]
    return rp


def brute_force_dep(heads):
    n = len(heads)
    return [[i == j or heads[i] == j or heads[j] == i for j in range(n)] for i in range(n)]


def word_ids_from_markers(pieces):
    ids, w = [], 0
    for p in pieces:
        ids.append(w)
        if not p.endswith("@@"):
            w += 1
    return ids


def expand(word_matrix, ids, fill, eos_diag):
    n = len(ids)
    out = [[fill] * (n + 1) for _ in range(n + 1)]
    for a in range(n):
        for b in range(n):
            out[a][b] = word_matrix[ids[a]][ids[b]]
    out[n][n] = eos_diag
    return out


def random_tree(rng, n_words, unary=0.3):
    """A random constituency tree over words w0..w{n-1}, with unary chains."""
    nodes = [Tree("T", [f"w{i}"]) for i in range(n_words)]
    while len(nodes) > 1:
        k = rng.randint(2, min(4, len(nodes)))
        start = rng.randrange(0, len(nodes) - k + 1)
        node = Tree("P", nodes[start : start + k])
        while rng.random() < unary:
            node = Tree("U", [node])
        nodes[start : start + k] = [node]
    root = nodes[0]
    if rng.random() < 0.3 and n_words > 0:  # a leaf directly under a phrase node (no POS)
        root = Tree("R", [root, "z"])
    return root


def random_heads(rng, n):
    order = list(range(n))
    rng.shuffle(order)
    heads = [-1] * n
    for k in range(1, n):
        heads[order[k]] = order[rng.randrange(0, k)]
    return heads


# ----------------------------------------------------------------- DEA


def test_dea_paper_example_hand_derived():
    expected_words = t(
        [
            [1, 1, 0, 0, 0, 0],
            [1, 1, 0, 1, 0, 1],
            [0, 0, 1, 1, 0, 0],
            [0, 1, 1, 1, 0, 0],
            [0, 0, 0, 0, 1, 1],
            [0, 1, 0, 0, 1, 1],
        ],
        torch.bool,
    )
    assert torch.equal(dependency_matrix(PAPER_HEADS, with_eos=False), expected_words)
    # Bu@@ sh | held | a | talk | with | Sha@@ ron | EOS
    expected = t(
        [
            [1, 1, 1, 0, 0, 0, 0, 0, 0],
            [1, 1, 1, 0, 0, 0, 0, 0, 0],
            [1, 1, 1, 0, 1, 0, 1, 1, 0],
            [0, 0, 0, 1, 1, 0, 0, 0, 0],
            [0, 0, 1, 1, 1, 0, 0, 0, 0],
            [0, 0, 0, 0, 0, 1, 1, 1, 0],
            [0, 0, 1, 0, 0, 1, 1, 1, 0],
            [0, 0, 1, 0, 0, 1, 1, 1, 0],
            [0, 0, 0, 0, 0, 0, 0, 0, 1],
        ],
        torch.bool,
    )
    got = dependency_matrix(PAPER_HEADS, [0, 0, 1, 2, 3, 4, 5, 5])
    assert got.dtype == torch.bool and torch.equal(got, expected)


def test_dea_random_against_definition():
    rng = random.Random(0)
    for _ in range(50):
        n = rng.randint(1, 9)
        heads = random_heads(rng, n)
        pieces_per_word = [rng.randint(1, 3) for _ in range(n)]
        ids = [w for w, k in enumerate(pieces_per_word) for _ in range(k)]
        expected = expand(brute_force_dep(heads), ids, False, True)
        assert dependency_matrix(heads, ids).tolist() == expected


def test_dea_rejects_bad_heads():
    with pytest.raises(ValueError, match="cycle"):
        dependency_matrix([1, 0])
    with pytest.raises(ValueError, match="own head"):
        dependency_matrix([0])
    with pytest.raises(ValueError, match="expected 0 \\(root\\) to 2"):
        dependency_matrix([-1, 5])


# ----------------------------------------------------------------- LPEA relative phrasal positions


PAPER_RP = [
    [0, 0, 1, 1, 1, 2],
    [0, 0, 1, 1, 1, 2],
    [-1, -1, 0, 0, X, X],
    [-1, -1, 0, 0, X, X],
    [-1, -1, X, X, 0, 1],
    [-2, -2, X, X, -1, 0],
]


def test_rp_paper_example_hand_derived():
    lp = local_phrases(PAPER_TREE)
    # Fig. 3: Bush and held on layer 3, a / talk / with on layer 4, Sharon on layer 5
    assert lp.layers.tolist() == [3, 3, 4, 4, 4, 5]
    rp = phrase_rp_matrix(PAPER_TREE, with_eos=False)
    assert rp.dtype == torch.int16
    assert rp.tolist() == PAPER_RP
    # the text: "held" and "talk" are in a local phrase, RP_2,4 = 1 (1-based);
    # "Sharon" and "talk" are not (masked)
    assert rp[1, 3] == 1 and rp[5, 3] == X and rp[3, 5] == X
    # Fig. 3's matrix as the paper's text extraction gives it (the order inside each row is
    # scrambled by the PDF extraction, "?" = masked): the rows agree as multisets
    fig3 = ["0 0 1 1 1 2", "0 0 1 1 1 2", "0 0 -1 -1 ? ?", "0 0 -1 -1 ? ?", "0 -1 -1 1 ? ?", "0 -1 -2 ? -2 ?"]
    for row, text in zip(rp.tolist(), fig3):
        assert sorted(row) == sorted(X if v == "?" else int(v) for v in text.split())


def test_rp_paper_example_bpe_and_eos():
    expected = [
        [0, 0, 0, 1, 1, 1, 2, 2, X],
        [0, 0, 0, 1, 1, 1, 2, 2, X],
        [0, 0, 0, 1, 1, 1, 2, 2, X],
        [-1, -1, -1, 0, 0, X, X, X, X],
        [-1, -1, -1, 0, 0, X, X, X, X],
        [-1, -1, -1, X, X, 0, 1, 1, X],
        [-2, -2, -2, X, X, -1, 0, 0, X],
        [-2, -2, -2, X, X, -1, 0, 0, X],
        [X, X, X, X, X, X, X, X, 0],
    ]
    assert phrase_rp_matrix(PAPER_TREE, [0, 0, 1, 2, 3, 4, 5, 5]).tolist() == expected
    dep, rp = sentence_structure(PAPER_WORDS, PAPER_BPE, PAPER_HEADS, PAPER_TREE)
    assert rp.tolist() == expected
    assert torch.equal(dep, dependency_matrix(PAPER_HEADS, [0, 0, 1, 2, 3, 4, 5, 5]))


def test_rp_unary_chains_and_punctuation():
    # the man in black runs .  — NP -> NN "black" is a unary chain under PP
    tree = "(S (NP (NP (DT the) (NN man)) (PP (IN in) (NP (NN black)))) (VP (VBZ runs)) (. .))"
    assert local_phrases(tree).layers.tolist() == [4, 4, 4, 5, 3, 2]
    assert phrase_rp_matrix(tree, with_eos=False).tolist() == [
        [0, 0, X, X, -1, -2],
        [0, 0, X, X, -1, -2],
        [X, X, 0, 1, -1, -2],
        [X, X, -1, 0, -2, -3],
        [1, 1, 1, 2, 0, -1],
        [2, 2, 2, 3, 1, 0],
    ]
    # a long unary chain above one word: its phrase is the sentence
    chain = "(ROOT (S (NP (NP (NNP John))) (VP (VBD slept)) (. .)))"
    assert phrase_rp_matrix(chain, with_eos=False).tolist() == [[0, -1, -2], [1, 0, -1], [2, 1, 0]]


def test_rp_one_word_and_empty_sentences():
    assert phrase_rp_matrix("(NP (NN Hello))", with_eos=False).tolist() == [[0]]
    assert phrase_rp_matrix("(S (INTJ (UH Hello)))").tolist() == [[0, X], [X, 0]]
    assert phrase_rp_matrix("()").tolist() == [[0]]  # only EOS
    assert dependency_matrix([]).tolist() == [[True]]


def test_rp_preterminals_shift_layers_not_rp():
    """Leaf depth counts the POS preterminal (the paper's layers); without preterminals
    the actual leaf depth is used and, for a PTB tree, every RP is the same."""
    with_pos = "(S (NP (NNP Bush)) (VP (VBD held) (NP (NNS talks))))"
    without = "(S (NP Bush) (VP held (NP talks)))"
    assert local_phrases(with_pos).layers.tolist() == [3, 3, 4]
    assert local_phrases(without).layers.tolist() == [2, 2, 3]
    expected = [[0, 0, 1], [0, 0, 1], [-1, -1, 0]]
    assert phrase_rp_matrix(with_pos, with_eos=False).tolist() == expected
    assert phrase_rp_matrix(without, with_eos=False).tolist() == expected
    wrapped = "( (S (NP (NNP Bush)) (VP (VBD held) (NP (NNS talks)))) )"  # PTB's outer brackets
    assert phrase_rp_matrix(wrapped, with_eos=False).tolist() == expected


def test_rp_random_trees_against_definition():
    rng = random.Random(1)
    for _ in range(60):
        tree = random_tree(rng, rng.randint(1, 10))
        n = len(tree.leaves())
        pieces_per_word = [rng.randint(1, 3) for _ in range(n)]
        ids = [w for w, k in enumerate(pieces_per_word) for _ in range(k)]
        expected = expand(brute_force_rp(tree), ids, X, 0)
        assert phrase_rp_matrix(tree, ids).tolist() == expected, tree.to_ptb()
        # a PTB string gives the same as the Tree object
        assert phrase_rp_matrix(tree.to_ptb(), ids).tolist() == expected


# ----------------------------------------------------------------- words -> BPE pieces


def test_align_pieces():
    words = "Bush held a talk with Sharon".split()
    assert align_pieces(PAPER_BPE, words) == [0, 0, 1, 2, 3, 4, 5, 5]
    # <unk> lost its text and its @@: it matches any part of a word
    assert align_pieces("Bu@@ <unk> held a <unk> with Sha@@ <unk>".split(), words) == [0, 0, 1, 2, 3, 4, 5, 5]
    assert align_pieces("<unk> <unk> held a talk with Sharon".split(), words) == [0, 0, 1, 2, 3, 4, 5]
    assert align_pieces("<unk> held a talk with Sharon".split(), words) == [0, 1, 2, 3, 4, 5]
    assert align_pieces([], []) == []
    # truncated source (--truncate-source): a prefix, possibly inside a word
    assert align_pieces("Bu@@ sh held a".split(), words, allow_truncated=True) == [0, 0, 1, 2]
    assert align_pieces("Bu@@".split(), words, allow_truncated=True) == [0]


def test_align_pieces_errors_name_the_first_difference():
    words = "Bush held a talk".split()
    with pytest.raises(AlignmentError, match=r"piece 3 'hold' does not continue word 2 'held'"):
        align_pieces("Bu@@ sh hold a talk".split(), words)
    with pytest.raises(AlignmentError, match="fewer words than its parse"):
        align_pieces("Bu@@ sh held a".split(), words)
    with pytest.raises(AlignmentError, match="after the last word"):
        align_pieces("Bu@@ sh held a talk again".split(), words)
    with pytest.raises(AlignmentError, match="'Bu@@' does not continue word 1 'Bu'"):
        align_pieces(["Bu@@"], ["Bu"])  # a piece marked as continuing cannot end the word
    with pytest.raises(ValueError, match="tree's leaves are not the words"):
        sentence_structure(["Bush", "held"], ["Bush", "held"], [1, -1], "(S (NNP Bush) (VBD holds))")


def test_word_ids_validation():
    with pytest.raises(ValueError, match="start at 0 and step by 0"):
        dependency_matrix([1, -1], [0, 2])
    with pytest.raises(ValueError, match="refer to word 2 but the parse has 2 words"):
        phrase_rp_matrix("(S (A a) (B b))", [0, 1, 2])


# ----------------------------------------------------------------- readers and writers


def test_ptb_reader(tmp_path):
    tree = parse_ptb(PAPER_TREE)
    assert tree.leaves() == PAPER_WORDS
    assert tree.label == "S" and tree.children[0] == Tree("NP", [Tree("NNP", ["Bush"])])
    assert parse_ptb(tree.to_ptb()) == tree
    esc = parse_ptb("(S (-LRB- -LRB-) (NN word) (-RRB- -RRB-) (NN a-LRB-b))")
    assert esc.leaves() == ["-LRB-", "word", "-RRB-", "a-LRB-b"]
    assert [leaf_matches(a, b) for a, b in zip(esc.leaves(), ["(", "word", ")", "a(b"])] == [True] * 4
    assert not leaf_matches("-LRB-", ")")
    f = tmp_path / "trees.txt"
    f.write_text(PAPER_TREE + "\n(S (NP (NN x)) (VP (VB y))\n")
    with pytest.raises(ParseFormatError, match=f"{f}:2: unbalanced PTB tree"):
        list(read_ptb(f))
    for bad, msg in [
        ("(S (NP (NN x))) (S y)", "text after the end of the tree"),
        ("(S (NP))", r"node \(NP\) has no children"),
        ("", "empty line"),
        ("S (NP x)", "expected '\\('"),
        ("(S x))", "text after the end of the tree: '\\)'"),
    ]:
        with pytest.raises(ParseFormatError, match=msg):
            parse_ptb(bad, "f.tree", 7)
    with pytest.raises(ParseFormatError, match="f.tree:7"):
        parse_ptb("(S (NP))", "f.tree", 7)


CONLLU = """# sent_id = 1
# text = Bush held talks.
1\tBush\tBush\tPROPN\tNNP\t_\t2\tnsubj\t_\t_
2\theld\thold\tVERB\tVBD\t_\t0\troot\t_\t_
3\ttalks\ttalk\tNOUN\tNNS\t_\t2\tobj\t_\tSpaceAfter=No
4\t.\t.\tPUNCT\t.\t_\t2\tpunct\t_\t_

1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
1\tdo\tdo\tAUX\tVBP\t_\t3\taux\t_\t_
2\tn't\tnot\tPART\tRB\t_\t3\tadvmod\t_\t_
3\tgo\tgo\tVERB\tVB\t_\t0\troot\t_\t_
3.1\tgone\t_\t_\t_\t_\t_\t_\t_\t_
"""


def test_conllu_reader(tmp_path):
    f = tmp_path / "a.conllu"
    f.write_text(CONLLU)
    sents = list(read_conllu(f))
    assert [s[0] for s in sents] == [3, 9]  # the first token line of each sentence
    assert sents[0][1:] == (["Bush", "held", "talks", "."], [1, -1, 1, 1], ["nsubj", "root", "obj", "punct"])
    assert sents[1][1:3] == (["do", "n't", "go"], [2, 2, -1])
    bad = tmp_path / "bad.conllu"
    bad.write_text("1\tBush\t_\t_\t_\t_\t2\tnsubj\t_\n")
    with pytest.raises(ParseFormatError, match=f"{bad}:1: expected 10 tab-separated CoNLL-U columns"):
        list(read_conllu(bad))
    bad.write_text("1\tBush\t_\t_\t_\t_\t_\tnsubj\t_\t_\n")
    with pytest.raises(ParseFormatError, match=f"{bad}:1: HEAD '_' is not an integer"):
        list(read_conllu(bad))
    bad.write_text("1\ta\t_\t_\t_\t_\t2\tx\t_\t_\n2\tb\t_\t_\t_\t_\t1\tx\t_\t_\n")
    with pytest.raises(ParseFormatError, match=f"{bad}:1: the heads form a cycle"):
        list(read_conllu(bad))
    bad.write_text("1\ta\t_\t_\t_\t_\t0\tx\t_\t_\n3\tb\t_\t_\t_\t_\t1\tx\t_\t_\n")
    with pytest.raises(ParseFormatError, match=f"{bad}:2: ID 3 out of sequence, expected 2"):
        list(read_conllu(bad))


def test_dep_side_lines():
    line = format_dep_line(["Bush", "held", "talks"], [1, -1, 1], ["nsubj", "ROOT", "dobj"])
    assert line == "Bush held talks\t2 0 2\tnsubj ROOT dobj"
    assert parse_dep_line(line) == (["Bush", "held", "talks"], [1, -1, 1])
    assert parse_dep_line("\t") == ([], [])
    assert format_dep_line([], []) == "\t"
    with pytest.raises(ParseFormatError, match="x.dep:4: 3 words but 2 heads"):
        parse_dep_line("a b c\t2 0", "x.dep", 4)
    with pytest.raises(ParseFormatError, match="x.dep:4: expected 'words<TAB>heads"):
        parse_dep_line("a b c", "x.dep", 4)
    with pytest.raises(ParseFormatError, match="must be integers"):
        parse_dep_line("a b\tx 0", "x.dep", 4)
    with pytest.raises(ParseFormatError, match="head of word 1 is 7"):
        parse_dep_line("a b\t7 0", "x.dep", 4)


# ----------------------------------------------------------------- dependency -> tree (test fallback)


def test_tree_from_dependencies():
    tree = tree_from_dependencies(PAPER_WORDS, PAPER_HEADS, ["NNP", "VBD", "DT", "NN", "IN", "NNP"])
    assert tree.to_ptb() == ("(XP (NNP Bush) (VBD held) (XP (DT a) (NN talk)) (XP (IN with) (NNP Sharon)))")
    # two roots: joined under TOP; no tags: X
    assert tree_from_dependencies(["a", "b"], [-1, -1]).to_ptb() == "(TOP (X a) (X b))"
    assert tree_from_dependencies([], []).to_ptb() == "()"
    # non-projective: 0 -> 2 crosses 1 -> 3; the shorter crossing arc is lifted
    heads = [-1, 0, 0, 1]  # a(root) b->a c->a d->b : b..d spans c which is not under b
    assert projectivize(heads) == [-1, 0, 0, 0]
    assert tree_from_dependencies(list("abcd"), heads).leaves() == list("abcd")


# ----------------------------------------------------------------- spaCy on pre-tokenized text


@needs_spacy
def test_spacy_parses_pretokenized_text():
    from fairseq_sparse_attn.syntax.parsing import load_spacy, parse_tokenized

    nlp = load_spacy(SPACY_MODEL)
    sents = [
        ["Bush", "held", "a", "talk", "with", "Sharon", "."],
        ["I", "can't", "visit", "the", "U.S.", "(", "again", ")", "."],  # spaCy would split can't
        ["Two", "dogs", "run", ".", "They", "play", "."],  # two sentences, one line
        [],
    ]
    out = list(parse_tokenized(nlp, sents, batch_size=2))
    assert [o.words for o in out] == sents
    for o in out[:3]:
        assert sum(h == -1 for h in o.heads) == 1  # one sentence per line, one root
        dependency_matrix(o.heads)  # valid heads: in range, no cycle
    bush = out[0].heads
    assert bush[1] == -1 and bush[0] == 1 and bush[2] == 3 and bush[3] == 1
    assert out[3].heads == [] and out[3].words == []


def test_missing_models_say_how_to_install():
    from fairseq_sparse_attn.syntax.parsing import ParsingError, check_benepar_model, load_spacy

    if importlib.util.find_spec("spacy") is not None:
        with pytest.raises(ParsingError, match="python -m spacy download no_such_model_xyz"):
            load_spacy("no_such_model_xyz")
    if importlib.util.find_spec("benepar") is not None:
        name = "benepar_no_such_model"
        with pytest.raises(ParsingError, match=r"benepar\.download\('benepar_no_such_model'\)"):
            check_benepar_model(name)


# ----------------------------------------------------------------- the parse_source CLI


def load_cli():
    spec = importlib.util.spec_from_file_location("parse_source", REPO / "data_prep" / "parse_source.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TOKENS = "Bush held talks .\ndo n't go\nHello\n"
PTB = (
    "(S (NP (NNP Bush)) (VP (VBD held) (NP (NNS talks))) (. .))\n"
    "(S (VP (VBP do) (RB n't) (VP (VB go))))\n"
    "(INTJ (UH Hello))\n"
)
CONLLU_3 = (
    "1\tBush\t_\t_\t_\t_\t2\tnsubj\t_\t_\n2\theld\t_\t_\t_\t_\t0\troot\t_\t_\n"
    "3\ttalks\t_\t_\t_\t_\t2\tobj\t_\t_\n4\t.\t_\t_\t_\t_\t2\tpunct\t_\t_\n\n"
    "1\tdo\t_\t_\t_\t_\t3\taux\t_\t_\n2\tn't\t_\t_\t_\t_\t3\tadvmod\t_\t_\n"
    "3\tgo\t_\t_\t_\t_\t0\troot\t_\t_\n\n"
    "1\tHello\t_\t_\t_\t_\t0\troot\t_\t_\n"
)


def test_cli_bring_your_own_parses(tmp_path, capsys):
    cli = load_cli()
    (tmp_path / "tok.en").write_text(TOKENS)
    (tmp_path / "p.ptb").write_text(PTB)
    (tmp_path / "d.conllu").write_text(CONLLU_3)
    rc = cli.main(
        [
            "--input",
            str(tmp_path / "tok.en"),
            "--conllu",
            str(tmp_path / "d.conllu"),
            "--ptb",
            str(tmp_path / "p.ptb"),
            "--dep-out",
            str(tmp_path / "out" / "x.en.dep"),
            "--tree-out",
            str(tmp_path / "out" / "x.en.tree"),
            "--no-progress",
        ]
    )
    assert rc == 0
    assert (tmp_path / "out" / "x.en.dep").read_text() == (
        "Bush held talks .\t2 0 2 2\tnsubj root obj punct\ndo n't go\t3 3 0\taux advmod root\nHello\t0\troot\n"
    )
    assert (tmp_path / "out" / "x.en.tree").read_text() == PTB
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["x.en.dep", "x.en.tree"]
    err = capsys.readouterr().err
    assert "parsed 3 sentences in" in err and "sentences/s" in err
    # trees derived from the CoNLL-U heads, only when asked for
    rc = cli.main(
        [
            "--input",
            str(tmp_path / "tok.en"),
            "--conllu",
            str(tmp_path / "d.conllu"),
            "--tree-out",
            str(tmp_path / "fromdep.tree"),
            "--trees-from-dependencies",
            "--no-progress",
        ]
    )
    assert rc == 0
    assert (tmp_path / "fromdep.tree").read_text() == (
        "(XP (X Bush) (X held) (X talks) (X .))\n(XP (X do) (X n't) (X go))\n(X Hello)\n"
    )


def test_cli_mismatched_parse_is_a_clear_error(tmp_path, capsys):
    cli = load_cli()
    (tmp_path / "tok.en").write_text(TOKENS)
    (tmp_path / "p.ptb").write_text(PTB.replace("(NNS talks)", "(NNS talk)"))
    (tmp_path / "d.conllu").write_text(CONLLU_3.replace("n't", "not"))
    out = tmp_path / "out"
    rc = cli.main(
        [
            "--input",
            str(tmp_path / "tok.en"),
            "--ptb",
            str(tmp_path / "p.ptb"),
            "--tree-out",
            str(out / "x.tree"),
            "--no-progress",
        ]
    )
    assert rc == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'tok.en'}:1: the PTB tree ({tmp_path / 'p.ptb'}:1) does not match" in err
    assert "token 3: parse has 'talk', sentence has 'talks'" in err
    rc = cli.main(
        [
            "--input",
            str(tmp_path / "tok.en"),
            "--conllu",
            str(tmp_path / "d.conllu"),
            "--dep-out",
            str(out / "x.dep"),
            "--no-progress",
        ]
    )
    assert rc == 1
    err = capsys.readouterr().err
    assert f"tok.en:2: the CoNLL-U sentence ({tmp_path / 'd.conllu'}:6)" in err
    assert "token 2: parse has 'not', sentence has \"n't\"" in err
    # nothing half-written: no outputs, no temporary files
    assert not out.exists() or list(out.iterdir()) == []
    # fewer trees than lines
    (tmp_path / "short.ptb").write_text(PTB.splitlines()[0] + "\n")
    rc = cli.main(
        [
            "--input",
            str(tmp_path / "tok.en"),
            "--ptb",
            str(tmp_path / "short.ptb"),
            "--tree-out",
            str(out / "x.tree"),
            "--no-progress",
        ]
    )
    assert rc == 1
    assert "short.ptb has 1 trees but" in capsys.readouterr().err and not (out / "x.tree").exists()


def test_cli_missing_benepar_model(tmp_path):
    if importlib.util.find_spec("spacy") is None or not spacy_model_available():
        pytest.skip("needs spaCy and its model to get as far as benepar")
    (tmp_path / "tok.en").write_text(TOKENS)
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "data_prep" / "parse_source.py"),
            "--input",
            str(tmp_path / "tok.en"),
            "--tree-out",
            str(tmp_path / "x.tree"),
            "--spacy-model",
            SPACY_MODEL,
            "--benepar-model",
            "benepar_no_such_model",
        ],
        capture_output=True,
        text=True,
        env=subprocess_env(),
    )
    assert proc.returncode == 1
    assert "python -c \"import benepar; benepar.download('benepar_no_such_model')\"" in proc.stderr, proc.stderr[-2000:]
    assert "--trees-from-dependencies" in proc.stderr and not (tmp_path / "x.tree").exists()


def save_tiny_benepar_model(path):
    """A real benepar model file (char-LSTM ChartParser, single-file checkpoint format),
    randomly initialised: benepar_en3 cannot be downloaded here, but this runs benepar's
    own spaCy component and chart decoder end to end.  Its trees are valid and meaningless."""
    from benepar import nkutil
    from benepar.parse_chart import ChartParser

    hparams = dict(
        use_chars_lstm=True,
        use_pretrained=False,
        pretrained_model="",
        d_char_emb=8,
        d_model=16,
        char_lstm_input_dropout=0.0,
        use_encoder=True,
        morpho_emb_dropout=0.0,
        encoder_max_len=512,
        num_heads=2,
        d_kv=4,
        d_ff=16,
        relu_dropout=0.0,
        residual_dropout=0.0,
        attention_dropout=0.0,
        num_layers=1,
        d_label_hidden=8,
        predict_tags=True,
        d_tag_hidden=8,
        tag_loss_scale=1.0,
        force_root_constituent=True,
    )
    labels = {"": 0, "S": 1, "NP": 2, "VP": 3, "PP": 4, "S::VP": 5}
    tags = {"UNK": 0, "NN": 1, "VB": 2, "DT": 3}
    torch.manual_seed(0)
    parser = ChartParser(tags, labels, {chr(i): i for i in range(256)}, nkutil.HParams(**hparams))
    torch.save({"config": parser.config, "state_dict": parser.state_dict()}, str(path))
    return path


@needs_spacy
def test_cli_spacy_and_benepar(tmp_path):
    """spaCy dependencies + benepar trees through the CLI, on tokens spaCy and PTB would
    treat differently (brackets, can't): benepar's escaped leaves are matched, the side
    files load as the task reads them."""
    if importlib.util.find_spec("benepar") is None:
        pytest.skip("benepar not installed")
    model = save_tiny_benepar_model(tmp_path / "tiny_benepar.pt")
    lines = ["Bush held a talk ( with Sharon ) .", "I can't go", "Hello", ""]
    (tmp_path / "tok.en").write_text("".join(line + "\n" for line in lines))
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "data_prep" / "parse_source.py"),
            "--input",
            str(tmp_path / "tok.en"),
            "--dep-out",
            str(tmp_path / "x.dep"),
            "--tree-out",
            str(tmp_path / "x.tree"),
            "--spacy-model",
            SPACY_MODEL,
            "--benepar-model",
            str(model),
            "--batch-size",
            "2",
        ],
        capture_output=True,
        text=True,
        env=subprocess_env(),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "parsed 4 sentences" in proc.stderr and "benepar" in proc.stderr
    trees = (tmp_path / "x.tree").read_text().splitlines()
    deps = (tmp_path / "x.dep").read_text().splitlines()
    assert len(trees) == len(deps) == 4 and trees[3] == "()"
    assert parse_dep_line(deps[3]) == ([], [])
    for line, tree, dep in zip(lines, trees, deps):
        leaves = parse_ptb(tree).leaves()
        assert len(leaves) == len(line.split())
        assert all(leaf_matches(a, b) for a, b in zip(leaves, line.split()))
        assert parse_dep_line(dep)[0] == line.split()
    assert parse_ptb(trees[0]).leaves()[4] == "-LRB-"
    # the same files as side data: structure for every sentence
    from fairseq_sparse_attn.data.parse_annotated_dataset import ParseSideData

    side = ParseSideData(str(tmp_path / "x.dep"), str(tmp_path / "x.tree"))
    for i, line in enumerate(lines):
        parse = side[i]
        assert parse.words == line.split()
        dep, rp = sentence_structure(parse.words, line.split(), parse.heads, parse.phrases)
        assert dep.shape == rp.shape == (len(parse.words) + 1,) * 2


# ----------------------------------------------------------------- the task on a hand-made corpus


# three sentences of different lengths (5, 4 and 3 tokens with EOS): no ties in fairseq's
# length sort, so the batch order is [0, 2, 1]
SRC_BPE = ["Bu@@ sh held talks", "He left", "Hel@@ l@@ o"]
TGT = ["Bush hielt Gespräche", "Er ging", "Hallo"]
DEP_LINES = ["Bush held talks\t2 0 2", "He left\t2 0", "Hello\t0"]
TREE_LINES = [
    "(S (NP (NNP Bush)) (VP (VBD held) (NP (NNS talks))))",
    "(S (NP (PRP He)) (VP (VBD left)))",
    "(INTJ (UH Hello))",
]
T_, F_ = True, False

EXPECTED_LEFT = {  # id -> (src_dep, src_rp) in a batch of width 5, left padding
    0: (
        [[1, 1, 1, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [0, 0, 1, 1, 0], [0, 0, 0, 0, 1]],
        [[0, 0, 0, 1, X], [0, 0, 0, 1, X], [0, 0, 0, 1, X], [-1, -1, -1, 0, X], [X, X, X, X, 0]],
    ),
    1: (
        [[0] * 5, [0] * 5, [0, 0, 1, 1, 0], [0, 0, 1, 1, 0], [0, 0, 0, 0, 1]],
        [[X] * 5, [X] * 5, [X, X, 0, 0, X], [X, X, 0, 0, X], [X, X, X, X, 0]],
    ),
    2: (
        [[0] * 5, [0, 1, 1, 1, 0], [0, 1, 1, 1, 0], [0, 1, 1, 1, 0], [0, 0, 0, 0, 1]],
        [[X] * 5, [X, 0, 0, 0, X], [X, 0, 0, 0, X], [X, 0, 0, 0, X], [X, X, X, X, 0]],
    ),
}
EXPECTED_RIGHT = {
    0: EXPECTED_LEFT[0],
    1: (
        [[1, 1, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0] * 5, [0] * 5],
        [[0, 0, X, X, X], [0, 0, X, X, X], [X, X, 0, X, X], [X] * 5, [X] * 5],
    ),
    2: (
        [[1, 1, 1, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 0, 0], [0, 0, 0, 1, 0], [0] * 5],
        [[0, 0, 0, X, X], [0, 0, 0, X, X], [0, 0, 0, X, X], [X, X, X, 0, X], [X] * 5],
    ),
}


def write_databin(d: Path, splits, src_dict_words=None):
    """Binarize {split: (src lines, tgt lines)} into d with fairseq's own dictionary and
    mmap builder (what fairseq-preprocess writes)."""
    from fairseq.data import Dictionary, indexed_dataset

    d.mkdir(parents=True, exist_ok=True)
    dicts = {}
    for lang, k in (("en", 0), ("de", 1)):
        dic = Dictionary()
        words = (
            src_dict_words
            if (lang == "en" and src_dict_words is not None)
            else [w for lines in splits.values() for line in lines[k] for w in line.split()]
        )
        for w in words:
            dic.add_symbol(w)
        dic.finalize(padding_factor=1)
        dic.save(str(d / f"dict.{lang}.txt"))
        dicts[lang] = dic
    for split, pair in splits.items():
        for lang, k in (("en", 0), ("de", 1)):
            prefix = str(d / f"{split}.en-de.{lang}")
            builder = indexed_dataset.make_builder(prefix + ".bin", "mmap", vocab_size=len(dicts[lang]))
            for line in pair[k]:
                builder.add_item(dicts[lang].encode_line(line, add_if_not_exist=False, append_eos=True))
            builder.finalize(prefix + ".idx")
    return dicts


def write_side(d: Path, split, dep_lines=DEP_LINES, tree_lines=TREE_LINES):
    if dep_lines is not None:
        (d / f"{split}.en.dep").write_text("".join(line + "\n" for line in dep_lines))
    if tree_lines is not None:
        (d / f"{split}.en.tree").write_text("".join(line + "\n" for line in tree_lines))


def make_task(databin, *extra):
    from fairseq import options, tasks

    import fairseq_sparse_attn.plugin  # noqa: F401  (registers the task)

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        [
            str(databin),
            "--task",
            "parse_annotated_translation",
            "-s",
            "en",
            "-t",
            "de",
            "--arch",
            "transformer",
            *map(str, extra),
        ],
    )
    return tasks.setup_task(args), args


@pytest.fixture
def tiny_bin(tmp_path):
    d = tmp_path / "data-bin"
    write_databin(d, {"train": (SRC_BPE, TGT)})
    write_side(d, "train")
    return d


@pytest.mark.parametrize("left_pad", [True, False])
def test_task_collates_hand_derived_matrices(tiny_bin, left_pad):
    # fairseq's --left-pad-source is a switch that turns left padding off (default: on)
    task, _ = make_task(tiny_bin, *([] if left_pad else ["--left-pad-source"]))
    assert task.cfg.left_pad_source == left_pad
    task.load_dataset("train")
    ds = task.dataset("train")
    batch = ds.collater([ds[i] for i in range(3)])
    net = batch["net_input"]
    assert set(net) == {"src_tokens", "src_lengths", "prev_output_tokens", "src_dep", "src_rp"}
    assert batch["id"].tolist() == [0, 2, 1]
    assert net["src_dep"].dtype == torch.bool and net["src_rp"].dtype == torch.int16
    assert net["src_tokens"].shape == (3, 5)
    assert net["src_dep"].shape == net["src_rp"].shape == (3, 5, 5)
    expected = EXPECTED_LEFT if left_pad else EXPECTED_RIGHT
    pad = task.src_dict.pad()
    for b, sid in enumerate(batch["id"].tolist()):
        dep, rp = expected[sid]
        assert net["src_dep"][b].tolist() == [[bool(v) for v in row] for row in dep], (sid, left_pad)
        assert net["src_rp"][b].tolist() == rp, (sid, left_pad)
        # the padding side agrees with src_tokens
        is_pad = (net["src_tokens"][b] == pad).tolist()
        assert is_pad == [not any(map(bool, row)) for row in dep]


@pytest.mark.parametrize(
    "extra", [["--required-seq-len-multiple", "4"], ["--required-seq-len-multiple", "4", "--left-pad-source"]]
)
def test_task_extra_padding(tiny_bin, extra):
    """Batches padded beyond the longest source (to a multiple of 4): each example's block
    still sits on its row's tokens, padding elsewhere.  (--num-batch-buckets would pad the
    examples themselves, but fairseq 0.12's bucketing calls np.percentile(interpolation=),
    which numpy 2 removed.)"""
    task, _ = make_task(tiny_bin, *extra)
    task.load_dataset("train")
    ds = task.dataset("train")
    batch = ds.collater([ds[i] for i in range(3)])
    net = batch["net_input"]
    T = net["src_tokens"].size(1)
    assert T == 8
    left = task.cfg.left_pad_source
    expected = EXPECTED_LEFT if left else EXPECTED_RIGHT
    pad = task.src_dict.pad()
    for b, sid in enumerate(batch["id"].tolist()):
        keep = (net["src_tokens"][b] != pad).nonzero().squeeze(1)
        n = keep.numel()
        dep, rp = expected[sid]
        block = slice(5 - n, 5) if left else slice(0, n)  # the example inside the width-5 layout
        sub = keep[:, None], keep[None, :]
        assert net["src_dep"][b][sub].tolist() == [[bool(v) for v in row[block]] for row in dep[block]]
        assert net["src_rp"][b][sub].tolist() == [row[block] for row in rp[block]]
        assert int(net["src_dep"][b].sum()) == sum(map(sum, dep))  # nothing outside the block
        assert int((net["src_rp"][b] != X).sum()) == sum(v != X for row in rp for v in row)


def test_task_only_dep(tiny_bin):
    (tiny_bin / "train.en.tree").unlink()
    task, _ = make_task(tiny_bin, "--syntax-inputs", "dep")
    task.load_dataset("train")
    ds = task.dataset("train")
    batch = ds.collater([ds[i] for i in range(3)])
    assert "src_dep" in batch["net_input"] and "src_rp" not in batch["net_input"]
    with pytest.raises(ValueError, match="--syntax-inputs 'tree'"):
        make_task(tiny_bin, "--syntax-inputs", "tree")


def test_task_missing_and_miscounted_side_files(tiny_bin):
    task, _ = make_task(tiny_bin)
    (tiny_bin / "train.en.tree").unlink()
    with pytest.raises(FileNotFoundError, match=r"train\.en\.tree not found.*parse_source\.py"):
        task.load_dataset("train")
    write_side(tiny_bin, "train", tree_lines=TREE_LINES[:2], dep_lines=DEP_LINES[:2])
    with pytest.raises(
        ValueError,
        match=r"train\.en\.dep has 2 lines but .*train\.en-de\.en\.bin has "
        r"3 sentences",
    ):
        task.load_dataset("train")
    write_side(tiny_bin, "train", tree_lines=TREE_LINES[:2])
    with pytest.raises(ValueError, match=r"train\.en\.dep has 3 lines but .*train\.en\.tree has 2"):
        task.load_dataset("train")


SHE_LEFT = (["She left"], ["Sie ging"], ["She left\t2 0"], ["(S (NP (PRP She)) (VP (VBD left)))"])


def test_task_combined_shards_follow_fairseq_s_concatenation(tmp_path):
    """train + train1 with --upsample-primary 2: the side files are concatenated as fairseq
    concatenates the binarized shards (the primary twice), so every example keeps its own
    parse; a split loaded without combining (valid) reads its first shard only."""
    src1, tgt1, dep1, tree1 = SHE_LEFT
    d = tmp_path / "bin"
    write_databin(d, {"train": (SRC_BPE, TGT), "train1": (src1, tgt1), "valid": (SRC_BPE, TGT), "valid1": (src1, tgt1)})
    for split in ("train", "valid"):
        write_side(d, split)
        write_side(d, split + "1", dep1, tree1)
    task, _ = make_task(d, "--upsample-primary", "2")
    task.load_dataset("train", combine=True)
    ds = task.dataset("train")
    assert len(ds) == 7
    alone = tmp_path / "alone"  # the second shard's sentence as a data set of its own
    write_databin(alone, {"train": (src1, tgt1)})
    write_side(alone, "train", dep1, tree1)
    single, _ = make_task(alone)
    single.load_dataset("train")
    one = single.dataset("train")[0]
    assert task.src_dict.string(ds[6]["source"]) == "She left"
    assert torch.equal(ds[6]["src_dep"], one["src_dep"]) and torch.equal(ds[6]["src_rp"], one["src_rp"])
    for i in range(3):  # the primary, twice
        for key in ("src_dep", "src_rp"):
            assert torch.equal(ds[i][key], ds[i + 3][key])
        dep, rp = EXPECTED_RIGHT[i]
        n = ds[i]["source"].numel()
        assert ds[i]["src_dep"].tolist() == [[bool(v) for v in row[:n]] for row in dep[:n]]
    task.load_dataset("valid")
    assert len(task.dataset("valid")) == 3


def test_task_reads_valid_parses_from_the_first_data_dir(tmp_path):
    """DATA1:DATA2 rotates training data by epoch; valid and test come from DATA1 in every
    epoch (fairseq's rule), and so do their parses."""
    src1, tgt1, dep1, tree1 = SHE_LEFT
    first, second = tmp_path / "first", tmp_path / "second"
    write_databin(first, {"train": (SRC_BPE, TGT), "valid": (SRC_BPE, TGT)})
    write_databin(second, {"train": (src1, tgt1), "valid": (src1, tgt1)})
    for d, dep, tree in ((first, DEP_LINES, TREE_LINES), (second, dep1, tree1)):
        for split in ("train", "valid"):
            write_side(d, split, dep, tree)
    task, _ = make_task(f"{first}:{second}")
    task.load_dataset("valid", epoch=2)
    assert len(task.dataset("valid")) == 3


@pytest.mark.parametrize("value", ["", " , ", "dep,tree"])
def test_task_syntax_inputs_must_name_one_or_both(value):
    from fairseq_sparse_attn.tasks.parse_annotated_translation import parse_features

    with pytest.raises(ValueError, match="--syntax-inputs .*: expected a comma-separated subset of dep, rp"):
        parse_features(value)
    assert parse_features("rp, dep") == ["dep", "rp"]


def test_task_tree_only_reads_escaped_brackets_as_the_source_s(tmp_path):
    """``--syntax-inputs rp`` takes the words from the tree, whose leaves spell brackets
    as -LRB- / -RRB- (PTB): they are the source's ( and )."""
    d = tmp_path / "bin"
    write_databin(d, {"train": (["( He ) left"], ["( Er ) ging"])})
    write_side(d, "train", None, ["(S (-LRB- -LRB-) (NP (PRP He)) (-RRB- -RRB-) (VP (VBD left)))"])
    task, _ = make_task(d, "--syntax-inputs", "rp")
    task.load_dataset("train")
    assert task.dataset("train")[0]["src_rp"].shape == (5, 5)


def test_task_mismatched_parse_names_file_and_line(tmp_path):
    d = tmp_path / "bin"
    src = SRC_BPE + ["He left", "He left"]
    write_databin(d, {"train": (src, TGT + ["Er ging", "Er ging"])})
    write_side(
        d,
        "train",
        DEP_LINES + ["He left\t2 0", "He right\t2 0"],
        TREE_LINES + [TREE_LINES[1], "(S (NP (PRP He)) (VP (VBD right)))"],
    )
    task, _ = make_task(d)
    with pytest.raises(ValueError) as e:  # every example is checked at load time
        task.load_dataset("train")
    msg = str(e.value)
    assert f"{d / 'train.en.dep'}:5" in msg and "example 4" in msg
    assert "piece 2 'left' does not continue word 2 'right'" in msg
    # dep and tree words disagree on a line in the middle: also found at load time (issue 14:
    # it used to surface at update 36, in a DataLoader worker)
    write_side(
        d, "train", DEP_LINES + ["He left\t2 0"] * 2, TREE_LINES + ["(S (NP (PRP She)) (VP (VBD left)))", TREE_LINES[1]]
    )
    with pytest.raises(
        ValueError,
        match=r"train\.en\.tree:4: the tree's words differ from .*"
        r"train\.en\.dep:4: token 1: parse has 'She'",
    ):
        task.load_dataset("train")


def test_task_unknown_pieces_and_truncation(tmp_path):
    d = tmp_path / "bin"
    # the source dictionary lacks "sh" and "l@@": they binarize to <unk>
    write_databin(d, {"train": (SRC_BPE, TGT)}, src_dict_words=["Bu@@", "held", "talks", "He", "left", "Hel@@", "o"])
    write_side(d, "train")
    task, _ = make_task(d)
    task.load_dataset("train")
    ds = task.dataset("train")
    assert task.src_dict.string(ds[0]["source"]) == "Bu@@ <unk> held talks"
    for i in range(3):
        dep, rp = EXPECTED_RIGHT[i]
        n = ds[i]["source"].numel()
        assert ds[i]["src_dep"].tolist() == [[bool(v) for v in row[:n]] for row in dep[:n]]
        assert ds[i]["src_rp"].tolist() == [row[:n] for row in rp[:n]]
    # --truncate-source: sources cut to 3 tokens (2 pieces + EOS); the structure follows
    d2 = tmp_path / "bin2"
    write_databin(d2, {"train": (SRC_BPE, TGT)})
    write_side(d2, "train")
    task, _ = make_task(d2, "--truncate-source", "--max-source-positions", "3")
    task.load_dataset("train")
    ds = task.dataset("train")
    assert task.src_dict.string(ds[0]["source"]) == "Bu@@ sh"
    assert ds[0]["src_dep"].tolist() == [[T_, T_, F_], [T_, T_, F_], [F_, F_, T_]]
    assert ds[0]["src_rp"].tolist() == [[0, 0, X], [0, 0, X], [X, X, 0]]


def test_task_batches_and_sequence_generator(tiny_bin):
    """fairseq's batch iterator yields the inputs; SequenceGenerator passes them to the
    encoder (every net_input key) and beam search runs unchanged."""
    from fairseq.sequence_generator import SequenceGenerator

    task, args = make_task(
        tiny_bin,
        "--encoder-layers",
        1,
        "--decoder-layers",
        1,
        "--encoder-embed-dim",
        16,
        "--decoder-embed-dim",
        16,
        "--encoder-ffn-embed-dim",
        32,
        "--decoder-ffn-embed-dim",
        32,
        "--encoder-attention-heads",
        2,
        "--decoder-attention-heads",
        2,
    )
    task.load_dataset("train")
    import pickle

    ds = task.dataset("train")
    ds[0]  # opens the memory map; pickling (DataLoader workers under spawn) must drop it
    clone = pickle.loads(pickle.dumps(ds))
    assert torch.equal(clone[0]["src_rp"], ds[0]["src_rp"]) and clone.left_pad_source
    itr = task.get_batch_iterator(ds, max_sentences=2, seed=1, num_workers=1).next_epoch_itr(shuffle=True)
    seen = []
    for batch in itr:
        net = batch["net_input"]
        bsz, T = net["src_tokens"].shape
        assert net["src_dep"].shape == net["src_rp"].shape == (bsz, T, T)
        nonpad = net["src_tokens"] != task.src_dict.pad()
        assert torch.equal(net["src_dep"].diagonal(dim1=1, dim2=2), nonpad)
        assert torch.equal(net["src_rp"].diagonal(dim1=1, dim2=2) == 0, nonpad)
        seen += batch["id"].tolist()
    assert sorted(seen) == [0, 1, 2]

    torch.manual_seed(0)
    model = task.build_model(args).eval()
    ds = task.dataset("train")
    sample = ds.collater([ds[i] for i in range(3)])
    calls = []
    original = model.encoder.forward

    def forward(src_tokens, src_lengths=None, src_dep=None, src_rp=None, **kw):
        calls.append(
            (src_tokens.shape, None if src_dep is None else src_dep.shape, None if src_rp is None else src_rp.shape)
        )
        if src_dep is not None:  # rows stay aligned with src_tokens through the generator
            assert torch.equal(src_dep.diagonal(dim1=1, dim2=2), src_tokens != task.src_dict.pad())
        return original(src_tokens, src_lengths, **kw)

    model.encoder.forward = forward
    gen = SequenceGenerator([model], task.target_dictionary, beam_size=2, max_len_b=4)
    with torch.no_grad():
        hyps = task.inference_step(gen, [model], sample)
        plain = {k: v for k, v in sample["net_input"].items() if k not in ("src_dep", "src_rp")}
        hyps_plain = task.inference_step(gen, [model], {**sample, "net_input": plain})
    assert calls[0] == (torch.Size([3, 5]), torch.Size([3, 5, 5]), torch.Size([3, 5, 5]))
    assert calls[1][1] is None
    assert len(hyps) == 3 and all(len(h) == 2 for h in hyps)
    for a, b in zip(hyps, hyps_plain):  # the extra inputs change nothing for a stock encoder
        assert [h["tokens"].tolist() for h in a] == [h["tokens"].tolist() for h in b]
    from fairseq_sparse_attn.errors import UsageError

    with pytest.raises(UsageError, match="parse_source.py"):  # one line from the fsa-* commands
        task.build_dataset_for_inference([torch.tensor([4, 2])], [2])


# ----------------------------------------------------------------- Multi30k En->De, parsed by spaCy


@needs_spacy
def test_parsed_multi30k_side_files(parsed_data):
    """The side files are parses of the tokenized English the BPE was applied to: one line
    per sentence, the same tokens, valid heads, trees over the same words."""
    for split, n in (("train", 4000), ("valid", 1014), ("test", 1000)):
        tok = (parsed_data / "tok" / f"{split}.en").read_text(encoding="utf-8").splitlines()
        dep = (parsed_data / "data-bin" / f"{split}.en.dep").read_text(encoding="utf-8").splitlines()
        tree = (parsed_data / "data-bin" / f"{split}.en.tree").read_text(encoding="utf-8").splitlines()
        assert len(tok) == len(dep) == len(tree) == n
        for k in range(0, n, 97):
            words, heads = parse_dep_line(dep[k])
            assert words == tok[k].split()
            assert sum(h == -1 for h in heads) == 1
            assert all(leaf_matches(a, b) for a, b in zip(parse_ptb(tree[k]).leaves(), words))
    assert (parsed_data / "raw" / "test.de").read_text(encoding="utf-8").count("\n") == 1000


@needs_spacy
def test_parsed_multi30k_task_against_independent_computation(parsed_data):
    """Each example's src_dep / src_rp equal the definitions applied to its parse and to the
    BPE text (word ids from the @@ markers), for all three splits; fairseq batches carry
    them aligned with src_tokens."""
    task, _ = make_task(parsed_data / "data-bin", "--source-lang", "en", "--target-lang", "de")
    for split in ("train", "valid", "test"):
        task.load_dataset(split)
        ds = task.dataset(split)
        bpe = (parsed_data / "bpe" / f"{split}.en").read_text(encoding="utf-8").splitlines()
        dep_lines = (parsed_data / "data-bin" / f"{split}.en.dep").read_text(encoding="utf-8").splitlines()
        tree_lines = (parsed_data / "data-bin" / f"{split}.en.tree").read_text(encoding="utf-8").splitlines()
        assert len(ds) == len(bpe)
        for k in list(range(0, len(ds), 53)) + [len(ds) - 1]:
            item = ds[k]
            pieces = bpe[k].split()
            ids = word_ids_from_markers(pieces)
            words, heads = parse_dep_line(dep_lines[k])
            assert item["source"].numel() == len(pieces) + 1
            assert item["src_dep"].tolist() == expand(brute_force_dep(heads), ids, False, True)
            assert item["src_rp"].tolist() == expand(brute_force_rp(parse_ptb(tree_lines[k])), ids, X, 0)
    itr = task.get_batch_iterator(task.dataset("valid"), max_tokens=1024).next_epoch_itr(shuffle=False)
    n = 0
    for batch in itr:
        net = batch["net_input"]
        bsz, T = net["src_tokens"].shape
        assert net["src_dep"].shape == (bsz, T, T) and net["src_rp"].shape == (bsz, T, T)
        nonpad = net["src_tokens"] != task.src_dict.pad()
        assert not nonpad[:, 0].all() or nonpad.all()  # left padding (fairseq's default)
        assert torch.equal(net["src_dep"].diagonal(dim1=1, dim2=2), nonpad)
        pair = nonpad[:, :, None] & nonpad[:, None, :]
        assert not net["src_dep"][~pair].any() and (net["src_rp"][~pair] == X).all()
        n += bsz
    assert n == 1014


@pytest.mark.parametrize(
    "flag, target, message",
    [
        ("--dep-out", "/proc/x/x.dep", "--dep-out /proc/x/x.dep: No such file or directory"),
        ("--dep-out", "{tmp}", "--dep-out {tmp} is a directory, not a file"),
        (
            "--tree-out",
            "{tmp}/tok.en/x.tree",
            "--tree-out {tmp}/tok.en/x.tree: {tmp}/tok.en is a file, not a directory",
        ),
    ],
)
def test_cli_an_output_that_cannot_be_written_is_one_line_before_parsing(tmp_path, capsys, flag, target, message):
    cli = load_cli()
    (tmp_path / "tok.en").write_text(TOKENS)
    (tmp_path / "d.conllu").write_text(CONLLU_3)
    argv = ["--input", str(tmp_path / "tok.en"), "--conllu", str(tmp_path / "d.conllu"), "--no-progress"]
    argv += [flag, target.format(tmp=tmp_path)]
    if flag == "--tree-out":
        argv.append("--trees-from-dependencies")
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(message.format(tmp=tmp_path))


def test_cli_dependencies_and_trees_into_one_file_is_refused(tmp_path, capsys):
    cli = load_cli()
    (tmp_path / "tok.en").write_text(TOKENS)
    (tmp_path / "d.conllu").write_text(CONLLU_3)
    same = str(tmp_path / "x.out")
    argv = ["--input", str(tmp_path / "tok.en"), "--conllu", str(tmp_path / "d.conllu"), "--no-progress"]
    with pytest.raises(SystemExit) as e:
        cli.main([*argv, "--dep-out", same, "--tree-out", same, "--trees-from-dependencies"])
    assert e.value.code == 2 and "--dep-out and --tree-out name the same file" in capsys.readouterr().err
    assert not (tmp_path / "x.out").exists()
