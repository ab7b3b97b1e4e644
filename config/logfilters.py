"""Log formatting named in settings.LOGGING."""

from __future__ import annotations

import copy
import logging


class ClientErrorsOnOneLine(logging.Formatter):
    """A request refused as the client's error (a 4xx: not found, forbidden, a suspicious operation
    such as an admin URL's refused `_to_field` or a bad Host header) is logged as Django logs it,
    but on one line: its traceback is Django's own and says nothing about the product, and a crawler
    of bad URLs would otherwise fill the log with them. A server error (5xx) keeps its traceback.
    It formats a copy: the record itself keeps its traceback for any other handler."""

    def format(self, record: logging.LogRecord) -> str:
        status = getattr(record, "status_code", None)
        if record.exc_info and isinstance(status, int) and 400 <= status < 500:
            record = copy.copy(record)
            record.exc_info = None
            record.exc_text = None
        return super().format(record)
