"""The ``cbsim`` command line: every subcommand's flags, messages and exit codes.

:mod:`~cbsim.cli.commands` holds the command group and the run/validate/cost commands (the study
commands are loaded from :mod:`cbsim.studies` when called); :mod:`~cbsim.cli.terminal` prints a
run's summary; :mod:`~cbsim.cli.catalog` lists what the catalog holds.

Layer 10, the top: imports any package; no package imports it.
"""
