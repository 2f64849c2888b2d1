"""The common ground every part of cbsim stands on: errors a user reads, numbers and limits,
reading files, random streams, exact event times, child processes, output folders, the console,
tables as columns.

Layer 0: imports nothing of cbsim outside this package. Everything may import it.

- :mod:`~cbsim.common.errors`: :class:`CbsimError`, the one error a user sees (file, field, reason).
- :mod:`~cbsim.common.numbers`, :mod:`~cbsim.common.limits`: finite numbers; the bounds on every
  size a scenario may ask for.
- :mod:`~cbsim.common.documents`: YAML/JSON files read with a clear message when they are not.
- :mod:`~cbsim.common.rng`: named random streams derived from the scenario seed;
  :mod:`~cbsim.common.pcg64`: their PCG64 stepped in compiled code from four machine words.
- :mod:`~cbsim.common.event_time`: absolute times reached exactly in SimPy.
- :mod:`~cbsim.common.stable_sort`: a stable argsort for compiled kernels.
- :mod:`~cbsim.common.output_folders`, :mod:`~cbsim.common.output_paths`,
  :mod:`~cbsim.common.exchange`: results written atomically, never over a user's file.
- :mod:`~cbsim.common.processes`, :mod:`~cbsim.common.parent_watch`,
  :mod:`~cbsim.common.interrupts`: worker processes and Ctrl-C.
- :mod:`~cbsim.common.console`, :mod:`~cbsim.common.progress`: what a long command prints.
- :mod:`~cbsim.common.columns`: a table held as numpy columns, its DataFrame built on demand.
"""
