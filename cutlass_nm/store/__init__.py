"""The tuning database: every measurement, the winner per (environment, problem), lookup for dispatch."""
