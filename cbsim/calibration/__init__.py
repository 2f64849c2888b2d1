"""Calibration: fitting the roofline cost model to measured GPU timings, and checking its error.

``grid`` (smooth log-grid corrections), ``profile`` (the fitted parameter files), and the fits and
reports per op family. See ``cbsim calibrate --help``.
"""

from __future__ import annotations
