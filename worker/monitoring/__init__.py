"""What a worker tells Prometheus on its own /metrics (TUNEDECK_WORKER_METRICS_PORT): its
GPUs as its heartbeat last sampled them, the jobs it supervises and how far their tail is
behind, the metric points it stored."""
