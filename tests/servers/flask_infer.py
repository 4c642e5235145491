"""A Flask inference server (werkzeug's threaded dev server) for gpusleuth's serving tests:
``python flask_infer.py PORT TRUTH.json``. Tokenization in the request path, one forward; the response is
done when werkzeug closes the response iterable (the server's own clock stops there, see infer_common)."""
import sys
import time

import torch
from flask import Flask, request
from infer_common import Truth, answer, build_model, model_input, stop_on_signals

PORT, TRUTH = int(sys.argv[1]), Truth(sys.argv[2])
model = build_model("tokenize")
app = Flask(__name__)


@app.get("/")
def ready():
    return "ok"


@app.post("/")
def infer():
    t0 = time.perf_counter()
    x, tok_s = model_input("tokenize", request.get_data())
    t1 = time.perf_counter()
    with torch.no_grad():
        y = model(x)
    t2 = time.perf_counter()
    resp = app.response_class(answer(y, x), mimetype="application/json")
    resp.call_on_close(lambda: TRUTH.add(t0, t1, t2, time.perf_counter(), tok_s))
    return resp


if __name__ == "__main__":
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    stop_on_signals()
    try:
        app.run(host="127.0.0.1", port=PORT, threaded=True)
    except KeyboardInterrupt:
        pass
    finally:
        TRUTH.write()
