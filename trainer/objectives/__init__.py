"""What a step optimises: the objectives beside each other (supervised fine-tuning's answer-
token loss in trainer/token_loss.py; preference tuning's pair losses here)."""
