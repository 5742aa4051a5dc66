"""`smd study submit|status|table|cancel` against a stand-in of the service's study endpoints (a
tiny HTTP server speaking the StudyOut contract of issue 16): requests, bearer key, exit statuses,
and --follow's polling with If-None-Match."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from smdcli.main import main


class FakeService(BaseHTTPRequestHandler):
    requests: list[tuple[str, str, dict, object]] = []
    polls = 0
    final = "succeeded"

    def log_message(self, *args):   # quiet
        pass

    def _send(self, status: int, body: object, headers: dict | None = None, raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(body).encode()
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _record(self) -> object:
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n)) if n else None
        FakeService.requests.append((self.command, self.path, dict(self.headers), body))
        return body

    def _study(self) -> dict:
        done = FakeService.polls >= 3
        status = FakeService.final if done else "running"
        counts = {FakeService.final: 2} if done else {"succeeded": 1, "running": 1}
        return {"id": "s1", "name": "demo", "owner": "alice", "visibility": "lab", "priority": "normal",
                "status": status, "counts": counts, "progress": 1.0 if done else 0.5,
                "eta": None if done else "2030-01-01T00:00:00Z", "axes": ["params.lr"], "cancel_requested": False,
                "children": [{"id": "c0", "index": 0, "status": "succeeded"},
                             {"id": "c1", "index": 1, "status": "succeeded" if done else "running"}]}

    def do_POST(self):
        body = self._record()
        if self.path == "/v1/studies":
            if body.get("name") == "over":
                return self._send(429, {"detail": "over quota: max_work (total work of the study)"})
            if body.get("name") == "bad":
                return self._send(422, {"detail": [{"loc": ["body", "grid", "params.learning_rate"],
                                                    "msg": "not a field of the base spec"}]})
            FakeService.polls = 0
            return self._send(202, {**self._study(), "status": "queued"}, {"Location": "/v1/studies/s1"})
        if self.path == "/v1/studies/s1/cancel":
            return self._send(202, {**self._study(), "cancel_requested": True})
        self._send(404, {"detail": "not found"})

    def do_GET(self):
        self._record()
        if self.path == "/v1/studies/s1":
            FakeService.polls += 1
            study = self._study()
            etag = f'"{study["status"]}-{study["progress"]}"'
            if self.headers.get("If-None-Match") == etag:
                return self._send(304, None, {"ETag": etag}, raw=b"")
            return self._send(200, study, {"ETag": etag})
        if self.path == "/v1/studies/s1/table?group=point":
            return self._send(200, {"columns": ["point", "risk"], "rows": [{"point": 0, "risk": 0.1}]})
        if self.path == "/v1/studies/s1/table.csv":
            return self._send(200, None, {"Content-Type": "text/csv"}, raw=b"point,risk\r\n0,0.1\r\n")
        self._send(404, {"detail": "study not found"})


@pytest.fixture
def service(monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeService)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    FakeService.requests, FakeService.polls, FakeService.final = [], 0, "succeeded"
    monkeypatch.setenv("SMD_URL", f"http://127.0.0.1:{server.server_address[1]}/")
    monkeypatch.setenv("SMD_KEY", "smd_k_secret")
    yield FakeService
    server.shutdown()
    server.server_close()


def _study(tmp_path, name="demo"):
    path = tmp_path / "study.json"
    path.write_text(json.dumps({"name": name, "base": {"kind": "nrq"}, "grid": {"params.lr": [0.1, 0.2]}}))
    return str(path)


def test_submit_prints_the_id_with_options_and_key(service, tmp_path, capsys):
    assert main(["study", "submit", _study(tmp_path), "--visibility", "lab", "--priority", "low"]) == 0
    assert capsys.readouterr().out.strip() == "s1"
    method, path, headers, body = service.requests[0]
    assert (method, path) == ("POST", "/v1/studies")
    assert headers["Authorization"] == "Bearer smd_k_secret"
    assert body["visibility"] == "lab" and body["priority"] == "low" and body["grid"] == {"params.lr": [0.1, 0.2]}


@pytest.mark.parametrize(("name", "code", "text"), [("bad", 2, "grid.params.learning_rate: not a field"),
                                                     ("over", 3, "over quota: max_work")])
def test_submit_rejected_prints_the_detail(service, tmp_path, capsys, name, code, text):
    assert main(["study", "submit", _study(tmp_path, name)]) == code
    captured = capsys.readouterr()
    assert text in captured.err and captured.out == ""


@pytest.mark.parametrize(("final", "code"), [("succeeded", 0), ("partial", 1), ("cancelled", 2)])
def test_follow_polls_with_etag_until_the_end(service, tmp_path, capsys, final, code):
    service.final = final
    assert main(["study", "submit", _study(tmp_path), "--follow"]) == code
    gets = [r for r in service.requests if r[0] == "GET"]
    assert len(gets) >= 3
    assert any("If-None-Match" in r[2] for r in gets[1:])
    assert f"s1 {final}" in capsys.readouterr().err


def test_status_table_cancel(service, tmp_path, capsys):
    assert main(["study", "status", "s1"]) == 0
    out = capsys.readouterr().out
    assert "running" in out and "succeeded 1, running 1" in out and "50.0%" in out and "children  2" in out
    assert main(["study", "table", "s1", "--group", "point"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == [{"point": 0, "risk": 0.1}]
    target = tmp_path / "t.csv"
    assert main(["study", "table", "s1", "--csv", "-o", str(target)]) == 0
    assert target.read_bytes() == b"point,risk\r\n0,0.1\r\n"
    assert main(["study", "cancel", "s1"]) == 0
    assert "cancel requested for s1" in capsys.readouterr().err
    assert main(["study", "status", "nope"]) == 1
    assert "HTTP 404: study not found" in capsys.readouterr().err


def test_unreachable_service(monkeypatch, capsys):
    monkeypatch.setenv("SMD_URL", "http://127.0.0.1:9")
    assert main(["study", "status", "s1"]) == 1
    assert "cannot reach http://127.0.0.1:9" in capsys.readouterr().err
