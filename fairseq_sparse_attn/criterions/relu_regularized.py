"""``--criterion relu_regularized_label_smoothed_cross_entropy`` (ReLUFormer, Eq. 7).

    loss = label-smoothed CE + lambda * L_reg * sample_size

For every valid query row i of every head of every ``relu_scaled`` attention module:

    L_i = | log S_i | + max(H(s_hat_i) - C_i, 0),   S_i = sum_j s_ij,
    s_hat_i = s_i / S_i,  H = entropy,  C_i = c * log n_i

The paper prints ``log(sum s)`` but defines |.| and says the term "encourages the
summation of weights to be 1": we use the absolute value.

Averaging (defaults; see docs/reluformer.md):
* rows x heads of one module: mean over valid rows (real query tokens, non-null rows);
* modules (layers and kinds): ``--relu-reg-layer-reduction mean`` (default) or ``sum``;
* the loss is multiplied by ``sample_size`` because fairseq divides the summed CE by it:
  the effective objective is CE_mean + lambda * L_reg.

Null rows (S_i = 0, all weights zero): their gradient through the ReLU is zero whatever the
loss, so they are *excluded* from L_reg (and counted in the logged null rate); for the
other rows S_i is floored at ``--relu-reg-sum-floor`` (1e-12) inside the log, and 0 log 0
is taken as 0 in the entropy.  Nothing here can produce inf/NaN.

The row sums come back from the attention calls as intermediates: the criterion runs the
model inside ``collect("row_sums")`` (:mod:`fairseq_sparse_attn.attention.intermediates`)
and builds the loss from the returned (wsum, wlogw, n) of every ``relu_scaled`` call.
Nothing is attached to a module, and with ``--checkpoint-activations`` the sums are
outputs of the checkpointed layers (:mod:`fairseq_sparse_attn.models.checkpointing`), so
their gradient is the same as without checkpointing.  Logged per attention kind: ``reg_<kind>`` (mean L_i),
``entropy_<kind>`` (mean H), ``wsum_<kind>`` (mean S_i), ``null_<kind>`` (null-row rate).
"""

from dataclasses import dataclass, field

import torch
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)
from fairseq.logging import metrics

from ..attention.config import ATTENTION_KINDS
from ..attention.intermediates import collect
from ..attention.scaled_relu import row_sums  # noqa: F401  (re-exported: used to live here)


@dataclass
class ReLURegularizedCriterionConfig(LabelSmoothedCrossEntropyCriterionConfig):
    relu_reg_lambda: float = field(default=1.0, metadata={"help": "weight lambda of L_reg (0 disables it)"})
    relu_reg_entropy_c: float = field(default=0.7, metadata={"help": "c in the entropy bound C_i = c log n_i"})
    relu_reg_sum_floor: float = field(default=1e-12, metadata={"help": "floor of sum_j s_ij inside the log"})
    relu_reg_layer_reduction: str = field(
        default="mean", metadata={"help": "combine modules (layers x kinds): mean or sum"}
    )


class RowTerms:
    """The terms of one ``relu_scaled`` attention call: the differentiable loss and the
    logged statistics of its rows, from full weights (``terms(weights, n)``) or from the
    row sums the call returned (``add_sums(wsum, wlogw, n)``)."""

    def __init__(self, kind, c, floor, query_padding):
        self.kind, self.c, self.floor = kind, c, floor
        self.query_padding = query_padding  # shared dict kind -> (bsz, len) bool, set per batch
        self.loss = None
        self.stats = torch.zeros(5, dtype=torch.float64)  # loss, entropy, wsum, rows, null rows

    def __call__(self, weights, n, mask=None):
        wsum, wlogw = row_sums(weights)
        self.add_sums(wsum, wlogw, n)

    def add_sums(self, wsum, wlogw, n):
        terms = terms_from_sums(wsum, wlogw, n, self.c, self.floor)
        bsz, heads, tgt = wsum.shape
        valid = torch.ones(bsz, 1, tgt, dtype=torch.bool, device=wsum.device)
        qpad = self.query_padding.get(self.kind)
        if qpad is not None and qpad.shape == (bsz, tgt):
            valid = ~qpad.view(bsz, 1, tgt)
        valid = valid.expand(bsz, heads, tgt)
        null = valid & terms["null"]
        used = valid & ~terms["null"]
        count = used.sum()
        loss = torch.where(used, terms["loss"], torch.zeros_like(terms["loss"])).sum() / count.clamp(min=1)
        self.loss = loss if self.loss is None else self.loss + loss
        with torch.no_grad():
            self.stats += (
                torch.stack(
                    [
                        terms["loss"][used].sum(),
                        terms["entropy"][used].sum(),
                        terms["wsum"][used].sum(),
                        count,
                        null.sum(),
                    ]
                )
                .double()
                .cpu()
            )


