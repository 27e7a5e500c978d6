"""Binarized data checked before any work starts, with one-line errors naming the file
(:class:`DataError`).  Without them, fairseq fails deep inside (a truncated ``.bin``:
``offset must be non-negative``, no file named), or not at all: a corrupt ``.idx``
(64 bytes overwritten) trained one update, then grew to 22 GB and was killed by the kernel.

- the data directory exists and holds ``dict.<lang>.txt`` for both languages
  (``TranslationTask.setup_task``, also the plugin's tasks, which derive from it);
- each ``.idx``/``.bin`` pair of a split, when the split is loaded
  (``TranslationTask.load_dataset``): the index header (magic, version, dtype), the index
  size for its entry count, sizes >= 0, pointers contiguous from 0, the ``.bin`` size equal
  to the data the index describes, and every token id below the size of the language's
  dictionary.  Costs one pass over the index and a vectorized max over the data;
- each dictionary file (``setup_task``): every line ``<symbol> <count> [#fairseq:overwrite]``
  and no symbol twice (fairseq: a RuntimeError naming no file);
- each split (``load_dataset``): present, not empty, both sides with the same number of
  sentences (fairseq: an AssertionError), and no special symbol inside a sentence: no
  ``<s>`` / ``<pad>`` anywhere, ``</s>`` only as the last token that fairseq-preprocess
  appends (a raw line holding the text ``</s>`` or ``<pad>`` is binarized to those ids, and
  the model then trained on padding and sentence ends in mid-sentence, silently);
- a checkpoint whose embeddings do not fit the data's dictionaries (``load_state_dict``
  of a model built by a translation task): one line naming the dictionary file and both
  sizes instead of torch's ``size mismatch for encoder.embed_tokens.weight``.
"""

import glob
import os
import struct

from ..errors import DataError, DataNotFoundError

BEHAVIOUR_CHANGE = False

MMAP_MAGIC = b"MMIDIDX\x00\x00"
CODE_TO_DTYPE = {
    1: "uint8",
    2: "int8",
    3: "int16",
    4: "int32",
    5: "int64",
    6: "float64",
    7: "float64",
    8: "uint16",
    9: "uint32",
    10: "uint64",
}
HEADER = 9 + 8 + 1 + 8


def check_data_dirs(data: str):
    """Clear error for a translation data directory that does not exist or is empty."""
    from fairseq import utils

    for path in utils.split_paths(data or ""):
        if "://" in path:  # remote storage handled by fairseq's PathManager
            continue
        if not os.path.isdir(path):
            raise DataNotFoundError(
                f"data directory {path!r} does not exist: expected the output folder of "
                "fairseq-preprocess (dict.<lang>.txt, <split>.<src>-<tgt>.<lang>.bin/.idx)"
            )
        if not any(f.startswith("dict.") and f.endswith(".txt") for f in os.listdir(path)):
            raise DataNotFoundError(
                f"data directory {path!r} has no dict.<lang>.txt: is it the output folder of fairseq-preprocess?"
            )


def check_dictionaries(data: str, langs):
    from fairseq import utils

    for path in utils.split_paths(data or ""):
        if "://" in path:
            continue
        for lang in langs:
            if lang and not os.path.isfile(os.path.join(path, f"dict.{lang}.txt")):
                raise DataNotFoundError(
                    f"{os.path.join(path, f'dict.{lang}.txt')} is missing: fairseq-preprocess "
                    f"writes one dictionary per language (copy it from the data you binarized "
                    f"with, or re-run fairseq-preprocess)"
                )


