"""Files to an :class:`~tunedeck.hostops.ssh.SshHost`: SFTP, or ``cat`` over an exec channel for an
sshd without SFTP (:data:`PUT_SCRIPT`); a failed write removes what it left either way."""

from __future__ import annotations

import errno
import logging
import os
from typing import TYPE_CHECKING, Sequence

import asyncssh

from tunedeck.hostops.hosts import HostError
from tunedeck.hostops.sshexec import command_line, exec_command
from tunedeck.hostops.sshgate import describe
from tunedeck.util.safety import UnsafeInput, check_text, visible

if TYPE_CHECKING:
    from tunedeck.hostops.ssh import SshHost

log = logging.getLogger(__name__)

#: a file written over an exec channel, for an sshd without SFTP: ``$1`` folder (made 0700),
#: ``$2`` file, ``$3`` octal mode; the bytes come on stdin; prints the size written. A failure
#: removes the file and the folders it made (from ``$1`` up to ``top``, the highest one missing)
PUT_SCRIPT = (
    'umask 077; top=; d=$1; while [ -n "$d" ] && [ ! -e "$d" ] && [ ! -L "$d" ]; do top=$d; d=${d%/*}; done; '
    'undo() { rm -f -- "$2"; d=$1; while [ -n "$top" ]; do '
    '{ [ ! -d "$d" ] || rmdir -- "$d" 2>/dev/null; } || break; [ "$d" = "$top" ] && break; d=${d%/*}; done; }; '
    'mkdir -p -- "$1" || { undo "$@"; exit 3; }; cat > "$2" || { undo "$@"; exit 4; }; '
    'chmod "$3" -- "$2" || { undo "$@"; exit 5; }; wc -c < "$2"'
)

#: an SFTP status → the errno it stands for (the host's own text is kept as the cause)
_SFTP_ERRNO = {
    asyncssh.FX_NO_SUCH_FILE: errno.ENOENT,
    asyncssh.FX_NO_SUCH_PATH: errno.ENOENT,
    asyncssh.FX_PERMISSION_DENIED: errno.EACCES,
    asyncssh.FX_FILE_ALREADY_EXISTS: errno.EEXIST,
    asyncssh.FX_WRITE_PROTECT: errno.EROFS,
    asyncssh.FX_NO_SPACE_ON_FILESYSTEM: errno.ENOSPC,
    asyncssh.FX_QUOTA_EXCEEDED: errno.EDQUOT,
    asyncssh.FX_NOT_A_DIRECTORY: errno.ENOTDIR,
    asyncssh.FX_FILE_IS_A_DIRECTORY: errno.EISDIR,
}
#: a cause as a host's C library words it → its errno
_ERRNO_BY_TEXT = {os.strerror(n): n for n in errno.errorcode}


class _SftpRefused(Exception):
    """The sshd opened the session channel but refused its ``sftp`` subsystem."""


class _SftpFailure(Exception):
    """The SFTP server answered a write with only "Failure" (OpenSSH's word for a full disk, a
    read-only file system and most other errors); what was written is removed already."""


async def put_file(host: SshHost, data: bytes, path: str, mode: int) -> None:
    """SFTP upload (the folder is created 0700 when missing). An sshd without an SFTP
    subsystem (no ``Subsystem sftp`` line) refuses the channel: then, and from then on for
    this host, the bytes go to ``cat`` over an exec channel (:data:`PUT_SCRIPT`). OpenSSH's
    SFTP server reports a full disk (and most errors) only as "Failure": then the file is
    written once more with ``cat``, whose error names the cause. A failed write removes
    the part written and the folders it made, either way."""
    check_text(path, "path")
    if not path.startswith("/"):
        raise UnsafeInput(f"path {path!r}: must be absolute")
    host._sync()
    if host.sftp_refused is None:
        try:
            await _sftp_put(host, data, path, mode)
            return
        except _SftpRefused as e:
            host.sftp_refused = str(e)
            log.info("%s: no SFTP (%s); files go over exec channels", host.target, e)
        except _SftpFailure as e:
            log.info("%s: SFTP upload of %s: %s; writing it with cat to learn the cause", host.target, path, e)
    await _exec_put(host, data, path, mode)


