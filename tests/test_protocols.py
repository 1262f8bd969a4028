"""Extension protocols grow without breaking implementations (``ember/_protocols.py``): a member
added after a release has a default an older implementation gets, with one warning; a contract
that was replaced refuses the old one, naming the new members."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Protocol

import pytest
import torch

from ember import _protocols
from ember._protocols import added, check_protocol, member, with_defaults
from ember.extend import EarlyStoppingStrategy, MetricQuery, Renderer
from ember.train import (
    Direction,
    Learner,
    MetricCheckpointingStrategy,
    MetricEarlyStoppingStrategy,
    Split,
    StoppingCondition,
)
from ember.train._vocabulary import Aggregate
from tests.train.fixtures import TinyRegressor, loader, quiet


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the first warning of every class (they are given once)."""
    monkeypatch.setattr(_protocols, "_warned", set())


class StopAfter:
    """An early-stopping strategy as 0.1.0 users wrote it: ``should_stop`` alone."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.asked: list[int] = []

    def should_stop(self, epoch: int, query: MetricQuery) -> bool:
        self.asked.append(epoch)
        return epoch >= self.epoch


def test_a_0_1_0_early_stopping_strategy_still_stops_a_run(tmp_path: Path) -> None:
    """A strategy without ``reason``/``state_dict``/``load_state_dict`` runs with the protocol's
    defaults; the builder warns once, naming the members to add."""
    strategy = StopAfter(2)
    model = TinyRegressor()
    builder = quiet(tmp_path / "run", loader(8), loader(4)).num_epochs(5)
    builder = builder.with_default_checkpointers()
    with pytest.warns(DeprecationWarning, match="lacks load_state_dict, reason, state_dict"):
        builder = builder.early_stopping(strategy)  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing more during the run
        result = builder.launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    assert strategy.asked == [1, 2]
    assert result.last_epoch == 2
    assert result.stop_reason == "early stopping after epoch 2"


def test_the_warning_is_given_once_per_class() -> None:
    """A second strategy of the same class adds no warning."""
    with pytest.warns(DeprecationWarning, match="StopAfter implements an older"):
        with_defaults(StopAfter(1), EarlyStoppingStrategy, "early stopping")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with_defaults(StopAfter(1), EarlyStoppingStrategy, "early stopping")


class Greeter(Protocol):
    """A protocol that grew: ``name`` came in 9.9."""

    def greet(self, who: str) -> str: ...

    @property
    @added("9.9")
    def name(self) -> str:
        """Default: "anonymous"."""
        return "anonymous"

    @added("9.9")
    def farewell(self, who: str) -> str:
        """Default: "bye <who>"."""
        return f"bye {who}"


class OldGreeter:
    def greet(self, who: str) -> str:
        return f"hi {who}"


class NamedGreeter(OldGreeter):
    name = "Ada"


def test_member_reads_what_exists_and_defaults_the_rest() -> None:
    """An implementation is checked and returned as it is; ``member`` gives its own members
    (read each time) and the protocol's defaults for the ones it lacks."""
    implementation = NamedGreeter()
    with pytest.warns(DeprecationWarning, match=r"lacks farewell \(added in 9.9\)"):
        checked = with_defaults(implementation, Greeter, "greeter")
    assert checked is implementation
    assert member(implementation, Greeter, "greet")("you") == "hi you"
    assert member(implementation, Greeter, "farewell")("you") == "bye you"
    assert member(implementation, Greeter, "name") == "Ada"
    implementation.name = "Grace"
    assert member(implementation, Greeter, "name") == "Grace"
    assert member(OldGreeter(), Greeter, "name") == "anonymous"


def test_a_renderer_s_optional_members_default_to_renderer_s() -> None:
    """A plain renderer without the optional members gets ``Renderer``'s (which show nothing),
    bound to it; its own members are its own."""

    class Shown:
        def __init__(self) -> None:
            self.steps: list[int] = []

        def update_step(self, step: int) -> None:
            self.steps.append(step)

    shown = Shown()
    member(shown, Renderer, "update_step")(3)
    assert shown.steps == [3]
    assert member(shown, Renderer, "on_warning")("ignored") is None


