"""A plain ``nn.Module`` trains: a loss function instead of a model class, the task told or
given, models that compute their own loss, and the mistakes of a first batch named."""

from __future__ import annotations

import copy
import importlib
import io
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ember import TrainingError
from ember.data import DataLoader, DataLoaderBuilder, InMemDataset
from ember.train import (
    AccuracyMetric,
    ClassificationOutput,
    CliMetricsRenderer,
    HammingScore,
    Learner,
    LearnerModel,
    LearningResult,
    LossMetric,
    LossOutput,
    MultiDevice,
    MultiLabelClassificationOutput,
    RegressionOutput,
    SupervisedTraining,
    TrainOutput,
    predict,
)
from tests.train.fixtures import read_lines

Item = tuple[torch.Tensor, torch.Tensor]


def items(count: int = 48, seed: int = 0) -> list[Item]:
    """Points of 4 features and one of 3 classes."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(count, 4, generator=generator)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
    return list(zip(x, y, strict=True))


def loaders(data: list[Any] | None = None) -> tuple[DataLoader[Any], DataLoader[Any]]:
    data = items() if data is None else data
    return (
        DataLoaderBuilder().batch_size(8).shuffle(3).build(InMemDataset(data[:32])),
        DataLoaderBuilder().batch_size(8).build(InMemDataset(data[32:])),
    )


def net(dropout: float = 0.1) -> nn.Sequential:
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Dropout(dropout), nn.Linear(8, 3))


class Written(LearnerModel):
    """The same classifier written out as a LearnerModel."""

    def __init__(self, dropout: float = 0.1) -> None:
        super().__init__()
        self.net = net(dropout)

    def classification(self, batch: Item) -> ClassificationOutput:
        x, y = batch
        out = self.net(x)
        return ClassificationOutput(F.cross_entropy(out, y), out, y)

    def train_step(self, batch: Item) -> TrainOutput[ClassificationOutput]:
        out = self.classification(batch)
        return TrainOutput.from_loss(self, out.loss, out)

    def inference_step(self, batch: Item) -> ClassificationOutput:
        return self.classification(batch)


def train(
    directory: Path,
    learner: Any,
    data: list[Any] | None = None,
    epochs: int = 2,
    **options: Any,
) -> LearningResult[Any]:
    train_loader, valid_loader = loaders(data)
    builder = (
        SupervisedTraining(directory, train_loader, valid_loader)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric(), AccuracyMetric())
        .num_epochs(epochs)
    )
    for name, value in options.items():
        method = getattr(builder, name)
        builder = method(*value) if isinstance(value, tuple) else method(value)
    result = builder.launch(learner)
    assert result.error is None, result.traceback
    return result


def logs(directory: Path, epochs: int = 2) -> list[list[str]]:
    return [
        read_lines(directory / split / f"epoch-{epoch}" / f"{name}.log")
        for split in ("train", "valid")
        for epoch in range(1, epochs + 1)
        for name in ("Loss", "Accuracy")
    ]


def same_weights(a: nn.Module, b: nn.Module) -> bool:
    ours, theirs = a.state_dict(), b.state_dict()
    return [k.removeprefix("net.") for k in theirs] == list(ours) and all(
        torch.equal(x, y) for x, y in zip(ours.values(), theirs.values(), strict=True)
    )


def test_a_plain_classifier_equals_the_same_learner_model_bit_for_bit(tmp_path: Path) -> None:
    """nn.Sequential + F.cross_entropy trains, validates and logs Loss and Accuracy exactly as
    the LearnerModel that writes the same steps out (dropout included)."""
    plain = net()
    optim = torch.optim.Adam(plain.parameters(), lr=1e-2)
    train(tmp_path / "plain", Learner(plain, optim, loss=F.cross_entropy))
    written = Written()
    train(tmp_path / "written", Learner(written, torch.optim.Adam(written.parameters(), lr=1e-2)))
    assert logs(tmp_path / "plain") == logs(tmp_path / "written")
    assert same_weights(plain, written)


def test_precision_accumulation_clipping_and_resume_are_those_of_a_learner_model(
    tmp_path: Path,
) -> None:
    """bf16 autocast, accumulation (mean), clipping and a resume from epoch 1's checkpoint:
    the plain model's run equals the LearnerModel's, bit for bit."""
    options: dict[str, Any] = {
        "precision": "bf16-mixed",
        "grads_accumulation": (2, True),
        "clip_grad_norm": 0.5,
        "with_default_checkpointers": (),
    }
    plain = net()
    learner = Learner(plain, torch.optim.SGD(plain.parameters(), lr=0.1), loss=F.cross_entropy)
    train(tmp_path / "plain", learner, epochs=1, **options)
    resumed = net()
    learner = Learner(resumed, torch.optim.SGD(resumed.parameters(), lr=0.1), loss=F.cross_entropy)
    train(tmp_path / "plain", learner, epochs=2, resume_latest=(), **options)
    written = Written()
    reference = Learner(written, torch.optim.SGD(written.parameters(), lr=0.1))
    train(tmp_path / "written", reference, **options)
    assert logs(tmp_path / "plain") == logs(tmp_path / "written")
    assert same_weights(resumed, written)


def test_several_devices_train_a_plain_model_as_its_learner_model(tmp_path: Path) -> None:
    """MultiDevice runs the plain step on every replica: the same run as the LearnerModel's
    (no dropout: the two CPU devices share one random generator)."""
    plain = net(dropout=0.0)
    learner = Learner(plain, torch.optim.SGD(plain.parameters(), lr=0.1), loss=F.cross_entropy)
    train(tmp_path / "plain", learner, with_training_strategy=MultiDevice(["cpu", "cpu"]))
    written = Written(dropout=0.0)
    reference = Learner(written, torch.optim.SGD(written.parameters(), lr=0.1))
    train(tmp_path / "written", reference, with_training_strategy=MultiDevice(["cpu", "cpu"]))
    assert logs(tmp_path / "plain") == logs(tmp_path / "written")
    assert same_weights(plain, written)


@dataclass
class Sample:
    features: torch.Tensor
    labels: torch.Tensor


class TwoInputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = net()

    def forward(self, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.inner(torch.cat([left, right], dim=1))
        return out


@pytest.mark.parametrize("kind", ["tuple", "dataclass", "dict", "two inputs", "named inputs"])
def test_every_batch_layout_trains_the_same(tmp_path: Path, kind: str) -> None:
    """(x, y) tuples, dataclasses and dicts with a targets field, and several inputs given in
    order or by name: each trains exactly as the tuple batches do."""
    data = items()
    layouts: dict[str, list[Any]] = {
        "tuple": data,
        "dataclass": [Sample(x, y) for x, y in data],
        "dict": [{"x": x, "target": y} for x, y in data],
        "two inputs": [(x[:2], x[2:], y) for x, y in data],
        "named inputs": [{"left": x[:2], "right": x[2:], "y": y} for x, y in data],
    }
    model: nn.Module = TwoInputs() if "inputs" in kind else net()
    optim = torch.optim.SGD(model.parameters(), lr=0.1)
    train(tmp_path / kind, Learner(model, optim, loss=F.cross_entropy), layouts[kind])
    reference = net()
    optim = torch.optim.SGD(reference.parameters(), lr=0.1)
    train(tmp_path / "reference", Learner(reference, optim, loss=F.cross_entropy), data)
    assert logs(tmp_path / kind) == logs(tmp_path / "reference")


def sgd(model: nn.Module, **given: Any) -> Learner[nn.Module]:
    """A Learner of ``model`` with SGD (lr 0.1) and the given loss and task."""
    return Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), **given)


def first_output(learner: Learner[Any], batch: Any) -> Any:
    return learner.inference_step(batch)


def test_the_task_is_told_from_the_first_batch_and_said_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Integer targets: classification; floating targets shaped as the output: regression; a
    binary cross-entropy: multi-label; soft labels of a classification loss: the loss only.
    The choice and why are logged; task= chooses without being told."""
    x = torch.randn(6, 4)
    cases: list[tuple[Any, Any, type, str | None]] = [
        (F.cross_entropy, torch.tensor([0, 1, 2, 0, 1, 2]), ClassificationOutput, "classification"),
        (F.mse_loss, torch.randn(6, 3), RegressionOutput, "regression"),
        (nn.BCEWithLogitsLoss(), torch.ones(6, 3), MultiLabelClassificationOutput, "multilabel"),
        (F.cross_entropy, torch.softmax(torch.randn(6, 3), 1), LossOutput, None),
    ]
    for loss, y, kind, task in cases:
        learner = sgd(net(), loss=loss)
        with caplog.at_level(logging.INFO, logger="ember.train"):
            output = first_output(learner, (x, y))
        assert type(output) is kind and learner.task == task
        told = f"trains as task={task!r}" if task else "trains with only its loss logged"
        assert told in caplog.text
        caplog.clear()
    chosen = sgd(net(), loss=F.mse_loss, task="regression")
    assert type(first_output(chosen, (x, torch.randn(6, 3)))) is RegressionOutput
    assert caplog.text == ""


