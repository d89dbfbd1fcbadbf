"""`tunedeck`: up, web, worker, migrate, submit, plan, preflight, lora-targets, render; the
job page from a terminal: jobs, status, logs, watch, cancel, resume, download, generate,
delete, archive, unarchive (docs/reference/cli.md); and the accounts: user, token, audit."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from cli.server_calls import load_spec_or_exit, post_to_server, with_absolute_local_paths

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    arguments = parser.parse_args(argv)
    if not getattr(arguments, "handler", None):
        parser.print_help()
        return 2
    try:
        return arguments.handler(arguments) or 0
    except KeyboardInterrupt:  # Ctrl-C out of watch or logs --follow: no traceback
        return 130


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tunedeck", description=__doc__)
    commands = parser.add_subparsers(title="commands")

    up = commands.add_parser("up", help="one host: migrate, then run web and a worker")
    _add_listen_options(up)
    up.set_defaults(handler=_run_up)

    web = commands.add_parser("web", help="the web service (REST API and UI)")
    _add_listen_options(web)
    web.set_defaults(handler=_run_web)

    worker = commands.add_parser("worker", help="a Celery worker for this host's GPUs")
    worker.add_argument("--concurrency", type=int, default=None, help="jobs at once")
    worker.add_argument("--executor", choices=("local", "slurm"), default=None,
                        help="local: torchrun on this host's GPUs; slurm: submit each job with "
                             "sbatch from a login node (default TUNEDECK_EXECUTOR or local)")
    worker.set_defaults(handler=_run_worker)

    migrate = commands.add_parser("migrate", help="alembic upgrade head on the database")
    migrate.set_defaults(handler=_run_migrate)

    submit = commands.add_parser("submit", help="submit SPEC.yaml to a running server")
    submit.add_argument("spec", type=Path)
    submit.add_argument("--set", dest="assignments", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="change a field of SPEC.yaml before it is checked and sent (again "
                             "for each field): max_steps=50, a section's field as lora.r=16; "
                             "the value is read as YAML (numbers, true, [q_proj, v_proj])")
    _add_server_options(submit)
    submit.set_defaults(handler=_run_submit)

    resume = commands.add_parser("resume", help="resume a failed or cancelled job from its "
                                 "latest checkpoint")
    resume.add_argument("job_id", type=int)
    _add_server_options(resume)
    resume.set_defaults(handler=_run_resume)

    delete = commands.add_parser("delete", help="delete a finished job: its rows and its run "
                                 "folder (cancel a queued or running one first)")
    delete.add_argument("job_id", type=int)
    delete.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    _add_server_options(delete)
    delete.set_defaults(handler=_run_delete)

    for name, summary in (("archive", "hide a job from the job lists"),
                          ("unarchive", "show an archived job in the job lists again")):
        archiving = commands.add_parser(name, help=summary)
        archiving.add_argument("job_id", type=int)
        _add_server_options(archiving)
        archiving.set_defaults(handler=_run_archive, archive_route=name)

    from cli.account_commands import add_account_commands
    from cli.download_command import add_download_command
    from cli.generate_command import add_generate_command
    from cli.job_commands import add_job_commands
    from cli.logs_command import add_logs_command
    from cli.lora_targets_command import add_lora_targets_command
    from cli.preflight_command import add_preflight_command
    from cli.watch_command import add_watch_command

    add_account_commands(commands)
    add_preflight_command(commands, add_server_options=_add_server_options)
    add_lora_targets_command(commands, add_server_options=_add_server_options)
    add_watch_command(commands, add_server_options=_add_server_options)
    add_job_commands(commands, add_server_options=_add_server_options)
    add_logs_command(commands, add_server_options=_add_server_options)
    add_download_command(commands, add_server_options=_add_server_options)
    add_generate_command(commands, add_server_options=_add_server_options)

    plan = commands.add_parser("plan", help="memory per GPU (or CPU rank) of SPEC.yaml under "
                               "each backend, and which to use")
    plan.add_argument("spec", type=Path)
    plan.add_argument("--gpus", type=int, default=None, help="GPUs per node (default the spec's)")
    plan.add_argument("--gpu-memory-gb", type=float, default=None,
                      help="memory of one GPU, GB (default 80, or the --gpu-card's own)")
    plan.add_argument("--nodes", type=int, default=None, help="default the spec's num_nodes")
    plan.add_argument("--gpu-card", default=None,
                      help="the card, for step times (H100, A100, RTX 4090, ...); default the "
                           "common card of --gpu-memory-gb")
    _add_device_option(plan)
    plan.add_argument("--json", action="store_true", help="print the JSON of POST /api/plan")
    plan.set_defaults(handler=_run_plan)

    render = commands.add_parser("render", help="write the backend config and launch command")
    render.add_argument("spec", type=Path)
    render.add_argument("--out", type=Path, required=True)
    render.set_defaults(handler=_run_render)
    return parser


def _add_server_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", default=None,
                        help="the server's URL; default TUNEDECK_URL, else "
                             "http://TUNEDECK_HOST:TUNEDECK_PORT")
    parser.add_argument("--token", default=None,
                        help="an API token (`tunedeck token create`); default TUNEDECK_TOKEN. "
                             "Prefer the variable: a command line is visible to other users")


def _add_listen_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=None, help="default TUNEDECK_HOST or 127.0.0.1")
    parser.add_argument("--port", type=int, default=None, help="default TUNEDECK_PORT or 7860")


def _settings_with(arguments: argparse.Namespace):
    """The Settings of the environment, with what the command line gave instead."""
    from tunedeck.settings import Settings

    fields = {"host": "host", "port": "port", "concurrency": "worker_concurrency",
              "executor": "executor"}
    overrides = {field: getattr(arguments, option) for option, field in fields.items()
                 if getattr(arguments, option, None) is not None}
    return Settings(**overrides)


def _configure_logs(settings, service: str, worker_name: str | None = None) -> None:
    from tunedeck.services.logs import configure_logging

    configure_logging(service=service, log_format=settings.log_format, level=settings.log_level,
                      worker_name=worker_name)


def _run_up(arguments: argparse.Namespace) -> int:
    from cli.services import run_web_and_worker

    settings = _settings_with(arguments)
    _configure_logs(settings, "up")
    return run_web_and_worker(settings)


def _run_web(arguments: argparse.Namespace) -> int:
    import uvicorn

    from app.auth.middleware import OpenAccessRefused
    from app.main import create_app
    from cli.services import make_default_data_folder

    settings = _settings_with(arguments)
    _configure_logs(settings, "web")
    make_default_data_folder(settings)  # `up` runs this web too
    try:
        app = create_app(settings)  # its lifespan runs the cluster sweep
    except OpenAccessRefused as error:
        sys.exit(f"tunedeck web: {error}")
    # log_config=None: uvicorn's lines go through the one set-up above; its own access log
    # is off (app/request_log.py writes one without query strings).
    uvicorn.run(app, host=settings.host, port=settings.port, log_config=None,
                log_level=settings.log_level.lower(), access_log=False)
    return 0


def _run_worker(arguments: argparse.Namespace) -> int:
    from cli.services import run_worker

    settings = _settings_with(arguments)
    _configure_logs(settings, "worker")
    return run_worker(settings)


def _run_migrate(_arguments: argparse.Namespace) -> int:
    from tunedeck.accounts.redaction import redact_url
    from tunedeck.db.migrate import upgrade_database
    from tunedeck.settings import load_settings

    settings = load_settings()
    database_url = settings.resolved_database_url
    upgrade_database(database_url)
    print(f"database {redact_url(database_url)} is at the latest migration")
    if settings.initial_admin_password is not None:
        _create_initial_admin(settings)
    return 0


def _create_initial_admin(settings) -> None:
    from app.actions.accounts import create_initial_admin
    from tunedeck.db.engine import Database

    database = Database(settings.resolved_database_url)
    try:
        created = create_initial_admin(
            name=settings.initial_admin,
            password=settings.initial_admin_password.get_secret_value(), database=database)
    finally:
        database.dispose()
    if created:
        print(f"created the initial admin {settings.initial_admin} "
              "(TUNEDECK_INITIAL_ADMIN_PASSWORD)")


def _run_submit(arguments: argparse.Namespace) -> int:
    spec = with_absolute_local_paths(load_spec_or_exit(arguments.spec, arguments.assignments))
    job = post_to_server(arguments, "/api/jobs", spec.model_dump(mode="json"),
                          expected_status=201, refusal="server refused the job")
    print(job["id"])
    return 0


def _run_resume(arguments: argparse.Namespace) -> int:
    job = post_to_server(arguments, f"/api/jobs/{arguments.job_id}/resume", None,
                          expected_status=202, refusal=f"job {arguments.job_id} not resumed")
    print(f"job {job['id']} {job['status']}: resumes from its latest checkpoint")
    return 0


def _run_delete(arguments: argparse.Namespace) -> int:
    job_id = arguments.job_id
    if not arguments.yes:
        answer = input(f"Really delete job {job_id} and its run folder? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print(f"job {job_id} kept")
            return 1
    deleted = post_to_server(arguments, f"/api/jobs/{job_id}", None, method="DELETE",
                             expected_status=200, refusal=f"job {job_id} not deleted")
    print(f"job {deleted['id']} deleted; {deleted['note']}")
    return 0


def _run_archive(arguments: argparse.Namespace) -> int:
    route = arguments.archive_route
    job = post_to_server(arguments, f"/api/jobs/{arguments.job_id}/{route}", None,
                         expected_status=200, refusal=f"job {arguments.job_id} not {route}d")
    print(f"job {job['id']} {'archived' if job['archived'] else 'unarchived'}")
    return 0


def _add_device_option(plan: argparse.ArgumentParser) -> None:
    """--device, as the plan request's field describes it (--cpu for short)."""
    from typing import get_args

    from tunedeck.planner.gpu_cards import Device
    from tunedeck.planner.plan_request import GpuRequest

    field = GpuRequest.model_fields["device"]
    plan.add_argument("--device", choices=get_args(Device), default=field.default,
                      help=f"{field.description}; --gpu-memory-gb is then the RAM per rank")
    plan.add_argument("--cpu", dest="device", action="store_const", const="cpu",
                      help="the same as --device cpu")