async def _sftp_put(host: SshHost, data: bytes, path: str, mode: int) -> None:
    conn = await host._connection()
    assert host._channels is not None
    async with host._channels:
        try:
            async with conn.start_sftp_client() as sftp:
                folder = path.rsplit("/", 1)[0] or "/"
                made = await _sftp_missing(sftp, folder)
                opened = False
                try:
                    if made:
                        await sftp.makedirs(folder, attrs=asyncssh.SFTPAttrs(permissions=0o700), exist_ok=True)
                    async with sftp.open(path, "wb", attrs=asyncssh.SFTPAttrs(permissions=mode)) as f:
                        opened = True
                        await f.write(data)
                except asyncssh.SFTPError as e:
                    await _sftp_undo(sftp, path if opened else None, made)
                    if e.code == asyncssh.FX_FAILURE:
                        raise _SftpFailure(e.reason) from None
                    raise OSError(_SFTP_ERRNO.get(e.code, errno.EIO), e.reason, path) from None
        except asyncssh.ChannelOpenError as e:
            if e.code == asyncssh.OPEN_REQUEST_SESSION_FAILED:  # the channel opened, "sftp" was refused
                raise _SftpRefused(f"the host's sshd has no SFTP subsystem: {e.reason}") from None
            host._on_lost(conn, e)
            raise HostError("connection-lost", f"upload of {path}: {describe(e)}", target=host.target) from None
        except asyncssh.SFTPError as e:
            raise OSError(_SFTP_ERRNO.get(e.code, errno.EIO), e.reason, path) from None
        except (asyncssh.Error, OSError) as e:
            if isinstance(e, OSError) and not isinstance(e, ConnectionError):
                raise
            host._on_lost(conn, e)
            raise HostError("connection-lost", f"upload of {path}: {describe(e)}", target=host.target) from None


async def _exec_put(host: SshHost, data: bytes, path: str, mode: int) -> None:
    folder = path.rsplit("/", 1)[0] or "/"
    timeout = 60.0 + len(data) / 1e6  # a slow link still moves 1 MB/s
    command = command_line(["/bin/sh", "-c", PUT_SCRIPT, "sh", folder, path, f"{mode:o}"], None, timeout)
    r = await exec_command(host, command, data, timeout)
    if r.lost or r.timed_out:
        raise HostError("connection-lost", f"upload of {path}: {r.stderr.strip()}", target=host.target)
    written = r.stdout.strip()
    if r.exit_status == 0 and written == str(len(data)):
        return
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    # "cat: write error: No space left on device", "sh: 1: cannot create /x: Read-only file system"
    why = visible(lines[-1].rsplit(": ", 1)[-1].strip()[-300:]) if lines else ""
    why = why or f"{written or 'nothing'} of {len(data)} bytes written"
    if host.sftp_refused:
        why = f"{why} (written with cat: {host.sftp_refused})"
    raise OSError(_ERRNO_BY_TEXT.get(why.split(" (", 1)[0], errno.EIO), why, path)


async def _sftp_missing(sftp: asyncssh.SFTPClient, folder: str) -> list[str]:
    """The folders ``makedirs(folder)`` would create on the host, deepest first."""
    out: list[str] = []
    while folder not in ("", "/") and not await sftp.lexists(folder):
        out.append(folder)
        folder = folder.rsplit("/", 1)[0]
    return out


async def _sftp_undo(sftp: asyncssh.SFTPClient, path: str | None, made: Sequence[str]) -> None:
    """Remove what a failed upload left: the file ``path`` (when it was created) and the
    folders in ``made`` (deepest first) that are still there and empty."""
    try:
        if path is not None:
            await sftp.remove(path)
        for folder in made:
            if await sftp.lexists(folder):
                await sftp.rmdir(folder)
    except asyncssh.SFTPError as e:
        log.warning("cannot remove what a failed upload left at %s: %s", path or made[0], e.reason)