class OwnLoss(nn.Module):
    """A model that computes its own loss from its named inputs, as Hugging Face models do."""

    def __init__(self) -> None:
        super().__init__()
        self.net = net()

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, Any]:
        logits = self.net(x)
        loss = None if labels is None else F.cross_entropy(logits, labels)
        return {"loss": loss, "logits": logits}


def test_a_model_that_computes_its_loss_trains_with_no_wrapper(tmp_path: Path) -> None:
    """model(**batch)["loss"] trains; its logits and the batch's labels make a classification
    output (told), so the run equals the LearnerModel's."""
    data = [{"x": x, "labels": y} for x, y in items()]
    own = OwnLoss()
    train(tmp_path / "own", Learner(own, torch.optim.SGD(own.parameters(), lr=0.1)), data)
    written = Written()
    train(tmp_path / "written", Learner(written, torch.optim.SGD(written.parameters(), lr=0.1)))
    assert logs(tmp_path / "own") == logs(tmp_path / "written")


def test_validation_evaluation_and_prediction_run_the_plain_step(tmp_path: Path) -> None:
    """The Learner's inference step is what validation, result.evaluate and predict(...,
    step=learner.inference_step) run; predict of a plain model on tensor batches is its
    forward."""
    model = net()
    learner = Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), loss=F.cross_entropy)
    result = train(tmp_path / "run", learner, with_default_checkpointers=())
    _, valid = loaders()
    summary = result.evaluate([("held-out", valid)], LossMetric(), AccuracyMetric())
    assert result.best_epoch is not None
    best = result.values("valid", "Accuracy")[result.best_epoch]
    assert summary.value("Accuracy", "held-out") == best
    outputs = predict(model, valid, step=learner.inference_step)
    assert all(isinstance(output, ClassificationOutput) for output in outputs)
    images = DataLoaderBuilder().batch_size(8).build(InMemDataset([x for x, _ in items()]))
    forward = predict(model, images)
    model.eval()
    with torch.no_grad():
        expected = model(torch.stack([x for x, _ in items()[:8]]))
    assert torch.equal(forward[0], expected)


