"""Evaluation: scoring a model on test sets (``EvaluatorBuilder``, Burn's Evaluator) and
collecting its predictions."""
