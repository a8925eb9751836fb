"""The Hugging Face Hub's error answers as shardstream errors naming the ``hf://`` URL and the fix.

The Hub says what went wrong in ``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``,
``EntryNotFound``, ``GatedRepo``) and ``X-Error-Message``; to anonymous requests it answers a
private repo and a missing one alike (401), so the message says both.
"""

from __future__ import annotations

from ..errors import AccessDeniedError, ShardNotFoundError, SourceError, redact_url
from ._hf_paths import HFPath
from ._status import status_error

__all__ = ["hub_error"]


def hub_error(
    url: str,
    where: HFPath,
    status: int,
    code: str,
    message: str,
    *,
    endpoint: str,
    with_token: bool,
    action: str = "open",
) -> SourceError:
    """The error for the Hub's answer ``status`` with ``X-Error-Code: code`` to ``url``."""
    shown = redact_url(url)
    head = f"cannot {action} {shown}: HTTP {status}" + (f" {code}" if code else "")
    page = f"{endpoint}/{where.repo_page}"
    token_hint = "set HF_TOKEN (or run `hf auth login`) or pass token= in storage_options"
    if code == "GatedRepo":
        fix = (
            f"the {where.describe()} is gated: accept its conditions on {page} with the account "
            f"of your token" + ("" if with_token else f", and {token_hint}")
        )
        return AccessDeniedError(f"{head}. {fix}.", url=shown, status=status)
    if status == 401 and message == "Invalid credentials in Authorization header":
        return AccessDeniedError(
            f"{head}: the token was refused (invalid, revoked or expired). Create a token on "
            f"{endpoint}/settings/tokens and {token_hint}, or pass token=False for public repos.",
            url=shown,
            status=status,
        )
    if status == 401:  # the Hub hides whether a repo exists from anonymous requests
        fix = (
            f"the {where.describe()} does not exist, or it is private or gated: {token_hint}, and "
            "check the repo id and type (hf://datasets/... for a dataset)"
            if not with_token
            else f"the token cannot read the {where.describe()}; check its permissions"
        )
        return AccessDeniedError(f"{head}. {fix}.", url=shown, status=status)
    if status == 403:
        return AccessDeniedError(
            f"{head}. The token lacks read access to the {where.describe()} (a fine-grained token "
            f"needs it), or the repo is disabled{f': {message}' if message else ''}.",
            url=shown,
            status=status,
        )
    if status == 404:
        if code == "RevisionNotFound":
            fix = f"the {where.describe()} has no revision {where.revision!r} (a branch, tag or commit)"
        elif code == "EntryNotFound":
            what = f"folder {where.path.strip('/')!r}" if action == "list" else repr(where.path)
            fix = f"there is no {what} at revision {where.revision!r} of the {where.describe()}"
        elif code == "RepoNotFound":
            fix = (
                f"the {where.describe()} does not exist, or the token has no access to it; check "
                "the repo id and type (hf://datasets/... for a dataset)"
            )
        else:
            fix = "the Hub found nothing at this address; check the URL"
        return ShardNotFoundError(f"{head}. {fix}.", url=shown, status=status)
    return status_error(status, url, action=action, detail=message or code)
