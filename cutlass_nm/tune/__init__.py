"""Autotuning with Optuna: a family's discrete space, a roofline warm start, isolated measurement."""

from .tuner import TuneResult, tune, tune_problem

__all__ = ["TuneResult", "tune", "tune_problem"]
