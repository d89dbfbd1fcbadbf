"""The trackers a job's spec names in report_to, written from the job's stored rows."""
