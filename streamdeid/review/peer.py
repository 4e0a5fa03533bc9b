"""Which local user a connection to the review server comes from (Linux: /proc/net/tcp, as identd reads it).

The review page's token keeps other people out, but a token travels: the browser review opens is given the
URL on its command line, which every local user can read with ``ps`` (a security review fetched an original
face crop and saved edits as user ``nobody`` that way). A connection whose socket another user owns is refused
whatever it sends. Where the kernel's table cannot be read (another OS), the token alone decides.
"""

from __future__ import annotations

TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


def peer_uid(client_port: int, server_port: int) -> int | None:
    """The uid owning the local TCP socket on ``client_port`` connected to ``server_port``; None when the
    kernel's tables do not say (not Linux, or no such socket)."""
    for table in TABLES:
        try:
            with open(table, encoding="ascii") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()  # sl, local, remote, st, tx:rx, tr:when, retrnsmt, uid, timeout, inode, ...
            if len(fields) < 8:
                continue
            try:
                local, remote = int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16)
                if local == client_port and remote == server_port:
                    return int(fields[7])
            except (IndexError, ValueError):
                continue
    return None
