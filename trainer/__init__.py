"""What runs under torchrun: `python -m trainer --run-dir RUN`.

Entry points: `trainer.__main__.main` (the command line) and `trainer.train.train`
(one fine-tune of a JobSpec in a run folder). Imports nothing of app, worker or the database.

Every process that imports peft or bitsandbytes for TuneDeck (ranks, "Try it", the LoRA
targets preview, the worker's model check) imports this package first, so the one library
warning that says nothing to a user is quieted here (trainer/startup/library_logs.py).
"""
from trainer.startup.library_logs import quiet_known_library_warnings

quiet_known_library_warnings()
