"""Drop-in integrations: one line in the trainers people already run.

- ``flopmeter.watch(model, optimizer)`` (``flopmeter/watch.py``): any PyTorch loop, through a forward pre-hook
  and the optimizer's step.
- ``flopmeter.integrations.transformers.attach(trainer)``: the Hugging Face ``Trainer`` and every trainer built
  on it (TRL's ``SFTTrainer``, LLaMA-Factory, ms-swift).
- ``flopmeter.integrations.hf_callback.FlopmeterTrainerCallback()``: the same, for trainers that build the
  ``Trainer`` themselves and take callbacks (LLaMA-Factory's ``run_exp(callbacks=...)``; ms-swift through
  ``flopmeter.integrations.ms_swift``, an ``--external_plugins`` file).
- ``flopmeter.integrations.axolotl.FlopmeterPlugin``: an Axolotl plugin (``plugins:`` in its YAML).
- ``flopmeter.integrations.verl``: verl's FLOP counter, loaded by verl itself (a ``verl.plugins`` entry point).
- ``flopmeter.integrations.lightning.FlopmeterCallback()``: a Lightning callback (``pytorch_lightning`` or
  ``lightning.pytorch``).

They share one batch reader (``_batch_reader``) and one reader of the model and its training regime
(``_regime``). Each module imports its framework only when it is imported itself; ``import flopmeter`` imports
none of them.
"""