def check_dictionary_file(path):
    """Each line ``<symbol> <count>`` (optionally `` #fairseq:overwrite``), no symbol twice
    and none of fairseq's special symbols (both make fairseq's loader raise RuntimeError,
    naming no file)."""
    from fairseq.data import Dictionary

    seen = {s: 0 for s in Dictionary().symbols}  # line 0 = fairseq's built-in specials
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except UnicodeDecodeError as e:
        raise DataError(f"{path} is not UTF-8 ({e.reason} at byte {e.start}): re-run fairseq-preprocess") from None
    for number, line in enumerate(lines, 1):
        line = line.rstrip()
        if not line:
            continue
        parts = line.rsplit(" ", 1)
        overwrite = len(parts) == 2 and parts[1] == "#fairseq:overwrite"
        if overwrite:
            parts = parts[0].rsplit(" ", 1)
        if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
            raise DataError(f"{path}:{number}: expected '<symbol> <count>', got {line[:80]!r}")
        symbol = parts[0]
        if symbol in seen and not overwrite:
            where = (
                f"fairseq's special symbol {symbol!r}"
                if seen[symbol] == 0
                else f"{symbol!r}, already on line {seen[symbol]}"
            )
            raise DataError(
                f"{path}:{number}: duplicate symbol {where}: a dictionary lists "
                "each symbol once (rebuild it with fairseq-preprocess, or mark an "
                "intended replacement with ' #fairseq:overwrite')"
            )
        seen[symbol] = number


def dictionary_size(path):
    """Entries of a fairseq dictionary file plus its 4 special symbols."""
    with open(path, encoding="utf-8") as f:
        return 4 + sum(1 for line in f if line.strip())


def special_ids():
    """(bos, pad, eos) of a fairseq dictionary (fairseq-preprocess always writes them
    first: 0, 1, 2)."""
    from fairseq.data import Dictionary

    d = Dictionary()
    return d.bos(), d.pad(), d.eos()


def check_special_ids(binf, data, starts, sizes):
    """No ``<s>``/``<pad>`` anywhere and ``</s>`` only at the end of a sentence, in the
    token ids ``data`` whose sentences start at ``starts`` (in tokens) with ``sizes``."""
    import numpy as np
    from fairseq.data import Dictionary

    bos, pad, eos = special_ids()
    ids = sorted((bos, pad, eos))
    if ids == list(range(ids[0], ids[0] + 3)):  # fairseq's 0, 1, 2: one comparison pass
        special = (data >= ids[0]) & (data <= ids[2]) if ids[0] else data <= ids[2]
    else:
        special = (data == bos) | (data == pad) | (data == eos)
    ends = (starts + sizes - 1)[sizes > 0]
    end_is_eos = data[ends] == eos
    if int(special.sum()) == int(end_is_eos.sum()):  # only the appended end of sentence
        return
    special[ends[end_is_eos]] = False
    bad = np.flatnonzero(special)
    at = int(bad[0])
    sentence = int(np.searchsorted(starts, at, side="right")) - 1
    token = at - int(starts[sentence])
    symbol = Dictionary().symbols[int(data[at])]
    raise DataError(
        f"{binf}: sentence {sentence} (line {sentence + 1} of the text it was binarized from) "
        f"holds the special symbol {symbol!r} (id {int(data[at])}) at token {token}"
        f"{f', and {len(bad) - 1} more special ids inside sentences' if len(bad) > 1 else ''}: "
        "the text contains that symbol literally; remove or escape it and re-run "
        "fairseq-preprocess"
    )