def _run_plan(arguments: argparse.Namespace) -> int:
    import json

    from pydantic import ValidationError

    from tunedeck.spec.text import format_validation_error
    from tunedeck.planner.plan_request import GpuRequest, plan_json

    spec = load_spec_or_exit(arguments.spec)
    try:
        gpus = GpuRequest(count=arguments.gpus, memory_gb=arguments.gpu_memory_gb,
                          nodes=arguments.nodes, card=arguments.gpu_card,
                          device=arguments.device)
        plan = plan_json(spec, gpus)
    except ValidationError as error:
        sys.exit(f"--gpus/--gpu-memory-gb/--nodes/--gpu-card/--device: "
                 f"{format_validation_error(error)}")
    except ValueError as error:
        sys.exit(f"{arguments.spec}: {error}")
    if arguments.json:
        print(json.dumps(plan, indent=2))
        return 0
    from tunedeck.planner.plan_text import plan_as_text

    print(plan_as_text(plan))
    return 0


def _run_render(arguments: argparse.Namespace) -> int:
    from tunedeck.launch_config import backend_config, build_torchrun_argv
    from tunedeck.run_folder import RunFolder, write_json

    spec = load_spec_or_exit(arguments.spec)
    run = RunFolder(arguments.out.resolve())
    config_file = run.backend_config_file(spec.backend)
    argv = build_torchrun_argv(spec, str(run.path))
    write_json(run.spec_file, spec.model_dump(mode="json"))
    write_json(config_file, backend_config(spec))
    write_json(run.launch_file, {"argv": argv, "env": {}, "cwd": str(run.path)})
    print(f"wrote {run.spec_file}, {config_file} and {run.launch_file}")
    print(" ".join(argv))
    return 0

