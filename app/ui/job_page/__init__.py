"""The Job page: the tab's layout and wiring, its failure, live and Try it panels, and its
handlers (one job's page as plain data, its buttons, live charts and planned memory)."""
