"""Checkpoints record what their token ids mean and how their attention computes.

A data-bin whose dictionaries have the same size as the model's but other content
translated into garbage without complaint (issue 24): the ids fit the embedding table,
they just mean other words.  Every checkpoint the trainer saves now carries

    state["fsa_record"] = {"version": 1,
                           "dictionaries": {"source": {"lang", "size", "sha256"},
                                            "target": {...}},
                           "attention": {plugin option: value},
                           "bpe": {"path", "sha256"}}  # when known (unk_check.codes_record)

(``sha256`` of the dictionary's symbols in id order: what the ids mean; counts do not
matter; ``attention``: the plugin's model options, a stock fairseq model's as the softmax
values they compute).  Every load of a checkpoint for a task (``fsa-generate``,
``fsa-validate``, ``fsa-interactive``, ``load_model_ensemble``, a training restart)
compares the task's dictionaries with the record right after reading the checkpoint,
before the model is built (``fsa-validate``, whose task fairseq sets up from the
checkpoint: once it is built, before any batch): a difference is one line naming the data-bin dictionary and the
checkpoint.  A checkpoint without a record (older plugin versions, stock fairseq) is loaded
as before.
"""

import contextvars
import functools
import hashlib
import logging
import os

from ..errors import DictionaryMismatch

BEHAVIOUR_CHANGE = True
RECORD_KEY = "fsa_record"
VERSION = 1

logger = logging.getLogger(__name__)


def dictionary_digest(dictionary):
    """sha256 of the symbols in id order (what each id means)."""
    h = hashlib.sha256()
    for symbol in dictionary.symbols:
        h.update(symbol.encode("utf-8", "surrogatepass"))
        h.update(b"\n")
    return h.hexdigest()


def _task_dictionaries(task):
    """{"source": (lang, Dictionary), "target": ...} of a translation-like task."""
    out = {}
    cfg = getattr(task, "cfg", None)
    for side in ("source", "target"):
        try:
            dictionary = getattr(task, f"{side}_dictionary")
        except (NotImplementedError, AttributeError):
            dictionary = None
        if dictionary is not None and hasattr(dictionary, "symbols"):
            out[side] = (getattr(cfg, f"{side}_lang", None), dictionary)
    return out


def dictionaries_record(task):
    return {
        side: {"lang": lang, "size": len(d), "sha256": dictionary_digest(d)}
        for side, (lang, d) in _task_dictionaries(task).items()
    }


def attention_record(model_cfg):
    """The plugin's model options of ``model_cfg``; a stock model's are the softmax values."""
    from .resume_config_check import plugin_model_options

    return plugin_model_options(model_cfg)


def build_record(task, model_cfg, bpe_cfg=None):
    record = {"version": VERSION, "dictionaries": dictionaries_record(task)}
    try:  # the BPE codes: checked by fsa-interactive / fsa-generate (unk_check.py)
        from ..unk_check import codes_record

        codes = codes_record(getattr(bpe_cfg, "bpe_codes", None), getattr(getattr(task, "cfg", None), "data", None))
        if codes:
            record["bpe"] = codes
    except Exception as e:
        logger.debug(f"no BPE codes recorded: {e}")
    try:
        record["attention"] = attention_record(model_cfg)
    except Exception as e:  # a record without attention options is still useful
        logger.debug(f"no attention options recorded: {e}")
    return record


def _dictionary_file(task, side, lang):
    cfg = getattr(task, "cfg", None)
    data = getattr(cfg, "data", None)
    if not data:
        return f"the task's {side} dictionary"
    first = str(data).split(os.pathsep)[0]
    path = os.path.join(first, f"dict.{lang}.txt") if lang else None
    return path if path and os.path.exists(path) else f"the {side} dictionary of {first}"


def check_dictionaries(path, state, task):
    """DictionaryMismatch when ``task``'s dictionaries differ from those recorded in the
    checkpoint ``state`` read from ``path``; nothing to check without a record."""
    record = state.get(RECORD_KEY) if isinstance(state, dict) else None
    saved = (record or {}).get("dictionaries") or {}
    dictionaries = _task_dictionaries(task)
    check_direction(path, *_trained_languages(state, saved), {side: lang for side, (lang, _) in dictionaries.items()})
    for side, (lang, dictionary) in dictionaries.items():
        want = saved.get(side)
        if not want:
            continue
        digest = dictionary_digest(dictionary)
        if digest == want.get("sha256"):
            continue
        where = _dictionary_file(task, side, lang)
        if len(dictionary) == want.get("size"):
            how = (
                f"both have {len(dictionary)} entries, but other symbols or another order "
                f"(sha256 {digest[:12]} vs {str(want.get('sha256'))[:12]})"
            )
        else:
            how = f"it has {len(dictionary)} entries, the checkpoint's had {want.get('size')}"
        raise DictionaryMismatch(
            f"{where} is not the {side} dictionary {path} was trained with: {how}; the ids "
            "would mean other words. Use the data-bin the model was trained on (or binarize "
            "with fairseq-preprocess --srcdict/--tgtdict of its dictionaries)"
        )


