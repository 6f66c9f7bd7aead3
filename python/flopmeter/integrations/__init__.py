"""Drop-in integrations: one line in the trainers people already run.

- ``flopmeter.integrations.transformers.attach(trainer)``: the Hugging Face ``Trainer`` and every trainer built
  on it (TRL's ``SFTTrainer``, LLaMA-Factory, ms-swift).
- ``flopmeter.integrations.lightning.FlopmeterCallback()``: a Lightning callback (``pytorch_lightning`` or
  ``lightning.pytorch``).

Each module imports its framework only when it is imported itself; ``import flopmeter`` imports none of them.
"""