class Pair(nn.Module):
    """A model whose output is a tuple (scores, features): no loss function reads it."""

    def __init__(self) -> None:
        super().__init__()
        self.net = net()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.net(x), x


def test_mistakes_of_the_first_batch_are_named_with_what_to_write() -> None:
    """A batch without targets, a tuple output the loss does not read, a loss failing on the
    shapes, a tuple batch for a model without loss, a model output without a loss, loss= on a
    LearnerModel and an unknown task: each named with the fix."""
    x = torch.randn(4, 4)
    y = torch.tensor([0, 1, 2, 0])
    with pytest.raises(TypeError, match=r"a batch of Tensor has no targets.*\(inputs, targets\)"):
        sgd(net(), loss=F.cross_entropy).inference_step(x)
    with pytest.raises(TypeError, match=r"fields: a, b\) has no targets.*targets, target, labels"):
        sgd(net(), loss=F.cross_entropy).inference_step({"a": x, "b": y})
    with pytest.raises(
        ValueError,
        match=r"Pair's output a tuple \(tensor \(4, 3\), tensor.*"
        r"read its parts in the loss \(e\.g\. loss=lambda out, y",
    ):
        sgd(Pair(), loss=F.cross_entropy).inference_step({"x": x, "y": y})
    with pytest.raises(ValueError, match=r"the loss cross_entropy\(output, targets\) failed on"):
        sgd(net(), loss=F.cross_entropy).inference_step((x, torch.tensor([0, 1, 2, 0, 1])))
    with pytest.raises(TypeError, match=r"the Learner no loss.*pass loss= to train loss\(model"):
        sgd(net()).inference_step((x, y))
    with pytest.raises(TypeError, match=r"OwnLoss\(\*\*batch\) returned dict without a loss"):
        sgd(OwnLoss()).inference_step({"x": x})
    with pytest.raises(TypeError, match=r"loss= and task= are for a plain nn\.Module"):
        sgd(Written(), loss=F.cross_entropy)
    with pytest.raises(ValueError, match=r"task must be one of 'classification'.*got 'ranking'"):
        sgd(net(), loss=F.cross_entropy, task="ranking")
    with pytest.raises(TypeError, match="loss must be a function of"):
        sgd(net(), loss="cross_entropy")


