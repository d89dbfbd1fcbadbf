"""The New job form's handlers: the form as a spec, its preview, plan, data check, LoRA targets and upload."""
