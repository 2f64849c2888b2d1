"""A run's outputs: the summary, latency percentiles, time windows, stability verdicts and their names.

- :mod:`~cbsim.outputs.summary`: the summary's figures from the request and iteration columns.
- :mod:`~cbsim.outputs.itl`, :mod:`~cbsim.outputs.itl_chunk`: inter-token latency per token and
  per streamed chunk.
- :mod:`~cbsim.outputs.timeseries_windows`, :mod:`~cbsim.outputs.iteration_stream`: fixed-window
  time series, and iterations streamed to parquet as they run.
- :mod:`~cbsim.outputs.stability`: whether a run's queue was stable and its SLO verdict.
- :mod:`~cbsim.outputs.metric_columns`, :mod:`~cbsim.outputs.metric_names`: output columns and
  the names people read for them.
- :mod:`~cbsim.outputs.fleet_plot`, :mod:`~cbsim.outputs.time_axis`,
  :mod:`~cbsim.outputs.plot_legends`: chart pieces shared by plots and reports.

The engine records into these (:mod:`cbsim.engine.recorder`); :mod:`cbsim.run` turns them into
:class:`~cbsim.run.results.Results`.

Layer 6: imports :mod:`cbsim.common`, :mod:`cbsim.catalog`, :mod:`cbsim.cost`, :mod:`cbsim.schema`,
:mod:`cbsim.workload`, :mod:`cbsim.memory`.
"""
