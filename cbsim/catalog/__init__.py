"""The catalog: what cbsim knows of the hardware and models people serve, and the measured data it ships.

Layer 1: imports :mod:`cbsim.common` only.

- :mod:`~cbsim.catalog.hardware`: GPUs (peaks, memory, links) by name.
- :mod:`~cbsim.catalog.models`, :mod:`~cbsim.catalog.model_catalog`,
  :mod:`~cbsim.catalog.model_shape`, :mod:`~cbsim.catalog.hf_config`,
  :mod:`~cbsim.catalog.vision_towers`, :mod:`~cbsim.catalog.model_details`: model architectures,
  by catalog name, Hugging Face id or ``config.json``.
- :mod:`~cbsim.catalog.quantization`, :mod:`~cbsim.catalog.model_bytes`: checkpoint formats and
  the bytes a model's weights and each token's KV take per GPU.
- :mod:`~cbsim.catalog.acceptance_profiles`, :mod:`~cbsim.catalog.engine_presets`: published
  speculative acceptance rates and the engines' draft-length policies.
- ``data/``: shipped traces, calibration measurements and fitted profiles, with their licences
  (``data/LICENSES.md``).
"""
