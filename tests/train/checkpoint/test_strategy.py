"""Checkpointing strategies: Burn's rules and state that survives a resume ("exact resume")."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.extend import CheckpointingStrategy, Delete, Save
from ember.train import (
    ComposedCheckpointingStrategy,
    Direction,
    KeepLastNCheckpoints,
    MetricCheckpointingStrategy,
    Split,
)
from ember.train._checkpoint.strategy import default_checkpointing_strategy


class FakeQuery:
    """A MetricQuery over ``values[split][name][epoch]``; only epochs logged so far are seen."""

    def __init__(self, values: dict[int, float] | None = None, name: str = "Loss") -> None:
        self.values = {Split.VALID: {name: dict(values or {})}, Split.TRAIN: {}}

    def find_metric(self, name: str, epoch: int, split: Split) -> float | None:
        return self.values[split].get(name, {}).get(epoch)

    def find_epoch(self, name: str, direction: Direction, split: Split) -> int | None:
        by_epoch = self.values[split].get(name, {})
        if 1 not in by_epoch:
            return None
        sign = 1.0 if direction is Direction.LOWEST else -1.0
        return min(sorted(by_epoch), key=lambda epoch: sign * by_epoch[epoch])


def run(
    strategy: CheckpointingStrategy, losses: list[float], start: int = 1
) -> list[list[Save | Delete]]:
    """The actions for epochs ``start..len(losses)``, each seeing the losses logged so far."""
    query = FakeQuery()
    query.values[Split.VALID]["Loss"] = {e: losses[e - 1] for e in range(1, start)}
    result = []
    for epoch in range(start, len(losses) + 1):
        query.values[Split.VALID]["Loss"][epoch] = losses[epoch - 1]
        result.append(strategy.checkpointing(epoch, query))
    return result


def kept_epochs(actions: list[list[Save | Delete]]) -> set[int]:
    """The epochs on disk after applying the actions in order."""
    kept: set[int] = set()
    for epoch, epoch_actions in enumerate(actions, start=1):
        for action in epoch_actions:
            if isinstance(action, Save):
                kept.add(epoch)
            else:
                kept.discard(action.epoch)
    return kept


losses_st = st.lists(
    st.floats(min_value=0.0, max_value=10.0, allow_nan=False, width=16), min_size=1, max_size=12
)


def test_keep_last_two_actions_match_burn() -> None:
    """KeepLast(2) saves every epoch and deletes epoch - 2 once positive."""
    assert run(KeepLastNCheckpoints(2), [1.0] * 4) == [
        [Save()],
        [Save()],
        [Save(), Delete(1)],
        [Save(), Delete(2)],
    ]


def test_metric_strategy_actions_match_burn() -> None:
    """The metric strategy deletes the old best before saving a new best."""
    actions = run(MetricCheckpointingStrategy("Loss"), [3.0, 2.0, 2.5, 1.0])
    assert actions == [[Save()], [Delete(1), Save()], [], [Delete(2), Save()]]


def test_metric_strategy_without_data_keeps_the_last_epoch() -> None:
    """With nothing logged the metric strategy behaves like keep-last-1."""
    strategy = MetricCheckpointingStrategy("Accuracy", direction=Direction.HIGHEST)
    query = FakeQuery({1: 1.0})
    assert strategy.checkpointing(1, query) == [Save()]
    assert strategy.checkpointing(2, query) == [Delete(1), Save()]


def test_metric_strategy_highest_direction_and_metric_object() -> None:
    """A metric object's name is used; HIGHEST keeps the largest value."""

    @dataclass
    class Accuracy:
        name: str = "Loss"

    strategy = MetricCheckpointingStrategy(Accuracy(), direction=Direction.HIGHEST)
    assert run(strategy, [0.5, 0.4, 0.9]) == [[Save()], [], [Delete(1), Save()]]


