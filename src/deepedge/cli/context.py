"""The CLI's context: where the service runs, and where its tenant token is kept.

``deepedge serve`` and ``deepedge demo --site`` write it when they start (and put the one
they replaced back when they stop); ``deepedge context set`` writes it by hand. It holds the
service's URL and, by reference, a token: the path of a file (mode 0600) that holds the
token, never the token itself. The client commands read it when neither ``--url`` /
``DEEPEDGE_URL`` nor ``--token`` / ``DEEPEDGE_TOKEN`` is given.

The file is ``$DEEPEDGE_CONTEXT``, else ``$XDG_CONFIG_HOME/deepedge/context.json``
(``~/.config/deepedge/context.json``).
"""

from __future__ import annotations

import json
import os
import shlex
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from deepedge.core.errors import InvalidInputError

CONTEXT_ENV = "DEEPEDGE_CONTEXT"
URL_ENV = "DEEPEDGE_URL"
TOKEN_ENV = "DEEPEDGE_TOKEN"


def context_path() -> Path:
    chosen = os.environ.get(CONTEXT_ENV)
    if chosen:
        return Path(chosen).expanduser()
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "deepedge" / "context.json"


@dataclass(frozen=True)
class Context:
    """A running service as the CLI reaches it."""

    url: str
    token_file: str | None = None  # a file holding the tenant token (by reference)
    tenant: str | None = None
    data_dir: str | None = None
    written_by: str = ""
    written_at: float = 0.0

    def token(self) -> str | None:
        """The referenced token; None when there is no reference."""
        if self.token_file is None:
            return None
        try:
            return Path(self.token_file).read_text(encoding="utf-8").strip() or None
        except OSError as exc:
            raise InvalidInputError(
                f"the context ({context_path()}) names the token file {self.token_file}, "
                f"which cannot be read: {exc.strerror}",
                field="token",
            ) from exc


def read_context() -> Context | None:
    """The context, or None when there is none (a damaged file is reported, not guessed)."""
    path = context_path()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise InvalidInputError(f"cannot read the context {path}: {exc}", field="context") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("url"), str):
        raise InvalidInputError(f"the context {path} has no url", field="context")
    known = set(Context.__dataclass_fields__)
    return Context(**{k: v for k, v in raw.items() if k in known})


def write_context(context: Context) -> tuple[Context, str | None]:
    """Write ``context`` (stamped with the time); returns what was written and the file's
    previous text, for :func:`restore_context`."""
    path = context_path()
    try:
        previous = path.read_text(encoding="utf-8")
    except OSError:
        previous = None
    path.parent.mkdir(parents=True, exist_ok=True)
    stamped = Context(**{**asdict(context), "written_at": time.time()})
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(asdict(stamped), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return stamped, previous


def restore_context(written: Context, previous: str | None) -> None:
    """Put back the context that :func:`write_context` replaced, unless the file changed
    since (a token saved for this service, another service's context): then it stays."""
    if read_context_quietly() != written:
        return
    path = context_path()
    if previous is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text(previous, encoding="utf-8")


def read_context_quietly() -> Context | None:
    try:
        return read_context()
    except InvalidInputError:
        return None


def write_token_file(path: Path, token: str) -> Path:
    """The token in a file only its owner reads (mode 0600), for a context to reference."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(token + "\n")
    os.chmod(path, 0o600)
    return path.resolve()


def export_lines(url: str, token_file: Path | str | None = None) -> list[str]:
    """The shell lines that point another shell's CLI at this service."""
    lines = [f"export {URL_ENV}={shlex.quote(url)}"]
    if token_file is not None:
        lines.append(f'export {TOKEN_ENV}="$(cat {shlex.quote(str(token_file))})"')
    return lines
