"""The scenario schema: the validated description of one simulation, section by section.

Each module holds one section of a scenario file and the checks that section can make alone:
:mod:`~cbsim.schema.workload` (what traffic arrives), :mod:`~cbsim.schema.cluster` (what serves
it), :mod:`~cbsim.schema.scheduler` (how a replica batches), :mod:`~cbsim.schema.speculative`
(how requests decode speculatively), and :mod:`~cbsim.schema.scenario` (the whole, with ``slo``
and ``output``). :mod:`~cbsim.schema.pools` derives the scenario each pool of a cluster runs,
with :mod:`~cbsim.schema.engine_defaults` filling in what the serving engine would choose;
:mod:`~cbsim.schema.problems` turns a validation error into one line naming the field.

Beside the sections: the SLO syntax every command takes (:mod:`~cbsim.schema.slo_syntax`), a
changed ``kind`` carrying the settings that still apply (:mod:`~cbsim.schema.kind_change`),
settings a scenario sets that its engine ignores (:mod:`~cbsim.schema.setting_warnings`), the
nearest key to a misspelt one (:mod:`~cbsim.schema.suggestions`), and a scenario's replica in the
engines' memory terms (:mod:`~cbsim.schema.replica_memory`).

Layer 3: imports :mod:`cbsim.common`, :mod:`cbsim.catalog` and :mod:`cbsim.cost` (models, GPUs,
engine profiles and memory rules), nothing that consumes a scenario. Reading a file, overrides
and the checks that need the workload generator or the fleet are the loading above it,
:mod:`cbsim.run.loading`, which also re-exports every section, so ``from cbsim.run.loading import
Scenario, load_scenario`` works (and ``cbsim.Scenario``, ``cbsim.load_scenario``).
"""