def test_composed_default_losses_falling_keeps_last_two() -> None:
    """The seed's example: loss falling, after epoch 3 epochs 2 and 3 remain."""
    actions = run(default_checkpointing_strategy(), [3.0, 2.0, 1.0])
    assert actions == [[Save()], [Save()], [Save(), Delete(1)]]
    assert kept_epochs(actions) == {2, 3}


def test_composed_default_best_first_epoch_is_kept() -> None:
    """The seed's example: loss lowest at epoch 1, epochs 1, 2 and 3 remain."""
    actions = run(default_checkpointing_strategy(), [1.0, 2.0, 3.0])
    assert actions == [[Save()], [Save()], [Save()]]
    assert kept_epochs(actions) == {1, 2, 3}


@settings(max_examples=60, deadline=None)
@given(losses=losses_st, n=st.integers(min_value=1, max_value=4))
def test_composed_keeps_last_n_and_best(losses: list[float], n: int) -> None:
    """Composed[KeepLast(n), best Loss] keeps exactly the last n epochs and the best one."""
    strategy = ComposedCheckpointingStrategy(
        [KeepLastNCheckpoints(n), MetricCheckpointingStrategy("Loss")]
    )
    actions = run(strategy, losses)
    for epoch in range(1, len(losses) + 1):
        prefix = losses[:epoch]
        best = prefix.index(min(prefix)) + 1
        expected = {e for e in range(epoch - n + 1, epoch + 1) if e >= 1} | {best}
        assert kept_epochs(actions[:epoch]) == expected
        assert all(isinstance(a, Save) for a in actions[epoch - 1][:1])  # Save comes first


def test_composed_of_keep_last_keeps_the_larger_window() -> None:
    """Composed[KeepLast(1), KeepLast(3)] deletes an epoch only when both let it go."""
    strategy = ComposedCheckpointingStrategy([KeepLastNCheckpoints(1), KeepLastNCheckpoints(3)])
    actions = run(strategy, [1.0] * 6)
    assert kept_epochs(actions) == {4, 5, 6}
    assert actions[3] == [Save(), Delete(1)]


@settings(max_examples=60, deadline=None)
@given(losses=losses_st.filter(lambda xs: len(xs) >= 2), data=st.data())
def test_restored_strategy_makes_the_same_decisions(
    losses: list[float], data: st.DataObject
) -> None:
    """A strategy restored from JSON state decides like one that was never interrupted."""
    resume_at = data.draw(st.integers(min_value=1, max_value=len(losses) - 1))
    uninterrupted = run(default_checkpointing_strategy(), losses)

    first = default_checkpointing_strategy()
    run(first, losses[:resume_at])
    state = json.loads(json.dumps(first.state_dict()))
    resumed = default_checkpointing_strategy()
    resumed.load_state_dict(state)
    assert run(resumed, losses, start=resume_at + 1) == uninterrupted[resume_at:]


def test_fresh_strategy_after_resume_differs_like_burn() -> None:
    """Without its state a resumed strategy leaks an epoch (Burn's behaviour; "exact resume")."""
    losses = [3.0, 2.0, 1.0, 0.5]
    fresh = run(default_checkpointing_strategy(), losses, start=3)
    assert fresh != run(default_checkpointing_strategy(), losses)[2:]


def test_state_dicts_are_json() -> None:
    """Every strategy's state is plain JSON and round-trips."""
    strategy = default_checkpointing_strategy()
    run(strategy, [2.0, 1.0, 3.0])
    state = strategy.state_dict()
    assert json.loads(json.dumps(state)) == state
    assert state["deleted"] == [[], [3]]
    assert state["strategies"][1] == {
        "strategy": "MetricCheckpointingStrategy",
        "metric": "Loss",
        "current": 2,
    }