def test_a_metric_the_told_task_cannot_feed_is_named_and_task_chooses_another(
    tmp_path: Path,
) -> None:
    """0/1 targets with an MSE loss are told regression, which HammingScore cannot read: the
    run fails naming the output and the input; task="multilabel" makes it train."""
    data = [(x, torch.stack([x[0] > 0, x[1] > 0, x[2] > 0]).float()) for x, _ in items()]
    model = net()
    train_loader, valid_loader = loaders(data)
    result = (
        SupervisedTraining(tmp_path, train_loader, valid_loader)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric(), HammingScore())
        .errors_in_result()
        .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), loss=F.mse_loss))
    )
    assert isinstance(result.error, TypeError)
    assert "RegressionOutput cannot feed a metric that reads HammingScoreInput" in str(result.error)
    model = net()
    learner = Learner(
        model, torch.optim.SGD(model.parameters(), lr=0.1), loss=F.mse_loss, task="multilabel"
    )
    result = (
        SupervisedTraining(tmp_path / "given", train_loader, valid_loader)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric(), HammingScore())
        .launch(learner)
    )
    assert result.error is None


def test_the_classifier_example_equals_a_raw_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """examples/classifier (the README's shortest path): the losses of every batch and the
    weights of a raw PyTorch loop over the same batches, bit for bit."""
    pytest.importorskip("sklearn")
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "examples"))
    monkeypatch.setenv("EMBER_RENDERER", "cli")
    example = importlib.import_module("classifier")
    result = example.main(["--epochs", "2", "--dir", str(tmp_path)])
    assert result.error is None, result.traceback
    torch.manual_seed(0)
    raw = example.cnn()
    optim = torch.optim.Adam(raw.parameters())
    train_loader, valid_loader = example.loaders()
    for epoch in (1, 2):
        raw.train()
        losses = []
        for x, y in train_loader:
            optim.zero_grad()
            loss = F.cross_entropy(raw(x), y)
            torch.autograd.backward(loss)
            optim.step()
            losses.append(f"{loss.item()!r},{len(y)}")
        assert read_lines(tmp_path / "train" / f"epoch-{epoch}" / "Loss.log")[:-1] == losses
        raw.eval()
        with torch.no_grad():
            correct = sum(int((raw(x).argmax(1) == y).sum()) for x, y in valid_loader)
        assert result.values("valid", "Accuracy")[epoch] == 100.0 * correct / 297
    assert same_weights(result.model, raw)


class Vae(nn.Module):
    """A VAE's forward: ``(recon, mu, logvar)``, as pytorch/examples' VAE returns."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.encode, self.decode = nn.Linear(4, 4), nn.Linear(2, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mu, logvar = self.encode(x).chunk(2, dim=1)
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        return self.decode(z), mu, logvar


def vae_loss(out: tuple[torch.Tensor, torch.Tensor, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    recon, mu, logvar = out
    kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(1).mean()
    return F.mse_loss(recon, x) + kl


class MinGpt(nn.Module):
    """minGPT's forward: ``(logits, loss)``, the loss None without targets."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.embed, self.head = nn.Embedding(5, 8), nn.Linear(8, 5)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        logits = self.head(self.embed(idx))
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss


def gpt_loss(out: tuple[torch.Tensor, Any], y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out[0].flatten(0, 1), y.flatten())