def _trained_languages(state, saved):
    """({"source": lang, "target": lang}, where they come from): the record's languages;
    for a checkpoint without a record (stock fairseq's, an older one's) those of the task
    it saved (``cfg.task``, or ``args`` of a pre-hydra checkpoint); None where unknown."""
    recorded = {side: (saved.get(side) or {}).get("lang") for side in ("source", "target")}
    if None not in recorded.values():
        return recorded, "recorded"
    task = None
    if isinstance(state, dict):
        cfg = state.get("cfg")
        try:
            task = cfg.get("task") if cfg is not None else None
        except (AttributeError, TypeError):
            task = None
        if task is None and state.get("args") is not None:
            task = vars(state["args"])
    if task is None:
        return recorded, "recorded"
    langs = {side: task.get(f"{side}_lang") if hasattr(task, "get") else None for side in ("source", "target")}
    return langs, "saved task's"


def check_direction(path, trained, where, langs):
    """DictionaryMismatch when the task's languages are the checkpoint's (``trained``, from
    ``where``: its record, or its saved task's) swapped (``-s de -t en`` for a model
    trained en->de): with a joined dictionary the ids still match, and the model would
    translate from its own target language with nothing said.  Other names (a test set
    binarized as ``deu``/``eng`` with the model's dictionaries) are allowed."""
    source, target = langs.get("source"), langs.get("target")
    if None in (trained["source"], trained["target"]) or trained["source"] == trained["target"]:
        return
    if source == trained["target"] or target == trained["source"]:
        raise DictionaryMismatch(
            f"-s {source} -t {target}: {path} was trained {trained['source']}->{trained['target']} "
            f"(its {where} source language is {trained['source']}); give -s {trained['source']} "
            f"-t {trained['target']}, or a model of the other direction"
        )


LOADED_RECORDS = {}  # path -> fsa_record of every checkpoint read in this process (unk_check)

_TASK = contextvars.ContextVar("fsa_checkpoint_task", default=None)
_READ = contextvars.ContextVar("fsa_checkpoints_read", default=None)


def install():
    from fairseq import checkpoint_utils
    from fairseq.trainer import Trainer

    if getattr(Trainer.state_dict, "_fsa_record", False):
        return

    original_state_dict = Trainer.state_dict

    @functools.wraps(original_state_dict)
    def state_dict(self):
        state = original_state_dict(self)
        if self.task is not None:
            state[RECORD_KEY] = build_record(self.task, self.cfg.model, getattr(self.cfg, "bpe", None))
        return state

    state_dict._fsa_record = True
    Trainer.state_dict = state_dict

    # the check, right after a checkpoint is read for a task (before the model is built)
    original_ensemble = checkpoint_utils.load_model_ensemble_and_task

    @functools.wraps(original_ensemble)
    def load_model_ensemble_and_task(filenames, arg_overrides=None, task=None, *args, **kwargs):
        read = []  # (path, state) of every checkpoint read, for a task built from them
        token, read_token = _TASK.set(task), _READ.set(read)
        try:
            result = original_ensemble(filenames, arg_overrides, task, *args, **kwargs)
        finally:
            _TASK.reset(token)
            _READ.reset(read_token)
        if task is None:  # fairseq-validate: the task is set up from the first checkpoint
            for path, state in read:
                check_dictionaries(path, state, result[2])
        return result

    checkpoint_utils.load_model_ensemble_and_task = load_model_ensemble_and_task

    original_load = Trainer.load_checkpoint

    @functools.wraps(original_load)
    def load_checkpoint(self, *args, **kwargs):
        token = _TASK.set(self.task)
        try:
            return original_load(self, *args, **kwargs)
        finally:
            _TASK.reset(token)

    Trainer.load_checkpoint = load_checkpoint

    original_to_cpu = checkpoint_utils.load_checkpoint_to_cpu

    @functools.wraps(original_to_cpu)
    def load_checkpoint_to_cpu(path, *args, **kwargs):
        state = original_to_cpu(path, *args, **kwargs)
        if isinstance(state, dict):
            LOADED_RECORDS[path] = state.get(RECORD_KEY)
        task = _TASK.get()
        if task is not None:
            check_dictionaries(path, state, task)
        elif _READ.get() is not None:
            _READ.get().append((path, {RECORD_KEY: state.get(RECORD_KEY)}))
        return state

    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu
