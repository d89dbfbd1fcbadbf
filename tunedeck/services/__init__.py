"""What the services the CLI starts share: the Celery app and its queues (broker.py, with the
embedded folder broker's files in broker_files.py), the one logging set-up (logs.py), and the
long-lived helper processes that answer JSON lines (line_server.py)."""
