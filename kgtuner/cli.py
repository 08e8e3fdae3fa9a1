"""The ``kgtuner`` command, and the error style every kgtuner command line shares.

    kgtuner launch [OVERRIDES ...]              the search service      (= python -m kgtuner.launch)
    kgtuner train  [OVERRIDES ...]              train one configuration (= python -m kgtuner.train)
    kgtuner data   stats|subgraph ...           dataset tools           (= python -m kgtuner.data)
    kgtuner analysis importance|srcc|stages ... finished runs           (= python -m kgtuner.analysis)
    kgtuner bench    pilot|record|report ...    recorded tables of real runs (= python -m kgtuner.bench)
    kgtuner predict  RUN_DIR --head H --relation R ...  a trained model's answers (= python -m kgtuner.predict)
    kgtuner report   RUN_DIR [--out FILE]       rebuild a search's report.html (= python -m kgtuner.report)

A bad setting -- an unknown config key or group option, a value out of range, a missing file or
column, a bad command-line option, an output folder that cannot be written -- prints ONE line
``kgtuner: error: <what is wrong, naming the key or file>`` to stderr and exits with status 2 (before
Ray starts, for the search); an interrupted search exits with 130. ``kgtuner --version`` prints the version.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

#: Exit status of a bad setting (every kgtuner command).
EXIT_BAD_SETTING = 2
#: Exit status of an interrupted search (Ctrl+C, ``ray job stop``): resumable.
EXIT_INTERRUPTED = 130
PREFIX = "kgtuner: error: "

COMMANDS = {
    "launch": ("kgtuner.launch", "run a hyper-parameter search (Hydra overrides, as python -m kgtuner.launch)"),
    "train": ("kgtuner.train", "train and evaluate one configuration (as python -m kgtuner.train)"),
    "data": ("kgtuner.data.cli", "dataset statistics and subgraphs (as python -m kgtuner.data)"),
    "analysis": ("kgtuner.analysis.cli", "importances and SRCC of finished runs (as python -m kgtuner.analysis)"),
    "bench": ("kgtuner.bench.cli", "record tables of real training runs to replay searches on (as python -m kgtuner.bench)"),
    "predict": ("kgtuner.predict", "answers of a run's trained model: ranked tails/heads, triple scores "
                "(as python -m kgtuner.predict)"),
    "report": ("kgtuner.report", "rebuild a search's report.html from its run directory (as python -m kgtuner.report)"),
}


def _condense(text: str) -> str:
    """One line out of a multi-line message: Hydra's "Available options in 'g':" list becomes a comma list;
    OmegaConf's ``full_key:``/``object_type:`` detail lines and Hydra's HYDRA_FULL_ERROR hint are dropped."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    if not lines:
        return "unknown error"
    out, options = [lines[0]], None
    for line in lines[1:]:
        if line.startswith("Config search path"):
            break
        if line.startswith(("full_key:", "object_type:", "reference_type:", "Set the environment variable HYDRA_FULL")):
            continue
        if line.startswith("Available options in"):
            options = []
            out.append(line[0].lower() + line[1:].rstrip(":") + ":")
        elif options is not None:
            options.append(line)
        else:
            out.append(line)
    text = "; ".join(out)
    if options:
        text += " " + ", ".join(options)
    return text


def error_line(error: BaseException | str) -> str:
    """``kgtuner: error: <message>`` on one line (with the first line of the exception's cause, which holds
    the reason of Hydra's "Could not override 'key'")."""
    text = str(error)
    cause = getattr(error, "__cause__", None)
    reason = str(cause).strip().splitlines()[0] if cause is not None and str(cause).strip() else ""
    if reason and reason not in text:
        head, _, rest = text.partition("\n")
        text = f"{head.rstrip('.')}: {reason}\n{rest}"
    return PREFIX + _condense(text)


def fail(error: BaseException | str) -> int:
    """Print ``error`` in the shared style to stderr; return the exit status of a bad setting (2)."""
    print(error_line(error), file=sys.stderr, flush=True)
    return EXIT_BAD_SETTING


class ArgumentParser(argparse.ArgumentParser):
    """argparse with kgtuner's error style: a usage error is one ``kgtuner: error:`` line, exit 2."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        raise SystemExit(fail(f"{self.prog}: {message} (see {self.prog} --help)"))


def run_hydra(task_main: Callable[[], None], argv: Sequence[str] | None = None, prog: str | None = None) -> None:
    """Run a ``@hydra.main`` function so that Hydra's own composition errors (unknown group option or key,
    bad override syntax) end like the task's: one ``kgtuner: error:`` line and exit 2.

    ``argv`` (the overrides and Hydra flags) replaces ``sys.argv[1:]`` while it runs. With
    ``HYDRA_FULL_ERROR=1`` set by the user, errors propagate with their traceback, as Hydra does.
    """
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    saved_argv, user_full = sys.argv, os.environ.get("HYDRA_FULL_ERROR")
    if argv is not None:
        sys.argv = [prog or sys.argv[0], *argv]
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra re-raises instead of printing its own multi-line report
    try:
        _check_hydra_flags(sys.argv[1:], prog or _module_name(sys.argv[0]))
        task_main()
    except (HydraException, OmegaConfBaseException) as exc:
        if user_full == "1":
            raise
        raise SystemExit(fail(exc)) from None
    except (OSError, ValueError) as exc:  # the run directory cannot be written (Hydra's mkdir, launch.log, .hydra/)
        message = None if user_full == "1" else _run_dir_error(exc)
        if message is None:
            raise
        raise SystemExit(fail(message)) from None
    finally:
        sys.argv = saved_argv
        if user_full is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = user_full


def _os_error(exc: BaseException | None) -> OSError | None:
    """The first ``OSError`` in ``exc``'s chain of causes and contexts (logging's "Unable to configure handler
    'file'" is a ValueError raised from the OSError of its log file), or None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def _run_dir_error(exc: BaseException) -> str | None:
    """The one-line message of a run directory (``hydra.run.dir``) that cannot be created or written -- an
    existing file, a read-only file system, no permission -- or None when ``exc`` is about something else
    (an ``OSError`` on another path, or none at all)."""
    error = _os_error(exc)
    if error is None or not error.filename:
        return None
    run_dir = None
    tb = exc.__traceback__
    while tb is not None:  # Hydra's run_job (it creates the run directory, its log file and .hydra/) knows it
        frame = tb.tb_frame
        if frame.f_code.co_name == "run_job" and frame.f_globals.get("__name__") == "hydra.core.utils":
            output_dir = frame.f_locals.get("output_dir")
            run_dir = Path(os.path.abspath(str(output_dir))) if output_dir else None
        tb = tb.tb_next
    if run_dir is None:  # not raised within Hydra's job (whose traceback also holds a task's own error)
        return None
    failed = Path(os.path.abspath(os.fsdecode(error.filename)))
    if failed != run_dir and failed not in run_dir.parents and run_dir not in failed.parents:
        return None
    return output_dir_message(run_dir, error, "hydra.run.dir")


