#!/usr/bin/env python3
"""Runs the shipped gateway configs for real and checks what the app and tokenguard receive.

Each gateway is started on a loopback port in front of two stubs: a stand-in for tokenguard's
/v1/authz/{provider} that answers by the token it is given (and requires the caller key), and an app that echoes
the headers it got. Then the same requests go through each: a valid token with spoofed identity headers, a
shadow-mode answer, a rejected and a missing token, tokenguard's 503, and tokenguard hanging up.
- envoy: deploy/envoy/envoy.yaml.
- istio: not Istio, but Envoy with the ext_authz filter Istio builds from deploy/istio/istio-operator.yaml and the
  patches of deploy/istio/envoy-filter.yaml applied in a chain like a sidecar's inbound one.
- traefik: the Middleware specs of deploy/traefik/middlewares.yaml as file-provider configuration.
- nginx: the Pod's nginx.conf and snippets from deploy/kubernetes/forward-auth-nginx-configmap.yaml, with the
  caller key written by the init container's caller-key.sh.
Only listen addresses, upstream addresses and file paths are changed. Every address used is on 127.0.0.1 (Traefik
runs with checkNewVersion off); each process is stopped at the end.

usage: gateway-forward-auth-test.py --envoy PATH --nginx PATH --traefik PATH
"""
import argparse
import http.client
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CALLER_KEY = "gateway-test-caller-key-0123456789"
CLAIM_HEADERS = ["x-user-id", "x-tenant-id", "x-email", "x-groups"]
SPOOFED = {
    "X-User-Id": "spoofed",
    "X-Tenant-Id": "spoofed",
    "X-Email": "spoofed@example.com",
    "X-Groups": "admins",
    "X-Tokenguard-Verdict": "valid",
    "X-Tokenguard-Provider": "spoofed",
    "X-Tokenguard-Key": "client-chosen-key-0123456789",
    "X_Tenant_Id": "spoofed",
}


class Stub(http.server.ThreadingHTTPServer):
    daemon_threads = True


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TokenguardStub(http.server.BaseHTTPRequestHandler):
    """Answers like tokenguard's forward-auth endpoint for provider "apple", by token."""

    protocol_version = "HTTP/1.1"
    seen = []

    def log_message(self, *args):
        pass

    def handle_any(self):
        TokenguardStub.seen.append({"method": self.command, "path": self.path,
                                    "headers": {k.lower(): v for k, v in self.headers.items()}})
        auth = self.headers.get("Authorization", "")
        token = auth[len("Bearer "):] if auth.startswith("Bearer ") else None
        if token == "hang-up":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if not (self.path == "/v1/authz/apple" or self.path.startswith("/v1/authz/apple/")):
            return self.answer(404)
        if self.headers.get("X-Tokenguard-Key") != CALLER_KEY:
            return self.answer(403)
        if token is None:
            return self.answer(401, {"WWW-Authenticate": 'Bearer realm="tokenguard"'})
        if token == "valid":
            return self.answer(200, {"X-Tokenguard-Provider": "apple", "X-Tokenguard-Verdict": "valid",
                                     "X-User-Id": "user-1", "X-Email": "user-1@example.com"})
        if token == "shadow-expired":
            return self.answer(200, {"X-Tokenguard-Provider": "apple", "X-Tokenguard-Verdict": "token_expired"})
        if token == "keys-down":
            return self.answer(503, {"Retry-After": "30"})
        return self.answer(401, {"WWW-Authenticate":
                                 'Bearer error="invalid_token", error_description="token_expired"'})

    def answer(self, status, headers=None):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = handle_any