def test_load_state_dict_rejects_other_strategies_and_keeps_state() -> None:
    """A state from another strategy raises ValueError and changes nothing."""
    strategy = default_checkpointing_strategy()
    run(strategy, [2.0, 1.0, 3.0])
    before = strategy.state_dict()
    with pytest.raises(ValueError, match="does not fit"):
        strategy.load_state_dict(KeepLastNCheckpoints(2).state_dict())
    broken = json.loads(json.dumps(before))
    broken["strategies"][1]["metric"] = "Accuracy"
    broken["strategies"][0] = {"strategy": "KeepLastNCheckpoints"}
    broken["deleted"] = [[1], [2]]
    with pytest.raises(ValueError, match="Accuracy"):
        strategy.load_state_dict(broken)
    assert strategy.state_dict() == before
    with pytest.raises(ValueError, match="1 strategies"):
        strategy.load_state_dict({**before, "strategies": before["strategies"][:1]})


@pytest.mark.parametrize(
    ("n", "error"),
    [(0, ValueError), (-1, ValueError), (True, TypeError), (1.5, TypeError), ("2", TypeError)],
)
def test_keep_last_rejects_bad_n(n: object, error: type[Exception]) -> None:
    """n must be an int >= 1 (Burn's n = 0 saves then deletes)."""
    with pytest.raises(error, match=f"got {n!r}"):
        KeepLastNCheckpoints(n)  # type: ignore[arg-type]  # invalid on purpose


def test_composed_needs_a_strategy() -> None:
    """An empty composition is refused."""
    with pytest.raises(ValueError, match="at least one"):
        ComposedCheckpointingStrategy([])


def test_metric_strategy_validates_arguments() -> None:
    """The metric needs a name; direction and split are the enums or their values (issue 29,
    item 10: "lowest" and "valid" were refused)."""
    with pytest.raises(TypeError, match="metric must be a metric or a non-empty metric name"):
        MetricCheckpointingStrategy("")
    with pytest.raises(TypeError, match="got <object object"):
        MetricCheckpointingStrategy(object())  # type: ignore[arg-type]  # invalid on purpose
    strategy = MetricCheckpointingStrategy("Loss", direction="highest", split="train")
    assert (strategy.direction, strategy.split) == (Direction.HIGHEST, Split.TRAIN)
    with pytest.raises(ValueError, match="direction must be one of 'lowest', 'highest'"):
        MetricCheckpointingStrategy("Loss", direction="lower")
    with pytest.raises(TypeError, match="direction must be a Direction or one of"):
        MetricCheckpointingStrategy("Loss", direction=1)  # type: ignore[arg-type]  # invalid


def test_strategies_reject_bad_epochs() -> None:
    """Epochs start at 1."""
    with pytest.raises(ValueError, match="got 0"):
        KeepLastNCheckpoints(1).checkpointing(0, FakeQuery())


def test_keep_last_n_counts_saved_checkpoints_and_resumes_with_them() -> None:
    """Asked at epochs 10, 20, 30 (checkpoint_every(epochs=10)), KeepLast(2) deletes 10 at 30;
    a copy restored from its state deletes 20 at 40; a state without the list (0.1.0's, every
    epoch saved) deletes epoch - n."""
    strategy = KeepLastNCheckpoints(2)
    query = FakeQuery()
    assert [strategy.checkpointing(epoch, query) for epoch in (10, 20, 30)] == [
        [Save()],
        [Save()],
        [Save(), Delete(10)],
    ]
    resumed = KeepLastNCheckpoints(2)
    resumed.load_state_dict(json.loads(json.dumps(strategy.state_dict())))
    assert resumed.checkpointing(40, query) == [Save(), Delete(20)]
    old = KeepLastNCheckpoints(2)
    old.load_state_dict({"strategy": "KeepLastNCheckpoints"})
    assert old.checkpointing(5, query) == [Save(), Delete(3)]
    assert old.checkpointing(6, query) == [Save(), Delete(4)]
    with pytest.raises(ValueError, match="kept epochs"):
        old.load_state_dict({"strategy": "KeepLastNCheckpoints", "kept": ["1"]})
