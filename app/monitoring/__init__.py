"""What the web tells Prometheus: GET /metrics (the cluster as the database has it, at
scrape time, and this process's own request latencies and chart-cache reads)."""
