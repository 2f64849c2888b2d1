"""Calibration: fitting the roofline cost model to measured GPU timings, and checking its error.

``grid`` (fitting smooth log-grid corrections), ``profile`` (writing the fitted parameter files; the
file types and their loading live in :mod:`cbsim.cost.profile`), and the fits and
reports per op family. See ``cbsim calibrate --help``.
"""

from __future__ import annotations