def check_indexed_pair(prefix, vocab_size=None):
    """Check ``prefix.idx`` / ``prefix.bin`` (fairseq's mmap format); raise DataError.
    Returns the number of sentences (None for fairseq's older formats)."""
    import numpy as np

    idx, binf = prefix + ".idx", prefix + ".bin"
    if not os.path.isfile(binf):
        raise DataNotFoundError(f"{binf} is missing (its index {idx} is there)")
    size = os.path.getsize(idx)
    with open(idx, "rb") as f:
        head = f.read(HEADER)
    if len(head) < HEADER or head[:9] != MMAP_MAGIC:
        if head[:8] == b"TNTIDX\x00\x00":
            return None  # fairseq's older 'cached'/'lazy' format: fairseq checks it itself
        raise DataError(
            f"{idx} is not a fairseq mmap index (header {head[:9]!r}, {size} bytes): re-run fairseq-preprocess"
        )
    (version,) = struct.unpack("<Q", head[9:17])
    code = head[17]
    (n,) = struct.unpack("<Q", head[18:26])
    if version != 1 or code not in CODE_TO_DTYPE:
        raise DataError(f"{idx}: unknown index version {version} / dtype code {code}")
    if size != HEADER + 12 * n:
        raise DataError(
            f"{idx} is damaged: it says {n} entries, which take {HEADER + 12 * n} bytes, but the file has {size}"
        )
    itemsize = np.dtype(CODE_TO_DTYPE[code]).itemsize
    sizes = np.fromfile(idx, dtype=np.int32, count=n, offset=HEADER).astype(np.int64)
    pointers = np.fromfile(idx, dtype=np.int64, count=n, offset=HEADER + 4 * n)
    if n and (sizes.min() < 0):
        bad = int(np.argmax(sizes < 0))
        raise DataError(f"{idx} is damaged: entry {bad} has length {int(sizes[bad])}")
    expected = np.concatenate([[0], np.cumsum(sizes[:-1] * itemsize)]) if n else pointers
    if n and not np.array_equal(pointers, expected):
        bad = int(np.argmax(pointers != expected))
        raise DataError(
            f"{idx} is damaged: entry {bad} starts at byte {int(pointers[bad])}, "
            f"expected {int(expected[bad])} (the lengths before it add up to that)"
        )
    needed = int(sizes.sum()) * itemsize
    have = os.path.getsize(binf)
    if have != needed:
        what = "truncated" if have < needed else "longer than its index"
        raise DataError(
            f"{binf} is {what}: {have} bytes, its index {idx} describes {needed}; "
            "re-run fairseq-preprocess (or copy the file again)"
        )
    if needed:
        data = np.memmap(binf, dtype=CODE_TO_DTYPE[code], mode="r")
        top = int(data.max())
        if vocab_size is not None and top >= vocab_size:
            raise DataError(
                f"{binf} holds token id {top} but its dictionary has {vocab_size} "
                "entries: the data was binarized with another dictionary"
            )
        check_special_ids(binf, data, pointers // itemsize, sizes)
    return n


def check_split(data: str, split: str, src: str, tgt: str, epoch: int = 1):
    """Every binarized file of ``split`` (also train1, train2, ... that fairseq combines)
    in every data path: each pair sound, both sides of a part with the same number of
    sentences; and in the path fairseq reads at ``epoch`` (one per epoch, round robin) the
    split present and not empty."""
    from fairseq import utils

    paths = utils.split_paths(data or "")
    for i, path in enumerate(paths):
        if "://" in path or not os.path.isdir(path):
            continue
        counts = {}  # part name -> {lang: (idx path, sentences)}
        for idx in sorted(glob.glob(os.path.join(path, f"{glob.escape(split)}*.idx"))):
            name = os.path.basename(idx)[: -len(".idx")]
            parts = name.split(".")
            if len(parts) != 3 or parts[1] not in (f"{src}-{tgt}", f"{tgt}-{src}"):
                continue
            if parts[0] != split and not (parts[0][len(split) :].isdigit() and parts[0].startswith(split)):
                continue
            lang = parts[2]
            dict_path = os.path.join(path, f"dict.{lang}.txt")
            vocab = dictionary_size(dict_path) if os.path.isfile(dict_path) else None
            n = check_indexed_pair(idx[: -len(".idx")], vocab)
            if n is not None:
                counts.setdefault(f"{parts[0]}.{parts[1]}", {})[lang] = (idx, n)
        _check_split_counts(path, split, src, tgt, counts, (epoch - 1) % len(paths) == i)


def _check_split_counts(path, split, src, tgt, counts, required):
    for sides in counts.values():
        if len(sides) == 2:
            (a, na), (b, nb) = sides[src], sides[tgt]
            if na != nb:
                raise DataError(
                    f"{a} has {na} sentences but {b} has {nb}: the source and "
                    "target of a split must be line-aligned (check the two text "
                    "files have the same number of lines, then re-run "
                    "fairseq-preprocess)"
                )
    own = counts.get(f"{split}.{src}-{tgt}") or counts.get(f"{split}.{tgt}-{src}")
    if own is None:
        if required and not any(
            os.path.basename(f).startswith(split + ".") for f in os.listdir(path)
        ):  # older formats / raw text: fairseq's own errors
            raise DataNotFoundError(
                f"split '{split}' not found in {path}: expected {split}.{src}-{tgt}.{src}.idx "
                f"(and .bin, and the {tgt} side) from fairseq-preprocess "
                f"--{'trainpref' if split == 'train' else 'validpref' if split == 'valid' else 'testpref'}"
            )
        return
    (idx, n) = next(iter(own.values()))
    if n == 0:
        raise DataError(
            f"{idx} holds no sentences: split '{split}' is empty (was the text file empty when fairseq-preprocess ran?)"
        )


#: state-dict keys whose first dimension is a dictionary's size: (key, side)
EMBEDDING_KEYS = (
    ("encoder.embed_tokens.weight", "source"),
    ("decoder.embed_tokens.weight", "target"),
    ("decoder.output_projection.weight", "target"),
)


def check_embedding_sizes(state_dict, dictionary_sizes, dictionary_files):
    """The checkpoint's embedding rows equal the size of the data's dictionary on each
    side (``dictionary_sizes`` / ``dictionary_files``: {"source"|"target": ...})."""
    for key, side in EMBEDDING_KEYS:
        weight = state_dict.get(key)
        size = dictionary_sizes.get(side)
        if weight is None or size is None or weight.dim() < 1 or weight.size(0) == size:
            continue
        raise DataError(
            f"{dictionary_files.get(side, f'the {side} dictionary')} has {size} entries (with "
            f"the 4 special symbols) but the checkpoint's {key} has {weight.size(0)} rows: the "
            "data was binarized with other dictionaries than the model was trained on (use "
            "the model's data-bin, or fairseq-preprocess --srcdict/--tgtdict with its "
            "dictionaries)"
        )


def install_data_dir_check():
    from fairseq.data import data_utils
    from fairseq.tasks.translation import TranslationTask

    original = TranslationTask.setup_task.__func__
    if getattr(original, "_fsa_checked", False):
        return

    def setup_task(cls, cfg, **kwargs):
        from fairseq import utils

        data = getattr(cfg, "data", None)
        check_data_dirs(data)
        src, tgt = getattr(cfg, "source_lang", None), getattr(cfg, "target_lang", None)
        if (src is None or tgt is None) and data:
            src, tgt = data_utils.infer_language_pair(utils.split_paths(data)[0])
        if src is None or tgt is None:
            raise DataError(
                f"could not infer the language pair from the files in {data!r}: pass --source-lang and --target-lang"
            )
        check_dictionaries(data, (src, tgt))
        for path in utils.split_paths(data):
            for lang in (src, tgt):
                if "://" not in path:
                    check_dictionary_file(os.path.join(path, f"dict.{lang}.txt"))
        return original(cls, cfg, **kwargs)

    setup_task._fsa_checked = True
    TranslationTask.setup_task = classmethod(setup_task)

    original_load = TranslationTask.load_dataset

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        check_split(self.cfg.data, split, self.cfg.source_lang, self.cfg.target_lang, epoch)
        return original_load(self, split, epoch=epoch, combine=combine, **kwargs)

    TranslationTask.load_dataset = load_dataset

    original_build = TranslationTask.build_model

    def build_model(self, cfg, *args, **kwargs):
        model = original_build(self, cfg, *args, **kwargs)
        paths = utils_split(self.cfg.data)
        if paths:
            model._fsa_dictionaries = {
                side: (len(d), os.path.join(paths[0], f"dict.{lang}.txt"))
                for side, d, lang in (
                    ("source", self.source_dictionary, self.cfg.source_lang),
                    ("target", self.target_dictionary, self.cfg.target_lang),
                )
                if d is not None and lang
            }
        return model

    TranslationTask.build_model = build_model

    from fairseq.models.fairseq_model import BaseFairseqModel

    original_state = BaseFairseqModel.load_state_dict

    def load_state_dict(self, state_dict, *args, **kwargs):
        dictionaries = getattr(self, "_fsa_dictionaries", None)
        if dictionaries:
            check_embedding_sizes(
                state_dict, {k: v[0] for k, v in dictionaries.items()}, {k: v[1] for k, v in dictionaries.items()}
            )
        return original_state(self, state_dict, *args, **kwargs)

    BaseFairseqModel.load_state_dict = load_state_dict


def utils_split(data):
    from fairseq import utils

    return [p for p in utils.split_paths(data or "") if "://" not in p]


install = install_data_dir_check
