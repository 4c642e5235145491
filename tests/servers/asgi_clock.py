"""The test servers' clock of a request's span in the server: from its ASGI app taking it to the last byte of the
answer — the span gpusleuth divides a request's stages by, so a server's truth and gpusleuth's share one
denominator (BentoML's endpoint wrapper and LitServe's handler start after the middlewares and routing, and read
2–9 points off at 16 clients; tests/test_serving_followed.py, tests/test_serving_bentoml.py).

Stdlib only: imported by servers that run in other environments (BentoML's venv) as scripts from this folder.
"""

import contextvars
import time


def timed_app(real_app, fresh_record, reached, write):
    """An ASGI ``__call__`` wrapping ``real_app`` that starts ``fresh_record()`` (a dict) when an outer app takes
    an HTTP request, shares it with the request's tasks through the returned context variable, sets ``end`` at
    the last body message sent, and hands the record to ``write`` when ``reached(rec)`` says it reached the API
    (not a health check or a 404). Returns (the wrapper, the context variable)."""
    current = contextvars.ContextVar("truth_request", default=None)

    async def app(self, scope, receive, send):
        if scope.get("type") != "http" or current.get() is not None:  # not a request, or an app inside the outer
            return await real_app(self, scope, receive, send)
        rec = fresh_record()
        rec["start"] = time.time_ns()
        token = current.set(rec)  # the dict itself is shared with every task the middlewares start: filled in place

        async def sent(message):
            await send(message)
            if message.get("type") == "http.response.body" and not message.get("more_body", False):
                rec.setdefault("end", time.time_ns())

        try:
            return await real_app(self, scope, receive, sent)
        finally:
            rec.setdefault("end", time.time_ns())
            current.reset(token)
            if reached(rec):
                write(rec)

    return app, current
