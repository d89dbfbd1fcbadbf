"""The Job page's handlers: one job's page as plain data, its buttons, live charts and planned memory."""
