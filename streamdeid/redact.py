"""Camera credentials never reach a log line, an error message or a report.

A camera URL often carries a password (``rtsp://user:secret@host/x``, or ``?password=secret`` on some
NVRs), and the text of an error from FFmpeg, PyAV or the OS may quote the URL whole. Every text that can
carry one passes through :func:`redact` before it is printed, logged or written: streamdeid's own words,
the wrapped error's text, and (through :class:`RedactingFilter` on the CLI's log handlers) whatever a
library logs.
"""

from __future__ import annotations

import logging
import re

# scheme://user:password@ -> scheme://user:***@. The password runs to the last "@" before the host: a
# literal "@" in it must not leave its tail visible. Quotes and whitespace end a URL inside a message.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s/@:'\"]*):[^\s/'\"]*@")
# ...?user=admin&password=secret: query parameters that hold secrets.
_QUERY = re.compile(r"(?i)([?&;](?:password|passwd|pass|pwd|token|access_token|auth|secret|key|signature|sig)=)"
                    r"[^&;#\s'\"]*")
MASK = "***"


def redact(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***`` (the user name is kept: it says
    which account failed)."""
    return _QUERY.sub(rf"\g<1>{MASK}", _USERINFO.sub(rf"\g<1>:{MASK}@", text))


class RedactingFilter(logging.Filter):
    """A handler filter: the record's message (and its traceback text) are redacted before any
    formatter sees them, whichever library logged it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        record.msg, record.args = redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def redact_logging(logger: logging.Logger | None = None) -> None:
    """Put a :class:`RedactingFilter` on every handler of ``logger`` (the root logger by default)."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
