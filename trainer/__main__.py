"""`python -m trainer --run-dir RUN [--metrics on|off] [--resume]`, run by torchrun on every rank.

The trainer reads only the run folder (and `$TUNEDECK_HOME/builtin/` for built-in assets).
A failure becomes an "error" notice in this rank's metrics file, then propagates so the
rank, and so torchrun, exits non-zero.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

# Progress bars redraw with carriage returns, which only clutter logs/torchrun.log; set
# before transformers is imported, which reads it once.
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

from trainer.startup.startup_gc import pause_collection

# Before the heavy imports below and in train(), which resumes it once they are done.
pause_collection()

from tunedeck.spec.job_spec import JobSpec  # noqa: E402
from tunedeck.run_folder import RunFolder, read_json  # noqa: E402

from trainer.failure_notice import accelerator_memory_reading, error_notice  # noqa: E402
from trainer.rank import (configure_cuda_allocator, die_with_launcher,  # noqa: E402
                          rank_context_from_environment, set_cpu_threads)
from trainer.telemetry import open_telemetry  # noqa: E402
from trainer.startup.unused_libraries import keep_unused_libraries_out  # noqa: E402


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m trainer", description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True, type=Path, help="the run folder the worker wrote")
    parser.add_argument("--metrics", choices=("on", "off"), default="on",
                        help="write metrics/rank-<K>.jsonl (default on)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the run folder's latest complete checkpoint "
                             "(from step 0 when there is none)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    die_with_launcher()
    configure_cuda_allocator()
    context = rank_context_from_environment()
    set_cpu_threads(context)
    run = RunFolder(arguments.run_dir.resolve())
    telemetry = open_telemetry(enabled=arguments.metrics == "on",
                               path=run.rank_metrics_file(context.rank),
                               rank=context.rank, device=context.device)
    try:
        spec = JobSpec.model_validate(read_json(run.spec_file))
        keep_unused_libraries_out(spec)
        from trainer.train import train

        train(spec, run, context=context, telemetry=telemetry, resume=arguments.resume)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:  # noqa: BLE001 - every failure says why, then propagates
        # MemoryError is an Exception; torch.distributed.checkpoint's CheckpointException
        # (a save that failed on any rank, a full disk among them) is a BaseException.
        telemetry.notice(error_notice(error, rank=context.rank,
                                      memory_reading=accelerator_memory_reading(context.device)),
                         level="error")
        raise
    finally:
        telemetry.close()
    return 0


def exit_without_finalizing(code: int) -> None:
    """Leave a finished rank without the interpreter's teardown.

    The process group is destroyed by then, but gloo's C++ threads can outlive it in objects
    Python frees only at finalization; freeing them there, in whatever order the interpreter
    picks, now and then aborts a rank that has done all its work ("terminate called without
    an active exception", exit -6), and torchrun then fails the job. Everything the run
    leaves behind is written and closed before this point."""
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)


if __name__ == "__main__":
    exit_without_finalizing(main())