def test_a_complete_implementation_is_returned_as_is() -> None:
    """Nothing is wrapped or warned of when every member is there."""
    strategy = MetricEarlyStoppingStrategy("Loss")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert with_defaults(strategy, EarlyStoppingStrategy, "early stopping") is strategy


def test_a_required_member_is_still_required() -> None:
    """Defaults cover added members only: a missing required one is refused by name."""

    class Nameless:
        name = "x"

    with pytest.raises(TypeError, match="greeter Nameless lacks greet: it must implement"):
        with_defaults(Nameless(), Greeter, "greeter")


class OldLogger:
    """A metric logger as 0.1.0 users wrote it."""

    def log_definition(self, definition: Any) -> None: ...
    def log(self, entries: Any, epoch: int, split: Split) -> None: ...
    def end_split(self, epoch: int, split: Split) -> None: ...
    def read_numeric(self, name: str, epoch: int, split: Split) -> list[Any]:
        return []

    def close(self) -> None: ...


class OldStrategy:
    """A training strategy as 0.1.0 users wrote it: the loop inside ``fit``."""

    def fit(self, *args: Any) -> Any: ...


def test_a_0_1_0_metric_logger_is_refused_naming_the_new_contract(tmp_path: Path) -> None:
    """0.1.0's MetricLogger contract was replaced: the message shows 0.2.0's members."""
    builder = quiet(tmp_path, loader(8), loader(4))
    with pytest.raises(TypeError, match=r"ember 0\.1\.0's contract, with log_definition") as raised:
        builder.with_metric_logger(OldLogger())  # type: ignore[arg-type]
    assert "start, log, end_split, end, close" in str(raised.value)


def test_a_0_1_0_strategy_is_refused_naming_the_new_contract(tmp_path: Path) -> None:
    """0.1.0's strategy contract (``fit``) was replaced: the message shows 0.2.0's members."""
    builder = quiet(tmp_path, loader(8), loader(4))
    with pytest.raises(TypeError, match=r"ember 0\.1\.0's contract, with fit") as raised:
        builder.with_training_strategy(OldStrategy())  # type: ignore[arg-type]
    assert "is_main" in str(raised.value) and "start" in str(raised.value)


def test_an_unrelated_object_gets_no_0_1_0_note() -> None:
    """The note about 0.1.0 appears only for an object that implements 0.1.0's contract."""
    with pytest.raises(TypeError) as raised:
        check_protocol(object(), EarlyStoppingStrategy, "early stopping")
    assert "0.1.0" not in str(raised.value)


def test_burns_aggregate_argument_still_works() -> None:
    """0.1.0's (Burn's) positional ``Aggregate`` gives the same strategies, with a warning."""
    condition = StoppingCondition.no_improvement_since(3)
    with pytest.warns(DeprecationWarning, match="Aggregate argument is deprecated"):
        old = MetricEarlyStoppingStrategy(
            "Loss",
            Aggregate.MEAN,  # type: ignore[arg-type]
            Direction.HIGHEST,  # type: ignore[arg-type]
            Split.TRAIN,  # type: ignore[arg-type]
            condition,
        )
    assert (old.name, old.direction, old.split, old.condition) == (
        "Loss",
        Direction.HIGHEST,
        Split.TRAIN,
        condition,
    )
    with pytest.warns(DeprecationWarning, match="Aggregate argument is deprecated"):
        kept = MetricCheckpointingStrategy(
            "Loss",
            Aggregate.MEAN,  # type: ignore[arg-type]
            Direction.HIGHEST,  # type: ignore[arg-type]
            Split.TRAIN,
        )
    assert (kept.direction, kept.split) == (Direction.HIGHEST, Split.TRAIN)
    with pytest.warns(DeprecationWarning, match="Aggregate argument"):
        short = MetricEarlyStoppingStrategy("Loss", Aggregate.MEAN)  # type: ignore[arg-type]
    assert (short.direction, short.split) == (Direction.LOWEST, Split.VALID)
