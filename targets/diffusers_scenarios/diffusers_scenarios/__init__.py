"""Scenarios that validate diffusers pipelines with the harness, from outside.

The pipelines are diffusers' own (``LTX2Pipeline``, ``WanPipeline``), built tiny from configs
with seeded random weights (:mod:`.components`); they are instrumented only through forward
hooks and ``callback_on_step_end`` (:mod:`.instrument`); :mod:`.scenarios` holds the functions
the case files in ``cases/diffusers/`` name. Importing this package imports nothing heavy:
torch and diffusers are imported by the modules that use them.
"""
