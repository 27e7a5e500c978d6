"""``--task document_translation``: translation of packed documents (ReLUFormer Sec. 4.3).

The data-bin is made by ``data_prep/prepare_europarl_docs.py`` (or any tool writing the
same ``doc_info.json``): one packed document per line, sentences joined (optionally with
a separator token).  The task

* checks that ``--max-doc-length`` equals the L the data was packed with (a model trained
  on L=256 documents evaluated on L=1024 documents would silently truncate positions);
* raises the model's ``max_source_positions`` / ``max_target_positions`` to hold the
  longest packed document (L, or a longer single sentence kept whole) plus EOS;
* otherwise is fairseq's translation task: batching, generation and scoring are whole
  documents.
"""

import json
import os
from dataclasses import dataclass, field

from fairseq import utils
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from ..errors import DataError, DataNotFoundError, UsageError

DOC_INFO = "doc_info.json"


@dataclass
class DocumentTranslationConfig(TranslationConfig):
    max_doc_length: int = field(
        default=0,
        metadata={
            "help": "L: the token limit the documents were packed with "
            "(128, 256, 512, 1024, 2048); must match doc_info.json"
        },
    )


def read_doc_info(data: str) -> dict:
    path = os.path.join(utils.split_paths(data)[0], DOC_INFO)
    if not os.path.exists(path):
        raise DataNotFoundError(
            f"{path} not found: --task document_translation needs a data-bin made by "
            "data_prep/prepare_europarl_docs.py (it records the packing length L)"
        )
    with open(path) as f:
        info = json.load(f)
    for key in ("max_doc_length", "longest_document"):
        if key not in info:
            raise DataError(f"{path}: missing field {key!r}")
    return info


@register_task("document_translation", dataclass=DocumentTranslationConfig)
class DocumentTranslationTask(TranslationTask):
    @classmethod
    def setup_task(cls, cfg, **kwargs):
        info = read_doc_info(cfg.data)
        if cfg.max_doc_length <= 0:
            raise UsageError(f"--max-doc-length is required (this data was packed with L={info['max_doc_length']})")
        if cfg.max_doc_length != info["max_doc_length"]:
            raise UsageError(
                f"--max-doc-length {cfg.max_doc_length} does not match the data "
                f"({cfg.data}: packed with L={info['max_doc_length']})"
            )
        positions = max(cfg.max_doc_length, info["longest_document"]) + 2  # EOS, margin
        cfg.max_source_positions = max(cfg.max_source_positions, positions)
        cfg.max_target_positions = max(cfg.max_target_positions, positions)
        task = super().setup_task(cfg, **kwargs)
        task.doc_info = info
        return task

    def build_model(self, cfg, from_checkpoint=False):
        for name in ("max_source_positions", "max_target_positions"):
            wanted = getattr(self.cfg, name)
            if (getattr(cfg, name, None) or 0) < wanted:
                setattr(cfg, name, wanted)
        return super().build_model(cfg, from_checkpoint)
