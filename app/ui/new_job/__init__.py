"""The New job page: its layout table (form_layout), the tab built from it (tab, form_fields,
preset_row, plan_panel) and wired (wiring), and its handlers, plain functions of plain values:
the form as a spec, its preview, plan, data check, LoRA targets and upload."""
