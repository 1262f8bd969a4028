"""Precision, recall, F-beta: hand examples, torchmetrics on uneven batches, names, validation."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchmetrics.functional import classification as tmc

from ember.data import Progress
from ember.extend import ConfusionStatsInput, MetricMetadata
from ember.train import ClassReduction, FBetaScoreMetric, PrecisionMetric, RecallMetric

META = MetricMetadata(Progress(1, 1), 1, None)
Metric = PrecisionMetric | RecallMetric | FBetaScoreMetric

BINARY = ConfusionStatsInput(
    torch.tensor([[0.9], [0.8], [0.1], [0.2]]), torch.tensor([[1], [0], [1], [1]]).bool()
)


def test_binary_values_by_hand() -> None:
    """TP=1, FP=1, FN=2: precision 50 %, recall 33.3 %, F1 40 %, each weighted by 4 samples."""
    entries = [
        m.update(BINARY, META)
        for m in (PrecisionMetric.binary(), RecallMetric.binary(), FBetaScoreMetric.binary())
    ]
    assert [e.serialized for e in entries] == ["50,4", f"{100 / 3!r},4", "40,4"]


def test_fbeta_weighs_recall_by_beta() -> None:
    """F2 = 5 TP / (5 TP + 4 FN + FP) = 5 / 14."""
    metric = FBetaScoreMetric.binary(2.0)
    metric.update(BINARY, META)
    value = metric.value()
    assert value is not None and value.value == pytest.approx(500 / 14)


def test_epoch_value_comes_from_summed_counts_not_batch_means() -> None:
    """Micro precision of (1 TP) then (3 FP) is 25 %, not the mean 50 % of 100 % and 0 %."""
    metric = PrecisionMetric.multilabel(reduction=ClassReduction.MICRO)
    metric.update(ConfusionStatsInput(torch.tensor([[0.9]]), torch.tensor([[True]])), META)
    metric.update(ConfusionStatsInput(torch.full((3, 1), 0.9), torch.zeros(3, 1).bool()), META)
    assert metric.compute().serialized == "25,final"
    assert metric.running_value().weight == 4


def test_macro_leaves_out_undefined_classes() -> None:
    """A class never predicted has no precision: the macro mean is over the other classes."""
    metric = PrecisionMetric.multiclass()
    scores = torch.tensor([[0.9, 0.1, 0.0], [0.2, 0.8, 0.0], [0.6, 0.4, 0.0]])
    targets = torch.nn.functional.one_hot(torch.tensor([0, 0, 2]), 3).bool()
    metric.update(ConfusionStatsInput(scores, targets), META)
    # class 0: 1 TP of 2 predicted; class 1: 0 of 1; class 2: never predicted
    assert metric.compute().serialized == "25,final"


def test_no_defined_class_gives_zero_and_no_batch_gives_nan() -> None:
    """Nothing predicted anywhere: precision 0 (zero_division=0); an empty epoch is NaN."""
    metric = PrecisionMetric.binary()
    entry = metric.update(ConfusionStatsInput(torch.zeros(2, 1), torch.ones(2, 1).bool()), META)
    assert entry.serialized == "0,2"
    metric.clear()
    metric.compute()
    assert math.isnan(metric.final_value().value)


def test_names_follow_burn_and_multilabel_keeps_its_own() -> None:
    """Names show rule and reduction; multilabel has its own (Burn's keeps the default name)."""
    assert PrecisionMetric().name == "Precision @ Threshold(0.5) [Macro]"
    assert PrecisionMetric.binary(0.75).name == "Precision @ Threshold(0.75) [Macro]"
    assert PrecisionMetric.multiclass(1, "micro").name == "Precision @ TopK(1) [Micro]"
    assert PrecisionMetric.multilabel(0.3, ClassReduction.MICRO).name == (
        "Precision @ Threshold(0.3) [Micro]"
    )
    assert RecallMetric.multiclass(2).name == "Recall @ TopK(2) [Macro]"
    assert FBetaScoreMetric.multiclass(0.5, 2).name == "FBetaScore (0.5) @ TopK(2) [Macro]"
    assert FBetaScoreMetric.multilabel(1.0, 0.5, "micro").name == (
        "FBetaScore (1) @ Threshold(0.5) [Micro]"
    )


def _scores(name: str, beta: float) -> Callable[..., torch.Tensor]:
    """torchmetrics' function for ``name``, by mode: multiclass, multilabel or binary."""
    functions = {
        "precision": (tmc.multiclass_precision, tmc.multilabel_precision, tmc.binary_precision),
        "recall": (tmc.multiclass_recall, tmc.multilabel_recall, tmc.binary_recall),
        "fbeta": (tmc.multiclass_fbeta_score, tmc.multilabel_fbeta_score, tmc.binary_fbeta_score),
    }
    extra = {"beta": beta} if name == "fbeta" else {}

    def score(mode: int, *args: object, **kwargs: object) -> torch.Tensor:
        return functions[name][mode](*args, **kwargs, **extra)  # type: ignore[no-any-return,operator]

    return score


def _metric(name: str, beta: float, **kwargs: object) -> Metric:
    if name == "fbeta":
        return FBetaScoreMetric(beta, **kwargs)  # type: ignore[arg-type]
    cls = PrecisionMetric if name == "precision" else RecallMetric
    return cls(**kwargs)  # type: ignore[arg-type]


def _macro(kind: str, beta: float, stats: torch.Tensor) -> float:
    """The macro value from torchmetrics' per-class counts ``[C, (tp, fp, tn, fn, support)]``."""
    tp, fp, fn = (stats[:, i].double() for i in (0, 1, 3))
    if kind == "precision":
        per_class = tp / (tp + fp)
    elif kind == "recall":
        per_class = tp / (tp + fn)
    else:
        per_class = (1 + beta**2) * tp / ((1 + beta**2) * tp + beta**2 * fn + fp)
    return 100 * float(per_class.nanmean().nan_to_num(nan=0.0))


KINDS = st.sampled_from(["precision", "recall", "fbeta"])
BETAS = st.sampled_from([0.5, 1.0, 2.0])
SIZES = st.lists(st.integers(1, 8), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None)
@given(KINDS, BETAS, SIZES, st.integers(2, 5), st.sampled_from(list(ClassReduction)), st.integers())
def test_multiclass_epoch_value_matches_torchmetrics(
    kind: str, beta: float, sizes: list[int], classes: int, reduction: ClassReduction, seed: int
) -> None:
    """Top-1 multiclass over uneven batches equals torchmetrics on all samples together."""
    generator = torch.Generator().manual_seed(seed % 2**32)
    metric = _metric(kind, beta, top_k=1, reduction=reduction)
    scores_list, labels_list = [], []
    for size in sizes:
        scores = torch.rand(size, classes, generator=generator)
        labels = torch.randint(0, classes, (size,), generator=generator)
        targets = torch.nn.functional.one_hot(labels, classes).bool()
        metric.update(ConfusionStatsInput(scores, targets), META)
        scores_list.append(scores)
        labels_list.append(labels)
    metric.compute()
    scores, labels = torch.cat(scores_list), torch.cat(labels_list)
    score = _scores(kind, beta)
    if reduction is ClassReduction.MICRO:
        value = score(0, scores, labels, num_classes=classes, average="micro")
        expected = 100 * float(value)
    else:
        stats = tmc.multiclass_stat_scores(scores, labels, num_classes=classes, average="none")
        expected = _macro(kind, beta, stats)
    assert metric.final_value().value == pytest.approx(expected)


@settings(max_examples=40, deadline=None)
@given(
    KINDS,
    BETAS,
    SIZES,
    st.integers(1, 4),
    st.sampled_from([0.25, 0.5, 0.7]),
    st.sampled_from(list(ClassReduction)),
    st.integers(),
)
def test_multilabel_and_binary_epoch_value_matches_torchmetrics(
    kind: str,
    beta: float,
    sizes: list[int],
    labels: int,
    threshold: float,
    reduction: ClassReduction,
    seed: int,
) -> None:
    """Thresholded multi-label (binary when C = 1) over uneven batches equals torchmetrics."""
    generator = torch.Generator().manual_seed(seed % 2**32)
    metric = _metric(kind, beta, threshold=threshold, reduction=reduction)
    scores_list, targets_list = [], []
    for size in sizes:
        scores = torch.rand(size, labels, generator=generator)
        targets = torch.randint(0, 2, (size, labels), generator=generator)
        entry = metric.update(ConfusionStatsInput(scores, targets.bool()), META)
        assert entry.serialized.endswith(f",{size}")
        scores_list.append(scores)
        targets_list.append(targets)
    metric.compute()
    scores, targets = torch.cat(scores_list), torch.cat(targets_list)
    score = _scores(kind, beta)
    if labels == 1:  # torchmetrics' binary task
        scores, targets = scores.squeeze(1), targets.squeeze(1)
        stats = tmc.binary_stat_scores(scores, targets, threshold=threshold).reshape(1, 5)
        micro = score(2, scores, targets, threshold=threshold)
    else:
        stats = tmc.multilabel_stat_scores(
            scores, targets, num_labels=labels, threshold=threshold, average="none"
        )
        micro = score(1, scores, targets, num_labels=labels, threshold=threshold, average="micro")
    micro_wanted = reduction is ClassReduction.MICRO
    expected = 100 * float(micro) if micro_wanted else _macro(kind, beta, stats)
    assert metric.final_value().value == pytest.approx(expected)


def _top_k_by_hand(
    kind: str, beta: float, scores: list[list[float]], labels: list[int], k: int, micro: bool
) -> float:
    classes = len(scores[0])
    tp, fp, fn = [0] * classes, [0] * classes, [0] * classes
    for row, label in zip(scores, labels, strict=True):
        predicted = sorted(range(classes), key=lambda c: -row[c])[:k]
        for c in range(classes):
            if c in predicted and c == label:
                tp[c] += 1
            elif c in predicted:
                fp[c] += 1
            elif c == label:
                fn[c] += 1
    groups = [(sum(tp), sum(fp), sum(fn))] if micro else list(zip(tp, fp, fn, strict=True))
    values = []
    for t, p, n in groups:
        if kind == "precision":
            num, den = float(t), float(t + p)
        elif kind == "recall":
            num, den = float(t), float(t + n)
        else:
            num = (1 + beta**2) * t
            den = num + beta**2 * n + p
        if den:
            values.append(100 * num / den)
    return sum(values) / len(values) if values else 0.0


@settings(max_examples=30, deadline=None)
@given(KINDS, BETAS, SIZES, st.integers(2, 5), st.integers(1, 5), st.booleans(), st.integers())
def test_multiclass_top_k_matches_a_hand_count(
    kind: str, beta: float, sizes: list[int], classes: int, k: int, micro: bool, seed: int
) -> None:
    """Top-k predicts k classes per sample (a multi-hot prediction), counted by hand."""
    generator = torch.Generator().manual_seed(seed % 2**32)
    reduction = ClassReduction.MICRO if micro else ClassReduction.MACRO
    metric = _metric(kind, beta, top_k=k, reduction=reduction)
    scores_list, labels_list = [], []
    for size in sizes:
        scores = torch.rand(size, classes, generator=generator)
        labels = torch.randint(0, classes, (size,), generator=generator)
        targets = torch.nn.functional.one_hot(labels, classes).bool()
        metric.update(ConfusionStatsInput(scores, targets), META)
        scores_list += scores.tolist()
        labels_list += labels.tolist()
    metric.compute()
    expected = _top_k_by_hand(kind, beta, scores_list, labels_list, min(k, classes), micro)
    assert metric.final_value().value == pytest.approx(expected)


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (
            lambda: PrecisionMetric.binary(0.0),
            ValueError,
            "threshold must be > 0, got 0.0",
        ),
        (
            lambda: RecallMetric.multilabel(1.0),
            ValueError,
            "threshold must be < 1, got 1.0",
        ),
        (
            lambda: PrecisionMetric.binary("0.5"),  # type: ignore[arg-type]
            TypeError,
            r"threshold must be a real number, got '0.5' \(str\)",
        ),
        (lambda: PrecisionMetric.multiclass(0), ValueError, "top_k must be >= 1, got 0"),
        (
            lambda: RecallMetric.multiclass(2.0),  # type: ignore[arg-type]
            TypeError,
            "top_k must be an int, got 2.0",
        ),
        (lambda: FBetaScoreMetric.binary(0.0), ValueError, "beta must be > 0, got 0.0"),
        (lambda: FBetaScoreMetric.binary(-1), ValueError, "beta must be > 0, got -1"),
        (lambda: FBetaScoreMetric(math.nan), ValueError, "beta must be finite, got nan"),
        (lambda: FBetaScoreMetric(math.inf), ValueError, "beta must be finite, got inf"),
        (lambda: PrecisionMetric.multiclass(1, "avg"), ValueError, "reduction must be"),
        (lambda: PrecisionMetric(threshold=0.5, top_k=1), ValueError, "threshold or top_k"),
    ],
)
def test_constructors_validate(
    build: Callable[[], object], error: type[Exception], match: str
) -> None:
    """Bad arguments raise at construction, naming the value."""
    with pytest.raises(error, match=match):
        build()


def test_shapes_and_class_counts_are_checked() -> None:
    """Predictions and targets must match; the class count cannot change within an epoch."""
    metric = PrecisionMetric.multilabel()
    with pytest.raises(ValueError, match="one shape"):
        metric.update(ConfusionStatsInput(torch.rand(2, 3), torch.zeros(2, 2).bool()), META)
    metric.update(ConfusionStatsInput(torch.rand(2, 3), torch.zeros(2, 3).bool()), META)
    with pytest.raises(ValueError, match="got 2 classes after 3"):
        metric.update(ConfusionStatsInput(torch.rand(2, 2), torch.zeros(2, 2).bool()), META)
