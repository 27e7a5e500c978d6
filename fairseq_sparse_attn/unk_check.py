"""No silent ``<unk>``: ``fsa-interactive`` and ``fsa-generate`` say when their input does
not fit the model's vocabulary.

A model trained on BPE input, given plain words (``fsa-interactive`` without ``--bpe
subword_nmt --bpe-codes ...``, or with another codes file), sees ``<unk>`` for every word
outside its vocabulary and translates that without complaint.  Two checks, each one line on
stderr (``fsa-interactive: warning: ...``), the run goes on:

- **the codes**: checkpoints record the BPE codes they were trained with (path and sha256,
  ``fsa_record["bpe"]``, :func:`codes_record`: the ``--bpe-codes`` given to ``fsa-train``,
  else ``bpe/codes`` beside the data-bin, where ``data_prep/`` writes them).  Before the
  first translation, ``fsa-interactive`` without ``--bpe`` on such a model, or either command with
  ``--bpe-codes`` of another content than the recorded one, is told so, naming the codes;
- **the input**: an input (``fsa-interactive``: each line; ``fsa-generate``: the first
  sentence of the run, later ones are not reported) with more than a third of its words
  mapped to ``<unk>`` is named with those words and the likely cause.

A word is a whitespace word of the text the model reads (after ``--tokenizer`` / ``--bpe``;
subword pieces ending in ``@@`` continue into the next) and maps to ``<unk>`` when one of
its pieces does.
"""

import functools
import hashlib
import os
import sys

UNK_SHARE = 1 / 3  # warn when more than this share of an input's words is <unk>
CONTINUATION = "@@"


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def codes_record(bpe_codes=None, data=None):
    """``{"path", "sha256"}`` of the BPE codes a model is trained with: ``bpe_codes`` (the
    ``--bpe-codes`` given), else ``bpe/codes`` beside the (first) data-bin, the layout of
    ``data_prep/``, where they are the codes of that data-bin (:func:`codes_fit_data`: a
    word-level data-bin, or one made with other codes, beside them records none); None when
    there are none."""
    path = bpe_codes
    if not path and data:
        first = str(data).split(os.pathsep)[0]
        path = os.path.join(os.path.dirname(os.path.abspath(first)), "bpe", "codes")
        if os.path.isfile(path) and not codes_fit_data(path, first):
            return None
    if not path or not os.path.isfile(path):
        return None
    return {"path": os.path.abspath(path), "sha256": file_sha256(path)}


#: :func:`codes_fit_data`: at most this share of the dictionary's pieces may be outside
#: what the codes make, and at least this share of their last merges' pieces must be used
MAX_UNMADE_PIECES = 0.01
MIN_LAST_MERGES_USED = 0.5


def _dictionary_pieces(data):
    pieces = set()
    for name in sorted(os.listdir(data)) if os.path.isdir(data) else ():
        if name.startswith("dict.") and name.endswith(".txt"):
            with open(os.path.join(data, name), encoding="utf-8", errors="replace") as f:
                pieces.update(line.split(" ", 1)[0] for line in f if line.strip())
    # fairseq-preprocess pads a dictionary to a multiple of 8 with these (--padding-factor)
    return {p for p in pieces if not p.startswith("madeupword")}


