"""A stand-in `trainer` package for bench/freshness.py: a `tunedeck up` started with
bench/fake_trainer/ as its folder launches this instead of the real trainer (torchrun's
`python -m trainer` looks in the current folder first). See __main__.py."""