def terms_from_sums(wsum, wlogw, n, c=0.7, floor=1e-12):
    """Per-row terms of Eq. 7 from the row sums: H(s_hat) = log S - (sum s log s) / S."""
    null = wsum == 0
    safe = wsum.clamp(min=floor)
    entropy = torch.where(null, torch.zeros_like(wsum), torch.log(safe) - wlogw / safe)
    bound = c * torch.log(n.squeeze(-1).clamp(min=1)).expand_as(entropy)
    loss = torch.log(safe).abs() + torch.relu(entropy - bound)
    return {"loss": loss, "entropy": entropy, "wsum": wsum, "bound": bound, "null": null}


def row_regularization(weights, n, c=0.7, floor=1e-12):
    """Per-row terms of Eq. 7.  weights: (bsz, heads, tgt, src) non-negative; n: visible key
    counts broadcastable to (bsz, heads, tgt, 1).  Returns dict of (bsz, heads, tgt) tensors."""
    wsum, wlogw = row_sums(weights)
    return terms_from_sums(wsum, wlogw, n, c, floor)


@register_criterion("relu_regularized_label_smoothed_cross_entropy", dataclass=ReLURegularizedCriterionConfig)
class ReLURegularizedCriterion(LabelSmoothedCrossEntropyCriterion):
    def __init__(
        self,
        task,
        sentence_avg,
        label_smoothing,
        ignore_prefix_size=0,
        report_accuracy=False,
        relu_reg_lambda=1.0,
        relu_reg_entropy_c=0.7,
        relu_reg_sum_floor=1e-12,
        relu_reg_layer_reduction="mean",
    ):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        if relu_reg_layer_reduction not in ("mean", "sum"):
            raise ValueError(f"--relu-reg-layer-reduction must be mean or sum, got {relu_reg_layer_reduction!r}")
        self.lam = relu_reg_lambda
        self.c = relu_reg_entropy_c
        self.floor = relu_reg_sum_floor
        self.reduction = relu_reg_layer_reduction

    def _query_padding(self, sample):
        pad = self.padding_idx
        net_input = sample["net_input"]
        query_padding = {"encoder_self": net_input["src_tokens"].eq(pad)}
        if "prev_output_tokens" in net_input:
            tgt_pad = net_input["prev_output_tokens"].eq(pad)
            query_padding.update(decoder_self=tgt_pad, cross=tgt_pad)
        return query_padding

    def forward(self, model, sample, reduce=True):
        # --relu-reg-lambda 0 trains as the plain criterion (the same loss, gradients and
        # attention path) and, in validation only, still logs the regularizer's statistics
        # (reg, entropy_<kind>, ...): ReLUFormer's Table 5 reports the attention entropy of
        # its "w/o reg loss" row too
        if self.lam <= 0 and model.training:
            return super().forward(model, sample, reduce=reduce)
        with collect("row_sums") as records:
            loss, sample_size, logging_output = super().forward(model, sample, reduce=reduce)
        query_padding = self._query_padding(sample)
        collectors = []
        for module, inter in records:
            if inter.row_sums is not None:
                terms = RowTerms(module.config.kind, self.c, self.floor, query_padding)
                terms.add_sums(*inter.row_sums)
                collectors.append(terms)
        losses = [col.loss for col in collectors if col.loss is not None]
        if losses:
            reg = torch.stack(losses).sum()
            if self.reduction == "mean":
                reg = reg / len(losses)
            if self.lam > 0:
                loss = loss + self.lam * reg.to(loss.dtype) * sample_size
            logging_output["reg_loss"] = reg.data * sample_size
            for kind in ATTENTION_KINDS:
                stats = sum((col.stats for col in collectors if col.kind == kind), torch.zeros(5, dtype=torch.float64))
                if stats[3] + stats[4] > 0:
                    for i, name in enumerate(("loss", "entropy", "wsum", "rows", "null")):
                        logging_output[f"reg_{kind}_{name}"] = stats[i].item()
            logging_output["loss"] = loss.data
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
        if any("reg_loss" in log for log in logging_outputs):
            reg = sum(log.get("reg_loss", 0) for log in logging_outputs)
            metrics.log_scalar("reg", reg / max(sample_size, 1), sample_size, round=4)
        for kind in ATTENTION_KINDS:
            rows = sum(log.get(f"reg_{kind}_rows", 0) for log in logging_outputs)
            null = sum(log.get(f"reg_{kind}_null", 0) for log in logging_outputs)
            if rows + null == 0:
                continue
            for name, key in (("reg", "loss"), ("entropy", "entropy"), ("wsum", "wsum")):
                total = sum(log.get(f"reg_{kind}_{key}", 0) for log in logging_outputs)
                metrics.log_scalar(f"{name}_{kind}", total / max(rows, 1), rows, round=4)
            metrics.log_scalar(f"null_{kind}", null / (rows + null), rows + null, round=4)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
