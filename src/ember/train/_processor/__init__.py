"""Event processors: what turns the loop's events into metrics, logs and rendering."""

from ember.train._processor.asynchronous import AsyncProcessorTraining
from ember.train._processor.base import Event, EventProcessor, SilentProcessor
from ember.train._processor.full import FullEventProcessorTraining

__all__ = [
    "AsyncProcessorTraining",
    "Event",
    "EventProcessor",
    "FullEventProcessorTraining",
    "SilentProcessor",
]
