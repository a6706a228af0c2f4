"""lme sets LITELLM_LOCAL_MODEL_COST_MAP=True for its own process before litellm can be imported (litellm otherwise
fetches its price map from GitHub on import, and waits on that request offline); a value the user set is kept."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

CHILD = ("import os, sys; import lme.cli; print(os.environ.get('LITELLM_LOCAL_MODEL_COST_MAP'), "
         "'litellm' in sys.modules)")


@pytest.mark.parametrize(("given", "seen"), [(None, "True"), ("False", "False"), ("True", "True")])
def test_lme_defaults_litellms_local_price_map_and_keeps_the_users_choice(given, seen):
    env = {k: v for k, v in os.environ.items() if k != "LITELLM_LOCAL_MODEL_COST_MAP"}
    if given is not None:
        env["LITELLM_LOCAL_MODEL_COST_MAP"] = given
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [seen, "False"]  # set by importing lme, before anything imported litellm


class _PriceMapServer:
    """A loopback server standing in for litellm's remote price map: records each request, answers `{}`."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                server.requests.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/model_prices.json"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize(("through_lme", "requests"), [(True, 0), pytest.param(False, 1, marks=pytest.mark.slow)])
def test_litellm_imported_in_an_lme_process_never_asks_for_the_remote_price_map(through_lme, requests):
    """Through lme, no request; litellm imported on its own (the control: what lme prevents), one."""
    server = _PriceMapServer()
    env = {k: v for k, v in os.environ.items() if k != "LITELLM_LOCAL_MODEL_COST_MAP"}
    env["LITELLM_MODEL_COST_MAP_URL"] = server.url
    child = ("from lme.models.litellm_loader import import_litellm; litellm = import_litellm()" if through_lme
             else "import litellm")
    try:
        done = subprocess.run([sys.executable, "-c", f"{child}; print(len(litellm.model_cost) > 100)"],
                              capture_output=True, text=True, timeout=300, env=env)
    finally:
        server.close()
    assert done.returncode == 0, done.stderr
    assert len(server.requests) == requests
    if through_lme:
        assert done.stdout.split() == ["True"]  # the price map it ships
