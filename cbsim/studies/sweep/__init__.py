"""Sweeps: one base scenario, many variations, every result in one table
(:mod:`~cbsim.studies.sweep.runner` describes the sweep file). The grid and its points
(:mod:`~cbsim.studies.sweep.grid`), running them locally or on Ray
(:mod:`~cbsim.studies.sweep.execution`), the sweep's folder (:mod:`~cbsim.studies.sweep.folder`)
and its table (:mod:`~cbsim.studies.sweep.table`).
"""
