"""A stand-in trainer for the benches (bench/freshness.py, bench/live_view.py): a `tunedeck up`
started with harness.servers.fake_trainer_environment() has its ranks run
`python -m fake_trainer` (the `trainer_module` setting) from this folder, put on PYTHONPATH,
instead of TuneDeck's trainer. See __main__.py."""
