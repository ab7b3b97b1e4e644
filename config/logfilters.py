"""Log filters named in settings.LOGGING."""

from __future__ import annotations

import logging


class ClientErrorsOnOneLine(logging.Filter):
    """A request refused as the client's error (a 4xx: not found, forbidden, a suspicious operation
    such as an admin URL's refused `_to_field` or a bad Host header) is logged as Django logs it,
    but on one line: its traceback is Django's own and says nothing about the product, and a crawler
    of bad URLs would otherwise fill the log with them. A server error (5xx) keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if record.exc_info and isinstance(status, int) and 400 <= status < 500:
            record.exc_info = None
            record.exc_text = None
        return True
