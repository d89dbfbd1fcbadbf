"""POST /api/plan and `tunedeck plan` answer with the same plan."""
import json
import subprocess
import sys



SPEC = {"model": "meta-llama/Llama-2-13b-hf", "method": "full", "backend": "fsdp",
        "max_steps": 100, "micro_batch_size": 2, "seq_len": 2048,
        "fsdp": {"activation_checkpointing": True}}



def test_plan_has_every_backend_a_verdict_and_a_recommendation(client):
    response = client.post("/api/plan", json={"spec": SPEC,
                                              "gpus": {"count": 4, "memory_gb": 80, "nodes": 1}})
    assert response.status_code == 200
    plan = response.json()
    for name in ("ddp", "zero2", "zero2_offload", "fsdp", "fsdp_offload"):
        assert set(plan[name]["per_gpu_gb"]) == {"params", "grads", "optimizer", "activations",
                                                 "other", "total"}
        assert plan[name]["fits"] in ("fits", "tight", "does not fit")
    assert plan["recommended"]["strategy"] == "fsdp" and plan["reasons"]
    assert plan["strategies"] == ["ddp", "zero2", "zero2_offload", "fsdp", "fsdp_offload"]
    assert plan["gpus"] == {"count": 4, "memory_gb": 80, "nodes": 1, "card": "H100"}
    a100 = client.post("/api/plan", json={"spec": SPEC, "gpus": {"count": 4, "card": "A100"}})
    assert a100.json()["recommended"]["step_seconds"] > plan["recommended"]["step_seconds"]
    response = client.post("/api/plan", json={"spec": SPEC, "gpus": {"card": "Voodoo 2"}})
    assert response.status_code == 422 and "unknown card" in response.text


def test_cli_plan_json_is_the_api_plan(client, tmp_path):
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(SPEC))
    result = subprocess.run([sys.executable, "-m", "cli", "plan", str(spec_file),
                             "--gpus", "4", "--gpu-memory-gb", "80", "--json"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    api = client.post("/api/plan", json={"spec": SPEC, "gpus": {"count": 4, "memory_gb": 80}}).json()
    assert json.loads(result.stdout) == api
    table = subprocess.run([sys.executable, "-m", "cli", "plan", str(spec_file),
                            "--gpus", "4"], capture_output=True, text=True, timeout=60)
    assert "recommended: fsdp" in table.stdout and "zero2_offload" in table.stdout
    card = subprocess.run([sys.executable, "-m", "cli", "plan", str(spec_file),
                           "--gpu-card", "Voodoo 2"], capture_output=True, text=True, timeout=60)
    assert card.returncode != 0 and "--gpu-card" in card.stderr and "unknown card" in card.stderr


def test_gpus_default_to_the_spec_and_bad_input_names_its_field(client):
    plan = client.post("/api/plan", json={"spec": {**SPEC, "num_gpus": 2}}).json()
    assert plan["gpus"] == {"count": 2, "memory_gb": 80.0, "nodes": 1, "card": "H100"}
    response = client.post("/api/plan", json={"spec": SPEC, "gpus": {"count": 0}})
    assert response.status_code == 422
    assert ["body", "gpus", "count"] in [error["loc"] for error in response.json()["detail"]]
    response = client.post("/api/plan", json={"spec": {**SPEC, "model": "nobody/unknown"}})
    assert response.status_code == 422
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body", "spec", "model"] and "nobody/unknown" in detail["msg"]


def test_a_cpu_plan_is_asked_for_by_device_and_the_cli_answers_the_same(client, tmp_path):
    """device cpu: the ranks are CPU processes, memory_gb the RAM each may use; the API's
    schema says so, and `tunedeck plan --cpu` prints the same plan in words."""
    gpus = {"count": 2, "memory_gb": 12, "device": "cpu"}
    response = client.post("/api/plan", json={"spec": SPEC, "gpus": gpus})
    assert response.status_code == 200, response.text
    plan = response.json()
    assert plan["gpus"] == {**gpus, "nodes": 1, "card": None}
    assert plan["recommended"] is None or plan["recommended"]["step_seconds"] is None
    assert not any("H100" in reason or "Step times" in reason for reason in plan["reasons"])
    assert "does not fit" == plan["fsdp"]["fits"]  # 13B in full: never in 12 GB a rank
    schema = client.get("/openapi.json").json()["components"]["schemas"]["GpuRequest"]
    assert "CPU processes" in schema["properties"]["device"]["description"]
    refused = client.post("/api/plan", json={"spec": SPEC, "gpus": {"device": "tpu"}})
    assert refused.status_code == 422 and "device" in refused.text
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(SPEC))
    result = subprocess.run([sys.executable, "-m", "cli", "plan", str(spec_file),
                             "--gpus", "2", "--gpu-memory-gb", "12", "--cpu"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "1 node x 2 CPU ranks, 12 GB of RAM each. Per rank" in result.stdout
    assert "H100" not in result.stdout and " a step" not in result.stdout
