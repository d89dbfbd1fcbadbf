"""`tunedeck download ID [--merged | --adapter] [--out DIR] [--force]`: a finished job's
merged weights or adapter, fetched as the job page's zip (`GET
/api/jobs/{id}/artifacts/{kind}`) and unpacked into DIR."""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path, PurePosixPath


def add_download_command(commands, *, add_server_options) -> None:
    download = commands.add_parser(
        "download", help="a finished job's merged weights (default) or LoRA adapter, "
        "unpacked into a folder")
    download.add_argument("job_id", type=int)
    kind = download.add_mutually_exclusive_group()
    kind.add_argument("--merged", dest="kind", action="store_const", const="merged",
                      help="the merged Hugging Face folder (the default)")
    kind.add_argument("--adapter", dest="kind", action="store_const", const="adapter",
                      help="the PEFT adapter (LoRA and QLoRA jobs)")
    download.add_argument("--out", type=Path, default=None,
                          help="the folder to unpack into (default ./job-ID-KIND)")
    download.add_argument("--force", action="store_true",
                          help="unpack into a folder that is not empty")
    add_server_options(download)
    download.set_defaults(handler=_run_download, kind="merged")


def _run_download(arguments: argparse.Namespace) -> int:
    kind = arguments.kind
    out = arguments.out or Path(f"job-{arguments.job_id}-{kind}")
    if out.exists() and not out.is_dir():
        sys.exit(f"{out} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()) and not arguments.force:
        sys.exit(f"{out} is not an empty folder; pass --force to unpack into it anyway")
    with tempfile.TemporaryDirectory(prefix="tunedeck-download-") as scratch:
        zip_path = Path(scratch) / f"{kind}.zip"
        _fetch(arguments, f"/api/jobs/{arguments.job_id}/artifacts/{kind}", zip_path,
               refusal=f"cannot download the {kind} weights of job {arguments.job_id}")
        try:
            files = unpack_zip(zip_path, out, top_folder=kind)
        except (zipfile.BadZipFile, UnsafeEntry) as error:
            sys.exit(f"job {arguments.job_id}'s {kind} zip: {error}")
    print(f"job {arguments.job_id} {kind}: {files} files in {out}")
    return 0


def _fetch(arguments: argparse.Namespace, path: str, target: Path, *, refusal: str) -> None:
    import httpx

    from cli.server_calls import auth_headers, exit_unless, exit_unreachable, server_url

    try:
        # A merged model is gigabytes: streamed to disk, no read timeout between chunks.
        with httpx.stream("GET", f"{server_url(arguments)}{path}", headers=auth_headers(arguments),
                          timeout=httpx.Timeout(60, read=None)) as response:
            exit_unless(response, 200, refusal)
            with target.open("wb") as file:
                for chunk in response.iter_bytes(1 << 20):
                    file.write(chunk)
    except httpx.HTTPError as error:
        exit_unreachable(arguments, error)


class UnsafeEntry(ValueError):
    pass


def unpack_zip(zip_path: Path, out: Path, *, top_folder: str | None = None) -> int:
    """Every file of the zip under `out` (one `top_folder` its entries share, the server's
    `merged/` or `adapter/`, dropped); an entry that would land outside `out` (an absolute
    path, `..`, a drive) refuses the whole zip before anything is written. Returns the
    number of files."""
    with zipfile.ZipFile(zip_path) as archive:
        entries = [(entry, _relative_path(entry.filename, top_folder))
                   for entry in archive.infolist() if not entry.is_dir()]
        root = out.resolve()
        targets = [(entry, root.joinpath(*relative.parts)) for entry, relative in entries]
        for entry, target in targets:
            if not target.resolve().is_relative_to(root):  # through a link already there
                raise UnsafeEntry(f"entry {entry.filename!r} leaves the folder")
        for entry, target in targets:
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(entry) as source, target.open("wb") as sink:
                shutil.copyfileobj(source, sink, 1 << 20)
    return len(entries)


def _relative_path(name: str, top_folder: str | None) -> PurePosixPath:
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or (path.parts and ":" in path.parts[0]):
        raise UnsafeEntry(f"entry {name!r} leaves the folder")
    if top_folder and len(path.parts) > 1 and path.parts[0] == top_folder:
        path = PurePosixPath(*path.parts[1:])
    if not path.parts:
        raise UnsafeEntry(f"entry {name!r} names no file")
    return path
