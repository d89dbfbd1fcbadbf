"""The model a job trains: where it comes from, the built-in one, the method's adapters and their targets, the LoRA preview, and the export of the trained weights."""
