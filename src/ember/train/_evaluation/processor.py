"""The evaluation's event processor: the training processor, speaking of tests.

Items are handled exactly as in training (``FullEventProcessorTraining``: the metrics updated in
registration order, losses read back per chunk, entries logged, the renderer told) on the
``test`` split; what differs is the events around them. Each test logs to its own directory,
``{directory}/test/{name}/{Metric}.log``, through a flat :class:`FileMetricLogger` made when the
test starts and closed (its lines on disk) when it ends. The final value of every numeric metric
is kept for the summary.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from ember.train._events import EndEvaluation, EndTest, StartEvaluation, StartTest
from ember.train._logger.file import FileMetricLogger
from ember.train._logger.store import EventStore
from ember.train._metric.base import MetricDefinition, metric_definition
from ember.train._metric.registered import MetricsTraining
from ember.train._metric.values import MetricState
from ember.train._processor import Event, FullEventProcessorTraining
from ember.train._renderer.base import EvaluationRenderer
from ember.train._vocabulary import Split

__all__ = ["FullEventProcessorEvaluation"]

log = logging.getLogger("ember.train")


class FullEventProcessorEvaluation(FullEventProcessorTraining):
    """Computes the test metrics, logs them under ``directory/test`` and drives ``renderer``."""

    def __init__(
        self, metrics: MetricsTraining, renderer: EvaluationRenderer, directory: Path
    ) -> None:
        super().__init__(metrics, renderer, EventStore([]))
        self.evaluation_renderer = renderer
        self.directory = directory
        self.values: dict[str, dict[str, float]] = {}
        """Per test, the final value of each numeric metric (read after a flush)."""
        self._test = ""

    def _process_event(self, split: Split, event: Event) -> None:
        renderer = self.evaluation_renderer
        if isinstance(event, StartTest):
            self._test = event.name
            self.values[event.name] = {}
            logger = FileMetricLogger(self.directory / Split.TEST.value / event.name, flat=True)
            self.store = EventStore([logger])
            self.store.start_split(Split.TEST, 1)
            renderer.start_test(event.name, event.total_items)
        elif isinstance(event, EndTest):
            self._publish(Split.TEST, self.metrics.end_epoch(Split.TEST))
            self.store.end_split(Split.TEST)
            self.store.close()  # the test's lines are on disk before the next test starts
            renderer.end_test()
        elif isinstance(event, StartEvaluation):
            definitions: dict[str, MetricDefinition] = {}
            for metric in self.metrics.metrics(Split.TEST):
                definitions.setdefault(metric.name, metric_definition(metric))
            for definition in definitions.values():
                renderer.register_metric(definition)
            renderer.start_evaluation(event.total_tests)
        elif isinstance(event, EndEvaluation):
            renderer.end_evaluation()
            renderer.on_test_end(event.summary)
        else:
            super()._process_event(split, event)

    def _publish(self, split: Split, states: Sequence[MetricState]) -> None:
        if not states:
            return
        self.store.log(split, states, self._step)
        test, values = self._test, self.values[self._test]
        for state in states:
            self.evaluation_renderer.update_test(test, state)
            if state.numeric is not None and state.numeric.final:
                values[state.entry.name] = state.numeric.value

    def log_progress(self) -> None:
        """Write the test's iterations processed since the last call to the application log."""
        span = self._iterations.pop(Split.TEST, None)
        if span is not None:
            log.info("Iterations %d-%d of test %r", span[1], span[3], self._test)
