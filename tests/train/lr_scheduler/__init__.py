"""Tests of ember.train._lr_scheduler."""
