"""The memory planner and backend advisor: a model's shape (tunedeck.planner.model_shapes,
found by tunedeck.planner.shape_source), the bytes per GPU of each way to train it
(memory_plan, activation_memory), what a step costs (step_cost, against gpu_cards), and the
advice (advice: the fastest set-up that fits). Pure: no torch, no I/O but reading a model's
config.json and safetensors headers."""
