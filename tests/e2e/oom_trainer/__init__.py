"""A stand-in trainer for the out-of-memory end-to-end test, run by the ranks as
`python -m tests.e2e.oom_trainer` (the `trainer_module` setting): TuneDeck's own entry point
with only `trainer.train.train` replaced (train.py here)."""
