"""Autotuning with Optuna: a family's discrete space, a roofline warm start, isolated measurement."""

from .batch import tune
from .tuner import TuneResult, tune_problem

__all__ = ["TuneResult", "tune", "tune_problem"]
