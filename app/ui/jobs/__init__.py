"""The Jobs page: the tab's layout and wiring, its table and the ticked rows' actions."""
