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
  dictionary.  Costs one pass over the index and a vectorized max over the data.
"""

import glob
import os
import struct

from ..errors import UsageError

BEHAVIOUR_CHANGE = False

MMAP_MAGIC = b"MMIDIDX\x00\x00"
CODE_TO_DTYPE = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float64",
                 7: "float64", 8: "uint16", 9: "uint32", 10: "uint64"}
HEADER = 9 + 8 + 1 + 8


class DataError(UsageError):
    """Binarized data that fairseq would misread; the message names the file."""


class DataNotFoundError(DataError, FileNotFoundError):
    """A data directory or file that is not there."""


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
                f"data directory {path!r} has no dict.<lang>.txt: is it the output folder "
                "of fairseq-preprocess?"
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
                    f"with, or re-run fairseq-preprocess)")


def dictionary_size(path):
    """Entries of a fairseq dictionary file plus its 4 special symbols."""
    with open(path, encoding="utf-8") as f:
        return 4 + sum(1 for line in f if line.strip())


def check_indexed_pair(prefix, vocab_size=None):
    """Check ``prefix.idx`` / ``prefix.bin`` (fairseq's mmap format); raise DataError."""
    import numpy as np

    idx, binf = prefix + ".idx", prefix + ".bin"
    if not os.path.isfile(binf):
        raise DataNotFoundError(f"{binf} is missing (its index {idx} is there)")
    size = os.path.getsize(idx)
    with open(idx, "rb") as f:
        head = f.read(HEADER)
    if len(head) < HEADER or head[:9] != MMAP_MAGIC:
        if head[:8] == b"TNTIDX\x00\x00":
            return  # fairseq's older 'cached'/'lazy' format: fairseq checks it itself
        raise DataError(f"{idx} is not a fairseq mmap index (header {head[:9]!r}, "
                        f"{size} bytes): re-run fairseq-preprocess")
    (version,) = struct.unpack("<Q", head[9:17])
    code = head[17]
    (n,) = struct.unpack("<Q", head[18:26])
    if version != 1 or code not in CODE_TO_DTYPE:
        raise DataError(f"{idx}: unknown index version {version} / dtype code {code}")
    if size != HEADER + 12 * n:
        raise DataError(f"{idx} is damaged: it says {n} entries, which take "
                        f"{HEADER + 12 * n} bytes, but the file has {size}")
    itemsize = np.dtype(CODE_TO_DTYPE[code]).itemsize
    sizes = np.fromfile(idx, dtype=np.int32, count=n, offset=HEADER).astype(np.int64)
    pointers = np.fromfile(idx, dtype=np.int64, count=n, offset=HEADER + 4 * n)
    if n and (sizes.min() < 0):
        bad = int(np.argmax(sizes < 0))
        raise DataError(f"{idx} is damaged: entry {bad} has length {int(sizes[bad])}")
    expected = np.concatenate([[0], np.cumsum(sizes[:-1] * itemsize)]) if n else pointers
    if n and not np.array_equal(pointers, expected):
        bad = int(np.argmax(pointers != expected))
        raise DataError(f"{idx} is damaged: entry {bad} starts at byte {int(pointers[bad])}, "
                        f"expected {int(expected[bad])} (the lengths before it add up to that)")
    needed = int(sizes.sum()) * itemsize
    have = os.path.getsize(binf)
    if have != needed:
        what = "truncated" if have < needed else "longer than its index"
        raise DataError(f"{binf} is {what}: {have} bytes, its index {idx} describes {needed}; "
                        "re-run fairseq-preprocess (or copy the file again)")
    if vocab_size is not None and needed:
        data = np.memmap(binf, dtype=CODE_TO_DTYPE[code], mode="r")
        top = int(data.max())
        if top >= vocab_size:
            raise DataError(f"{binf} holds token id {top} but its dictionary has {vocab_size} "
                            "entries: the data was binarized with another dictionary")


def check_split(data: str, split: str, src: str, tgt: str):
    """Every binarized file of ``split`` (also train1, train2, ... that fairseq combines)."""
    from fairseq import utils

    for path in utils.split_paths(data or ""):
        if "://" in path or not os.path.isdir(path):
            continue
        for idx in sorted(glob.glob(os.path.join(path, f"{glob.escape(split)}*.idx"))):
            name = os.path.basename(idx)[: -len(".idx")]
            parts = name.split(".")
            if len(parts) != 3 or parts[1] not in (f"{src}-{tgt}", f"{tgt}-{src}"):
                continue
            if parts[0] != split and not (parts[0][len(split):].isdigit()
                                          and parts[0].startswith(split)):
                continue
            lang = parts[2]
            dict_path = os.path.join(path, f"dict.{lang}.txt")
            vocab = dictionary_size(dict_path) if os.path.isfile(dict_path) else None
            check_indexed_pair(idx[: -len(".idx")], vocab)


def install_data_dir_check():
    from fairseq.data import data_utils
    from fairseq.tasks.translation import TranslationTask

    original = TranslationTask.setup_task.__func__
    if getattr(original, "_fsa_checked", False):
        return

    def setup_task(cls, cfg, **kwargs):
        data = getattr(cfg, "data", None)
        check_data_dirs(data)
        src, tgt = getattr(cfg, "source_lang", None), getattr(cfg, "target_lang", None)
        if (src is None or tgt is None) and data:
            from fairseq import utils

            src, tgt = data_utils.infer_language_pair(utils.split_paths(data)[0])
        if src is None or tgt is None:
            raise DataError(f"could not infer the language pair from the files in {data!r}: "
                            "pass --source-lang and --target-lang")
        check_dictionaries(data, (src, tgt))
        return original(cls, cfg, **kwargs)

    setup_task._fsa_checked = True
    TranslationTask.setup_task = classmethod(setup_task)

    original_load = TranslationTask.load_dataset

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        check_split(self.cfg.data, split, self.cfg.source_lang, self.cfg.target_lang)
        return original_load(self, split, epoch=epoch, combine=combine, **kwargs)

    TranslationTask.load_dataset = load_dataset


install = install_data_dir_check
