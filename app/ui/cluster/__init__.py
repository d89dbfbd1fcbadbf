"""The Cluster page: the tab's layout and wiring, and its tables."""