class AppStub(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def handle_any(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        body = json.dumps({"path": self.path,
                           "headers": [[k.lower(), v] for k, v in self.headers.items()]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = handle_any


def request(port, headers, method="GET", path="/some/path?q=1", body=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    conn.putrequest(method, path, skip_accept_encoding=True)
    for k, v in headers.items():
        conn.putheader(k, v)
    if body is not None:
        conn.putheader("Content-Length", str(len(body)))
    conn.endheaders(body)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data


def wait_for(port, proc, name, log):
    deadline = time.time() + 30
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited at start:\n{open(log).read()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{name} did not listen on {port} within 30 s:\n{open(log).read()[-3000:]}")


class Checker:
    def __init__(self, gateway):
        self.gateway, self.passed, self.failed = gateway, 0, 0

    def expect(self, name, ok, detail=""):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            print(f"  FAIL {self.gateway}: {name} {detail}")


def app_headers(data):
    return dict(json.loads(data)["headers"])


def run_cases(c, port, on_503, on_hang_up, check_path="/v1/authz/apple/some/path?q=1"):
    """The same expectations for every gateway. on_503 and on_hang_up: the status the client gets when tokenguard
    answers 503 or closes the connection; check_path: the path of the check request."""
    seen = TokenguardStub.seen

    # A valid token: the identity headers come from tokenguard's answer only; a header the answer lacks
    # (x-tenant-id, x-groups) is gone even though the client sent it.
    seen.clear()
    status, _, data = request(port, {"Authorization": "Bearer valid", "X-Tokenguard-Nonce": "nonce-1", **SPOOFED},
                              method="POST", body=b'{"a": 1}')
    c.expect("valid token reaches the app", status == 200, f"status {status}")
    if status == 200:
        got = app_headers(data)
        c.expect("x-user-id from tokenguard", got.get("x-user-id") == "user-1", repr(got.get("x-user-id")))
        c.expect("x-email from tokenguard", got.get("x-email") == "user-1@example.com", repr(got.get("x-email")))
        c.expect("verdict from tokenguard", got.get("x-tokenguard-verdict") == "valid")
        c.expect("provider from tokenguard", got.get("x-tokenguard-provider") == "apple",
                 repr(got.get("x-tokenguard-provider")))
        for h in ("x-tenant-id", "x-groups", "x_tenant_id", "x-tokenguard-key", "x-tokenguard-nonce"):
            c.expect(f"client-sent {h} removed", h not in got, repr(got.get(h)))
        c.expect("the app gets the Authorization header", got.get("authorization") == "Bearer valid")
    c.expect("one check request", len(seen) == 1, str(len(seen)))
    if seen:
        chk = seen[-1]
        c.expect("check path", chk["path"] == check_path, chk["path"])
        c.expect("check carries the caller key", chk["headers"].get("x-tokenguard-key") == CALLER_KEY,
                 repr(chk["headers"].get("x-tokenguard-key")))
        c.expect("check carries the nonce", chk["headers"].get("x-tokenguard-nonce") == "nonce-1")
        c.expect("check carries the token", chk["headers"].get("authorization") == "Bearer valid")

    # Shadow mode: 200 with the verdict and no claim headers; the client's claim headers must not survive.
    seen.clear()
    status, _, data = request(port, {"Authorization": "Bearer shadow-expired", **SPOOFED})
    c.expect("shadow answer reaches the app", status == 200, f"status {status}")
    if status == 200:
        got = app_headers(data)
        c.expect("shadow verdict from tokenguard", got.get("x-tokenguard-verdict") == "token_expired",
                 repr(got.get("x-tokenguard-verdict")))
        for h in CLAIM_HEADERS:
            c.expect(f"shadow: client-sent {h} removed", h not in got, repr(got.get(h)))

    # Rejected and missing tokens: tokenguard's 401 and WWW-Authenticate reach the client; the app is not called.
    status, headers, _ = request(port, {"Authorization": "Bearer expired", **SPOOFED})
    c.expect("rejected token: 401", status == 401, f"status {status}")
    c.expect("rejected token: WWW-Authenticate passed on",
             headers.get("www-authenticate") == 'Bearer error="invalid_token", error_description="token_expired"',
             repr(headers.get("www-authenticate")))
    status, headers, _ = request(port, {})
    c.expect("no token: 401", status == 401, f"status {status}")
    c.expect("no token: realm challenge", headers.get("www-authenticate") == 'Bearer realm="tokenguard"',
             repr(headers.get("www-authenticate")))

    # tokenguard's 503 and a broken connection to it.
    status, headers, data = request(port, {"Authorization": "Bearer keys-down"})
    c.expect(f"tokenguard 503 becomes {on_503}", status == on_503, f"status {status}")
    if on_503 == 503 and c.gateway == "traefik":
        c.expect("Retry-After passed on with the 503", headers.get("retry-after") == "30",
                 repr(headers.get("retry-after")))
    c.expect("tokenguard 503: app not called", b"headers" not in data)
    status, _, data = request(port, {"Authorization": "Bearer hang-up"})
    c.expect(f"tokenguard hang-up becomes {on_hang_up}", status == on_hang_up, f"status {status}")
    c.expect("tokenguard hang-up: app not called", b"headers" not in data)


def stop(proc):
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def load_yaml(rel):
    with open(os.path.join(ROOT, rel)) as f:
        return yaml.safe_load(f)


def start_envoy(envoy_bin, tmp, config, tg_port, app_port, c):
    """Runs an Envoy bootstrap with its listener and clusters moved to loopback test ports; returns (proc, port)."""
    port = free_port()
    res = config["static_resources"]
    res["listeners"][0]["address"]["socket_address"] = {"address": "127.0.0.1", "port_value": port}
    ports = {"tokenguard": tg_port, "app": app_port}
    for cluster in res["clusters"]:
        addr = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
        addr["socket_address"]["port_value"] = ports[cluster["name"]]
    path = os.path.join(tmp, "envoy.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    log = os.path.join(tmp, "envoy.log")
    env = dict(os.environ, TOKENGUARD_CALLER_KEY=CALLER_KEY)
    proc = subprocess.Popen([envoy_bin, "-c", path, "--concurrency", "1", "--disable-hot-restart",
                             "-l", "warning", "--log-path", log], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(port, proc, "envoy", log)
    return proc, port, log


def run_envoy(bins, tmp, tg_port, app_port, c):
    proc, port, log = start_envoy(bins["envoy"], tmp, load_yaml("deploy/envoy/envoy.yaml"), tg_port, app_port, c)
    try:
        run_cases(c, port, on_503=503, on_hang_up=503)
    finally:
        stop(proc)
    deprecated = [line for line in open(log) if "deprecated" in line.lower()]
    c.expect("envoy logs no deprecation warning", not deprecated, "".join(deprecated)[:500])


def istio_ext_authz(provider):
    """The ext_authz filter config Istio builds from an envoyExtAuthzHttp provider (pilot/pkg/security/authz/
    builder/extauthz.go: generateHTTPConfig), pointed at the test cluster "tokenguard"."""
    p = provider["envoyExtAuthzHttp"]
    exact = lambda names: {"patterns": [{"exact": n} for n in names]}  # noqa: E731 (all lists here are exact)
    service = {"path_prefix": p.get("pathPrefix", ""),
               "server_uri": {"uri": "http://" + p["service"], "cluster": "tokenguard",
                              "timeout": p.get("timeout", "600s")}}
    extra = p.get("includeAdditionalHeadersInCheck") or {}
    if extra:
        service["authorization_request"] = {"headers_to_add": [{"key": k, "value": extra[k]} for k in sorted(extra)]}
    response = {}
    if p.get("headersToUpstreamOnAllow"):
        response["allowed_upstream_headers"] = exact(p["headersToUpstreamOnAllow"])
    if p.get("headersToDownstreamOnDeny"):
        response["allowed_client_headers"] = exact(p["headersToDownstreamOnDeny"])
    if response:
        service["authorization_response"] = response
    config = {"@type": "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz",
              "failure_mode_allow": p.get("failOpen", False), "transport_api_version": "V3",
              "http_service": service}
    if p.get("statusOnError"):
        config["status_on_error"] = {"code": int(p["statusOnError"])}
    if p.get("includeRequestHeadersInCheck"):
        config["allowed_headers"] = exact(p["includeRequestHeadersInCheck"])
    return {"name": "envoy.filters.http.ext_authz", "typed_config": config}


def run_istio(bins, tmp, tg_port, app_port, c):
    """Not Istio itself: Envoy with the ext_authz filter Istio would build from istio-operator.yaml and the
    patches of envoy-filter.yaml applied as Istio applies them, in a chain like a sidecar's inbound one."""
    config = load_yaml("deploy/envoy/envoy.yaml")
    hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    hcm.pop("common_http_protocol_options")
    hcm["route_config"]["virtual_hosts"][0].pop("request_headers_to_remove")
    providers = load_yaml("deploy/istio/istio-operator.yaml")["spec"]["meshConfig"]["extensionProviders"]
    policy = load_yaml("deploy/istio/authorization-policy.yaml")["spec"]
    provider = next(p for p in providers if p["name"] == policy["provider"]["name"])
    router = hcm["http_filters"][-1]
    filters = [istio_ext_authz(provider), router]
    for patch in load_yaml("deploy/istio/envoy-filter.yaml")["spec"]["configPatches"]:
        op, value = patch["patch"]["operation"], patch["patch"]["value"]
        if patch["applyTo"] == "HTTP_FILTER":
            at = [f["name"] for f in filters].index(patch["match"]["listener"]["filterChain"]["filter"]["subFilter"]["name"])
            filters.insert(at if op == "INSERT_BEFORE" else at + 1, value)
        elif patch["applyTo"] == "NETWORK_FILTER" and op == "MERGE":
            merged = dict(value["typed_config"])
            merged.pop("@type")
            hcm.update(merged)
        else:
            raise SystemExit(f"run_istio does not know how to apply {patch['applyTo']} {op}")
    hcm["http_filters"] = filters
    proc, port, _ = start_envoy(bins["envoy"], tmp, config, tg_port, app_port, c)
    try:
        run_cases(c, port, on_503=int(provider["envoyExtAuthzHttp"]["statusOnError"]),
                  on_hang_up=int(provider["envoyExtAuthzHttp"]["statusOnError"]))
    finally:
        stop(proc)


def run_traefik(bins, tmp, tg_port, app_port, c):
    """Traefik with the file provider: the same dynamic configuration as the Middleware resources (the CRD
    provider reads spec into the same structures; a chain lists names instead of {name: ...})."""
    docs = [d for d in yaml.safe_load_all(open(os.path.join(ROOT, "deploy/traefik/middlewares.yaml"))) if d]
    middlewares = {}
    for d in docs:
        spec = dict(d["spec"])
        if "chain" in spec:
            spec = {"chain": {"middlewares": [m["name"] for m in spec["chain"]["middlewares"]]}}
        if "forwardAuth" in spec:
            fa = dict(spec["forwardAuth"])
            url = urllib.parse.urlsplit(fa["address"])
            fa["address"] = urllib.parse.urlunsplit(("http", f"127.0.0.1:{tg_port}", url.path, url.query, ""))
            spec = {"forwardAuth": fa}
        headers = spec.get("headers", {}).get("customRequestHeaders", {})
        if headers.get("X-Tokenguard-Key") == "replace-with-a-long-random-caller-key":
            headers["X-Tokenguard-Key"] = CALLER_KEY
        middlewares[d["metadata"]["name"]] = spec
    route = [d for d in yaml.safe_load_all(open(os.path.join(ROOT, "deploy/traefik/ingressroute.yaml"))) if d][0]
    port = free_port()
    dynamic = {"http": {
        "routers": {"app": {"rule": "PathPrefix(`/`)", "entryPoints": ["web"], "service": "app",
                            "middlewares": [m["name"] for m in route["spec"]["routes"][0]["middlewares"]]}},
        "services": {"app": {"loadBalancer": {"servers": [{"url": f"http://127.0.0.1:{app_port}"}]}}},
        "middlewares": middlewares}}
    log = os.path.join(tmp, "traefik.log")
    static = {"global": {"checkNewVersion": False, "sendAnonymousUsage": False},
              "entryPoints": {"web": {"address": f"127.0.0.1:{port}"}},
              "providers": {"file": {"filename": os.path.join(tmp, "dynamic.yaml"), "watch": False}},
              "log": {"level": "ERROR", "filePath": log}}
    for name, doc in (("dynamic.yaml", dynamic), ("traefik.yaml", static)):
        with open(os.path.join(tmp, name), "w") as f:
            yaml.safe_dump(doc, f)
    open(log, "w").close()
    proc = subprocess.Popen([bins["traefik"], "--configFile=" + os.path.join(tmp, "traefik.yaml")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(port, proc, "traefik", log)
        deadline = time.time() + 30  # the listener opens before the file provider's routers are in place
        while request(port, {})[0] == 404 and time.time() < deadline:
            time.sleep(0.1)
        run_cases(c, port, on_503=503, on_hang_up=500, check_path="/v1/authz/apple")
    finally:
        stop(proc)
    # The hang-up case logs one error; anything else (a refused option, a missing middleware) is a failure.
    errors = [line for line in open(log) if line.strip() and "Error calling" not in line]
    c.expect("traefik logs no other error", not errors, "".join(errors)[:500])


def run_nginx(bins, tmp, tg_port, app_port, c):
    cm = yaml.safe_load(open(os.path.join(ROOT, "deploy/kubernetes/forward-auth-nginx-configmap.yaml")))
    conf_dir, key_dir = os.path.join(tmp, "nginx-config"), os.path.join(tmp, "nginx-key")
    for d in (conf_dir, key_dir, os.path.join(tmp, "cache"), os.path.join(tmp, "run")):
        os.makedirs(d)
    for name, text in cm["data"].items():
        with open(os.path.join(conf_dir, name), "w") as f:
            f.write(text)

    # The init container's script: the last key of the Secret wins; keys nginx cannot quote are refused.
    keys = os.path.join(tmp, "keys")
    script = os.path.join(conf_dir, "caller-key.sh")
    out = os.path.join(key_dir, "caller-key.conf")
    env = dict(os.environ, TOKENGUARD_CALLER_KEYS_FILE=keys, TOKENGUARD_CALLER_KEY_CONF=out)
    for bad in ("short\n", "has-a-dollar-$host-0123456789\n", "has-a-quote-\"-0123456789\n", "\n"):
        with open(keys, "w") as f:
            f.write(bad)
        r = subprocess.run(["sh", script], env=env, capture_output=True, text=True)
        c.expect(f"caller-key.sh refuses {bad!r}", r.returncode != 0 and not os.path.exists(out), r.stdout)
    with open(keys, "w") as f:
        f.write("old-caller-key-0123456789\n " + CALLER_KEY + " \n")
    r = subprocess.run(["sh", script], env=env, capture_output=True, text=True)
    c.expect("caller-key.sh writes the last key", r.returncode == 0, r.stderr)
    if r.returncode != 0:
        return
    c.expect("caller-key.conf content", open(out).read() == f'set $tokenguard_caller_key "{CALLER_KEY}";\n',
             open(out).read())

    port = free_port()
    conf = open(os.path.join(conf_dir, "nginx.conf")).read()
    replacements = {
        "/etc/nginx/tokenguard/": conf_dir + "/",
        "/etc/nginx/tokenguard-key/": key_dir + "/",
        "/var/cache/nginx/": os.path.join(tmp, "cache") + "/",
        "/var/run/": os.path.join(tmp, "run") + "/",
        "server 127.0.0.1:8080;": f"server 127.0.0.1:{tg_port};",
        "server 127.0.0.1:3000;": f"server 127.0.0.1:{app_port};",
        "listen 8000;": f"listen 127.0.0.1:{port};",
        "access_log /dev/stdout;": "access_log off;",
    }
    for old, new in replacements.items():
        if old not in conf:
            raise SystemExit(f"nginx.conf no longer contains {old!r}: update {__file__}")
        conf = conf.replace(old, new)
    with open(os.path.join(conf_dir, "nginx.conf"), "w") as f:
        f.write(conf)
    log = os.path.join(tmp, "nginx.log")
    with open(log, "w") as logf:
        proc = subprocess.Popen([bins["nginx"], "-p", tmp, "-e", "stderr", "-c", os.path.join(conf_dir, "nginx.conf")],
                                stdout=logf, stderr=logf)
    try:
        wait_for(port, proc, "nginx", log)
        # nginx's auth_request turns every status other than 2xx, 401 and 403 into 500.
        run_cases(c, port, on_503=500, on_hang_up=500, check_path="/v1/authz/apple")
    finally:
        stop(proc)


def main():
    ap = argparse.ArgumentParser()
    for tool in ("envoy", "nginx", "traefik"):
        ap.add_argument("--" + tool, required=True, help=f"the {tool} binary")
    bins = vars(ap.parse_args())

    tg, app = Stub(("127.0.0.1", 0), TokenguardStub), Stub(("127.0.0.1", 0), AppStub)
    for s in (tg, app):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    tmp = tempfile.mkdtemp(prefix="tokenguard-gateways-")
    failed = 0
    try:
        for name, runner in (("envoy", run_envoy), ("istio", run_istio), ("traefik", run_traefik),
                             ("nginx", run_nginx)):
            c = Checker(name)
            work = os.path.join(tmp, name)
            os.makedirs(work)
            runner(bins, work, tg.server_address[1], app.server_address[1], c)
            label = "istio (simulated in envoy)" if name == "istio" else name
            print(f"gateway {label}: {c.passed} passed, {c.failed} failed")
            failed += c.failed
    finally:
        tg.shutdown()
        app.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
