"""Tests of ember.train._checkpoint.learning (LearningCheckpointer), by concept."""