def codes_fit_data(codes, data):
    """Whether the subword-nmt ``codes`` are those the data-bin ``data`` was segmented with,
    as far as its dictionaries tell: they hold continuation pieces (``@@``: the data is
    BPE), nearly every multi-character piece is one the codes make (codes of fewer merges
    make fewer), and the pieces of the codes' last tenth of merges occur (codes of more
    merges make pieces the data never had)."""
    pieces = _dictionary_pieces(data)
    if not any(p.endswith(CONTINUATION) for p in pieces):
        return False
    made, merges = set(), []
    with open(codes, encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.split()
            if len(parts) != 2 or line.startswith("#version"):
                continue
            product = parts[0] + parts[1]
            piece = product[: -len("</w>")] if product.endswith("</w>") else product + CONTINUATION
            made.add(piece)
            merges.append(piece)
    if not merges:
        return False
    longer = [p for p in pieces if len(p[: -len(CONTINUATION)] if p.endswith(CONTINUATION) else p) > 1]
    unmade = sum(1 for p in longer if p not in made)
    last = merges[-max(1, len(merges) // 10) :]
    used = sum(1 for p in last if p in pieces)
    return unmade <= MAX_UNMADE_PIECES * max(1, len(longer)) and used >= MIN_LAST_MERGES_USED * len(last)


def unknown_words(pieces, is_unk):
    """(words mapped to <unk>, number of words) of a list of pieces."""
    words, unknown, word, unk = 0, [], [], False
    for piece in pieces:
        word.append(piece)
        unk = unk or is_unk(piece)
        if not piece.endswith(CONTINUATION):
            words += 1
            if unk:
                unknown.append("".join(p[: -len(CONTINUATION)] if p.endswith(CONTINUATION) else p for p in word))
            word, unk = [], False
    if word:
        words += 1
        if unk:
            unknown.append("".join(word))
    return unknown, words


def too_many_unknown(unknown, words):
    return words > 0 and len(unknown) > UNK_SHARE * words


class InputCheck:
    """The two checks of one ``fsa-interactive`` / ``fsa-generate`` run.  ``bpe`` and
    ``bpe_codes``: the command's ``--bpe`` / ``--bpe-codes``; ``records``: the
    ``fsa_record`` of each checkpoint read, by path (:mod:`compat.checkpoint_record`)."""

    def __init__(self, command, bpe=None, bpe_codes=None, records=None, stream=None):
        self.command, self.bpe, self.bpe_codes = command, bpe, bpe_codes
        self.records = records if records is not None else {}
        self.stream = stream
        self.started = False
        self.reported = 0

    def warn(self, message):
        print(f"{self.command}: warning: {message}", file=self.stream or sys.stderr, flush=True)

    def trained_codes(self):
        """(checkpoint path, its recorded codes) of the first checkpoint that has them."""
        for path, record in self.records.items():
            codes = (record or {}).get("bpe")
            if codes:
                return path, codes
        return None, None

    def codes_differ(self, codes):
        return bool(self.bpe_codes) and (
            not os.path.isfile(self.bpe_codes) or file_sha256(self.bpe_codes) != codes.get("sha256")
        )

    def start(self):
        """Before the first translation: the codes given against the recorded ones."""
        if self.started:
            return
        self.started = True
        path, codes = self.trained_codes()
        if codes is None:
            return
        if self.codes_differ(codes):
            self.warn(
                f"--bpe-codes {self.bpe_codes} is not the codes file {path} was trained with "
                f"({codes['path']}, sha256 {codes['sha256'][:12]}): words are split into other pieces "
                f"than the model learned; pass --bpe-codes {codes['path']}"
            )
        elif not self.bpe and self.command == "fsa-interactive":
            self.warn(
                f"{path} was trained on BPE input ({codes['path']}) but no --bpe is given: words outside "
                f"its vocabulary become <unk>; pass --bpe subword_nmt --bpe-codes {codes['path']}"
            )

    def likely_cause(self):
        path, codes = self.trained_codes()
        if not self.bpe:
            if codes:
                return f"no --bpe/--bpe-codes given, and the model was trained on BPE input ({codes['path']})"
            return "no --bpe/--bpe-codes given: a model trained on BPE input needs its codes file"
        if codes and self.codes_differ(codes):
            return f"--bpe-codes {self.bpe_codes} is not the model's codes file ({codes['path']})"
        return (
            "a different codes file than the model's, or input in another language or tokenization "
            "than the model's source side"
        )

    def check(self, where, pieces, is_unk):
        """Warn when more than a third of the words of ``pieces`` are <unk>."""
        unknown, words = unknown_words(pieces, is_unk)
        if not too_many_unknown(unknown, words):
            return False
        shown = ", ".join(unknown[:5]) + (", ..." if len(unknown) > 5 else "")
        self.reported += 1
        self.warn(
            f"{where}: {len(unknown)} of its {words} words map to <unk> ({shown}); likely cause: "
            f"{self.likely_cause()}; the translation will be poor"
        )
        return True


def interactive_make_batches(original, check):
    """``make_batches`` of ``fairseq_cli.interactive`` that checks each line first."""

    @functools.wraps(original)
    def make_batches(lines, cfg, task, max_positions, encode_fn):
        check.start()
        dictionary = task.source_dictionary
        unk = dictionary.unk()
        for i, line in enumerate(lines):
            if getattr(line, "problem", None) is None and line.strip():
                number = getattr(line, "number", i + 1)
                check.check(f"input line {number}", encode_fn(line).split(), lambda p: dictionary.index(p) == unk)
        yield from original(lines, cfg, task, max_positions, encode_fn)

    make_batches._fsa_unk = True
    return make_batches


def generate_inference_step(task, check):
    """Wrap ``task.inference_step`` (this task only): the sentences of each batch are checked
    until the first one is reported."""
    original = task.inference_step
    dictionary = task.source_dictionary

    @functools.wraps(original)
    def inference_step(generator, models, sample, *args, **kwargs):
        check.start()
        if check.reported == 0 and sample is not None and "net_input" in sample:
            special = {dictionary.pad(), dictionary.eos(), dictionary.bos()}
            for sid, tokens in zip(sample["id"].tolist(), sample["net_input"]["src_tokens"].tolist()):
                pieces = [dictionary[t] for t in tokens if t not in special]
                where = f"sentence {sid} (S-{sid}; later sentences are not checked)"
                if check.check(where, pieces, lambda p: p == dictionary.unk_word):
                    break
        return original(generator, models, sample, *args, **kwargs)

    task.inference_step = inference_step
    return task


def install(command, bpe=None, bpe_codes=None, records=None, stream=None):
    """Install the checks for ``fsa-interactive`` / ``fsa-generate`` run with ``--bpe`` /
    ``--bpe-codes``; ``records``: the ``fsa_record`` of each checkpoint read, by path, filled
    as they are read (``compat.checkpoint_record.LOADED_RECORDS``)."""
    check = InputCheck(command, bpe=bpe, bpe_codes=bpe_codes, records=records, stream=stream)
    if command == "fsa-interactive":
        import fairseq_cli.interactive as interactive

        if not getattr(interactive.make_batches, "_fsa_unk", False):
            interactive.make_batches = interactive_make_batches(interactive.make_batches, check)
    else:
        from fairseq import tasks

        original_setup = tasks.setup_task

        @functools.wraps(original_setup)
        def setup_task(cfg, **kwargs):
            return generate_inference_step(original_setup(cfg, **kwargs), check)

        tasks.setup_task = setup_task
    return check
