"""The Compare page: the tab's layout and wiring, and the comparison it draws."""
