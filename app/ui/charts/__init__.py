"""The job page's charts, drawn on the server as static HTML and SVG."""