def tuple_runs() -> list[tuple[nn.Module, Any, list[Item]]]:
    """(model, loss, (x, y) items) of a VAE and of minGPT."""
    x = torch.randn(40, 4, generator=torch.Generator().manual_seed(4))
    tokens = torch.randint(0, 5, (40, 7), generator=torch.Generator().manual_seed(5))
    return [
        (Vae(), vae_loss, list(zip(x, x, strict=True))),
        (MinGpt(), gpt_loss, list(zip(tokens[:, :-1], tokens[:, 1:], strict=True))),
    ]


@pytest.mark.parametrize("case", [0, 1], ids=["vae", "mingpt"])
def test_a_model_whose_forward_returns_a_tuple_trains_with_loss_reading_it(
    case: int, tmp_path: Path
) -> None:
    """A VAE's (recon, mu, logvar) and minGPT's (logits, loss) go to loss= as they are: the
    run logs Loss, each batch's the raw loop's, and ends with its weights, bit for bit."""
    model, loss, data = tuple_runs()[case]
    raw = copy.deepcopy(model)
    learner = Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), loss=loss)
    loader = DataLoaderBuilder().batch_size(16).build(InMemDataset(data))
    torch.manual_seed(0)  # the VAE's noise: the same in both
    result = (
        SupervisedTraining(tmp_path, loader)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .launch(learner)
    )
    assert result.error is None, result.traceback
    assert learner.task is None
    optim = torch.optim.SGD(raw.parameters(), lr=0.1)
    torch.manual_seed(0)
    lines = []
    for x, y in loader:
        optim.zero_grad()
        value = loss(raw(x), y)
        torch.autograd.backward(value)
        optim.step()
        lines.append(f"{value.item()!r},{len(y)}")
    assert read_lines(tmp_path / "train" / "epoch-1" / "Loss.log")[:-1] == lines
    assert same_weights(model, raw)


def test_accuracy_on_a_tuple_output_says_what_it_needs(tmp_path: Path) -> None:
    """Accuracy registered for minGPT's (logits, loss): the run fails naming what Accuracy
    needs and the fix; task= with a tuple output is refused at the first batch."""
    model, loss, data = tuple_runs()[1]
    loader = DataLoaderBuilder().batch_size(16).build(InMemDataset(data))
    result = (
        SupervisedTraining(tmp_path, loader)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric(), AccuracyMetric())
        .errors_in_result()
        .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), loss=loss))
    )
    assert isinstance(result.error, TypeError)
    message = str(result.error)
    assert "the train metric 'Accuracy' (AccuracyMetric) cannot read the model's output" in message
    assert "LossOutput holds only a loss, which cannot feed a metric that reads AccuracyInput" in (
        message
    )
    assert "task='classification'" in message and "ClassificationOutput(loss, scores" in message
    learner = sgd(MinGpt(), loss=loss, task="classification")
    x, y = next(iter(loader))
    refused = r"task='classification' reads the scores from MinGpt's output, and its forward "
    with pytest.raises(TypeError, match=refused + r"returned a tuple \(tensor \(16, 6, 5\), None"):
        first_output(learner, (x, y))


def test_a_dataset_of_file_names_is_named_at_the_first_batch(tmp_path: Path) -> None:
    """A dataset of (file name, label) items: the forward fails naming the batch's input x, a
    list of str, and how to make tensors of it, not torch's "argument 'input' must be Tensor";
    torch's error is chained."""
    data = [(f"images/cat-{i}.png", i % 3) for i in range(16)]
    model = nn.Linear(4, 3)
    with pytest.raises(TrainingError) as raised:
        (
            SupervisedTraining(
                tmp_path, DataLoaderBuilder().batch_size(8).build(InMemDataset(data))
            )
            .renderer(CliMetricsRenderer(io.StringIO()))
            .metrics(LossMetric())
            .launch(sgd(model, loss=F.cross_entropy))
        )
    error = raised.value.__cause__
    assert isinstance(error, TypeError)
    message = str(error)
    assert message.startswith(
        "Linear's forward failed on the batch's input x (the first value of an (x, y) batch), "
        "which is a list of 8 str (['images/cat-0.png', 'images/cat-1.png', ...]), not a tensor"
    )
    assert "in a batcher that returns tensors (DataLoaderBuilder(batcher)" in message
    assert "must be Tensor" in str(error.__cause__)
