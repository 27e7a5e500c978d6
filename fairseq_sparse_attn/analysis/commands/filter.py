"""``fsa-analyze filter``: sentence pairs ranked by their mean cross-attention null rate
(ReLA's corpus filtering), with the top and bottom pairs as text."""

import math
from typing import Dict, List, Tuple

from .base import Context, add_model_args, positive_int

NAME = "filter"
HELP = "rank sentence pairs by mean cross-attention null rate"


def add_arguments(p) -> None:
    add_model_args(p)
    p.add_argument("--k", type=positive_int, default=10, help="pairs in the top/bottom files (default 10)")
    p.add_argument("--ascending", action="store_true", help="lowest null rate first")


def run(args) -> Dict:
    from ...subwords import join_words
    from ..attention_stats import NullRatePerSentence

    ctx = Context(args)
    collector = NullRatePerSentence()
    ctx.run([collector])
    ranking = rank_by_score(collector.rates(), descending=not args.ascending)
    by_index = {ex.index: ex for ex in ctx.examples}
    text = {
        i: (
            join_words(by_index[i].source_pieces, args.subword_scheme),
            join_words(by_index[i].target_pieces, args.subword_scheme),
        )
        for i, _ in ranking
    }
    rows = [(rank, i, score, text[i][0], text[i][1]) for rank, (i, score) in enumerate(ranking, start=1)]
    ctx.out.tsv("filter.tsv", ("rank", "index", "null_rate", "source", "target"), rows)
    k = min(args.k, len(ranking))
    src_lang = ctx.loaded.task.cfg.source_lang or "src"
    tgt_lang = ctx.loaded.task.cfg.target_lang or "tgt"
    files = {}
    for name, part in (("top", ranking[:k]), ("bottom", ranking[len(ranking) - k :])):
        for side, lang in ((0, src_lang), (1, tgt_lang)):
            path = ctx.out / f"{name}.{lang}"
            with open(path, "w", encoding="utf-8") as f:
                f.writelines(text[i][side] + "\n" for i, _ in part)
            ctx.out.wrote(path)
            files[f"{name}.{'source' if side == 0 else 'target'}"] = path.name
    report = {
        **ctx.header(NAME),
        "order": "ascending" if args.ascending else "descending",
        "score": "mean cross-attention null rate over layers, heads and target positions",
        "k": k,
        "files": files,
        "ranking": [{"rank": r, "index": i, "null_rate": s} for r, (i, s) in enumerate(ranking, start=1)],
    }
    ctx.out.json("filter.json", report)
    return report


def rank_by_score(scores: Dict[int, float], descending: bool = True) -> List[Tuple[int, float]]:
    """``[(index, score)]`` sorted by score (highest first when ``descending``), ties by
    index; ``nan`` scores last."""

    def key(item):
        i, s = item
        missing = s is None or math.isnan(s)
        return (missing, 0.0 if missing else (-s if descending else s), i)

    return sorted(scores.items(), key=key)
