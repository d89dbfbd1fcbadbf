"""The job spec, the one typed description of a job: its fields and their words (fields.py),
its sections (sections.py), the rules that read more than one field (job_spec.py), unknown
keys named with the field likely meant (unknown_fields.py), a spec as YAML or JSON text and a
validation error as lines (text.py), and `--set KEY=VALUE` overrides (overrides.py)."""
