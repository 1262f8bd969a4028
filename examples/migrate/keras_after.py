"""A Keras digits classifier brought over to ember: the ember half of docs/migrate/keras.md.

The Keras script (in the guide) builds a ``Sequential`` of two ``Dense`` layers, compiles it
with Adam, a cross-entropy and ``metrics=["accuracy"]``, fits it with early stopping and a
checkpoint of the best epoch, then evaluates the best weights on a test set and predicts. This
is the same experiment on scikit-learn's bundled 8x8 digits (nothing downloaded), each comment
naming the Keras call a line replaces::

    python examples/migrate/keras_after.py
    python examples/migrate/keras_after.py --epochs 5 --directory runs/quick

A run goes to ``artifacts/migrate-keras`` (run it again: ``artifacts/migrate-keras-2``, beside
the first). Needs ``pip install ember[cli,examples]``.
"""

from pathlib import Path

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn

import ember
from ember import AccuracyMetric, DataLoaderBuilder, InMemDataset, Learner, LossMetric
from ember.train import MetricEarlyStoppingStrategy, StoppingCondition, SupervisedTraining, predict


def main(epochs: int = 30, directory: Path = Path("artifacts/migrate-keras")) -> None:
    """Fit an MLP on the digits, then evaluate its best epoch and predict."""
    torch.manual_seed(0)  # keras.utils.set_random_seed(0)
    x, y = load_digits(return_X_y=True)
    items = list(zip(torch.tensor(x, dtype=torch.float32) / 16, torch.tensor(y), strict=True))
    split = torch.Generator().manual_seed(0)  # train_test_split(..., random_state=0)
    train, valid, test = torch.utils.data.random_split(items, [1200, 297, 300], split)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))  # keras.Sequential
    adam = torch.optim.Adam(model.parameters(), lr=3e-3)
    result = (
        SupervisedTraining(  # model.fit(x, y, batch_size=32, validation_data=...)
            directory,
            DataLoaderBuilder().batch_size(32).shuffle(0).build(InMemDataset(train)),
            DataLoaderBuilder().batch_size(256).build(InMemDataset(valid)),
        )
        .metrics(LossMetric(), AccuracyMetric())  # metrics=["accuracy"]
        .num_epochs(epochs)  # epochs=30
        .early_stopping(  # EarlyStopping(monitor="val_loss", patience=3)
            MetricEarlyStoppingStrategy("Loss", condition=StoppingCondition.no_improvement_since(3))
        )
        .with_default_checkpointers()  # ModelCheckpoint(monitor="val_loss", save_best_only=True)
        .summary()  # model.summary(), and a table of every metric at the end
        .launch(Learner(model, adam, loss=F.cross_entropy))  # model.compile(optimizer, loss)
    )
    print("valid accuracy by epoch:", result.values("valid", "Accuracy"))  # history.history
    test_loader = DataLoaderBuilder().batch_size(256).build(InMemDataset(test))
    evaluation = result.evaluate(  # restore_best_weights=True, model.evaluate(x_test, y_test)
        [("test", test_loader)], LossMetric(), AccuracyMetric(), checkpoint="best"
    )
    print(f"Test accuracy of epoch {result.best_epoch}: {evaluation.value('Accuracy'):.2f} %")
    first = [test[i] for i in range(8)]
    images = DataLoaderBuilder().batch_size(8).build(InMemDataset(image for image, _ in first))
    predicted = predict(model, images)[0].argmax(1)  # model.predict(x_test[:8]).argmax(axis=1)
    print("predicted:", predicted.tolist(), "labels:", [int(label) for _, label in first])


if __name__ == "__main__":
    ember.cli(main)
