"""What runs under torchrun: `python -m trainer --run-dir RUN`.

Entry points: `trainer.__main__.main` (the command line) and `trainer.train.train`
(one fine-tune of a JobSpec in a run folder). Imports nothing of app, worker or the database.
"""
