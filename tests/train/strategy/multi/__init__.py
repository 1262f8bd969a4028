"""Tests of ember.train._strategy.multi (MultiDevice), by concept."""