def output_dir_message(path: str | os.PathLike, error: OSError | None, key: str) -> str:
    """What is wrong with an output folder (``key``: the setting that names it, ``hydra.run.dir`` or ``--out``)
    that cannot be created or written, and how to fix it, on one line."""
    path = Path(path)
    where = f"{key}={path}" if key.startswith("hydra") else f"{key} {path}"
    code = getattr(error, "errno", None)
    failed = os.fsdecode(error.filename) if error is not None and error.filename else str(path)
    blocker = _file_in_the_way(path)
    if blocker is not None or code in (errno.EEXIST, errno.ENOTDIR):
        blocker = blocker or Path(failed)
        text = (f"{where} cannot be a folder: {blocker} is an existing file, not a folder; choose another {key}, "
                "or move that file away")
    elif code == errno.EROFS:
        text = f"{where} is on a read-only file system ({failed}); choose a {key} on a writable disk"
    elif code in (errno.EACCES, errno.EPERM):
        text = (f"{where} is not writable ({failed}: permission denied); choose a {key} you can write to, or "
                "give yourself write permission there")
    elif code in (getattr(errno, "ENOSPC", None), getattr(errno, "EDQUOT", None)):
        text = f"the disk of {where} is full ({failed}); free some space there, or choose a {key} on a larger disk"
    else:
        reason = getattr(error, "strerror", None) or "cannot be written"
        text = f"{where} cannot be written ({failed}: {reason}); choose another {key}"
    if (path / "kgtuner_state.json").is_file():
        text += (f"; the search in it is unchanged: to continue it, copy {path} to a writable disk and resume it "
                 "there (resume=true hydra.run.dir=<the copy>)")
    return text


def _file_in_the_way(path: Path) -> Path | None:
    """``path`` itself, or the nearest of its parents that exists, when that is not a folder."""
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            return None if candidate.is_dir() else candidate
    return None


def output_dir_problem(path: str | os.PathLike | None, key: str) -> str | None:
    """Before anything is written: the one-line message when the output folder ``path`` cannot be one (it, or
    the nearest parent that exists, is a file), else None (it is created when missing)."""
    if path is None:
        return None
    path = Path(os.path.expanduser(str(path)))
    return output_dir_message(path, None, key) if _file_in_the_way(path) is not None else None


def _module_name(path: str) -> str:
    """``python -m kgtuner.launch`` for ``.../kgtuner/launch.py`` (how ``python -m`` sets ``sys.argv[0]``)."""
    head, name = os.path.split(path)
    if name.endswith(".py") and os.path.basename(head) == "kgtuner":
        return f"python -m kgtuner.{name[:-3]}"
    return name or "kgtuner"


def _check_hydra_flags(args: Sequence[str], prog: str) -> None:
    """Parse the command line with Hydra's own argument parser first, so that a bad flag (``--foo``,
    ``--cfg nope``) is one ``kgtuner: error:`` line and exit 2 too (argparse prints its usage otherwise)."""
    try:
        from hydra._internal.utils import get_args_parser

        parser = get_args_parser()
    except Exception:  # noqa: BLE001 - a Hydra without that helper: leave the parsing to Hydra
        return

    def error(message: str):
        raise SystemExit(fail(f"{prog}: {message} (see {prog} --help)"))

    parser.prog = prog
    parser.error = error
    parser.parse_args(list(args))


def _usage() -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items())
    return (f"usage: kgtuner COMMAND [ARGS ...]\n\ncommands:\n{rows}\n\n"
            "`kgtuner COMMAND --help` shows a command's options; bad settings exit with status 2.")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kgtuner`` console script."""
    import importlib

    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(_usage(), file=sys.stderr)
        return EXIT_BAD_SETTING
    if args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if args[0] == "--version":
        from kgtuner import __version__

        print(f"kgtuner {__version__}")
        return 0
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        return fail(f"unknown command {command!r}; choose one of {', '.join(COMMANDS)} (see kgtuner --help)")
    module = importlib.import_module(COMMANDS[command][0])
    if command in ("launch", "train"):
        module.main(rest, prog=f"kgtuner {command}")
        return 0
    return int(module.main(rest, prog=f"kgtuner {command}") or 0)


if __name__ == "__main__":
    sys.exit(main())
