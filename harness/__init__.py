"""What tests and benches drive TuneDeck with: real services started and stopped, chaos
scenarios, datasets made to a shape. Never imported by the product's own packages, and not
installed with them; a bench imports this, never a test module."""
