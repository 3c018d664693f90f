"""What the bench scripts ask of a kube-apiserver they started, as its admin.

  python3 bench/apiserver.py ready HOST:PORT TOKEN [SECONDS]
      waits until /readyz answers 200 (default 120 s), else exits non-zero.
  python3 bench/apiserver.py objects HOST:PORT TOKEN CA_FILE APP_CONF
      makes what pods with a service account token need when no
      controller-manager runs (ServiceAccount default, ConfigMaps
      kube-root-ca.crt and, for a MicroShift-built server, openshift-service-ca.crt)
      and the benches' own ConfigMap `app` (key app.conf = APP_CONF) and Secret
      `app`, in namespace default; what exists already is kept.
"""
import base64
import json
import ssl
import sys
import time
import urllib.error
import urllib.request

CTX = ssl._create_unverified_context()


def ready(addr, token, seconds=120.0):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            req = urllib.request.Request(f"https://{addr}/readyz", headers={"Authorization": f"Bearer {token}"})
            if urllib.request.urlopen(req, context=CTX, timeout=2).status == 200:
                return
        except Exception:
            pass
        time.sleep(0.1)
    sys.exit("bench: kube-apiserver did not become ready (see apiserver.log)")


def objects(addr, token, ca, app_conf):
    def post(path, body):
        req = urllib.request.Request(f"https://{addr}{path}", method="POST", data=json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, context=CTX, timeout=30)
        except urllib.error.HTTPError as e:
            if e.code != 409:
                raise
    pem = open(ca).read()
    ns = "/api/v1/namespaces/default"
    post(f"{ns}/serviceaccounts", {"metadata": {"name": "default"}})
    post(f"{ns}/configmaps", {"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": pem}})
    # A MicroShift-built kube-apiserver adds this one to the projected token volume.
    post(f"{ns}/configmaps", {"metadata": {"name": "openshift-service-ca.crt"}, "data": {"service-ca.crt": pem}})
    post(f"{ns}/configmaps", {"metadata": {"name": "app"}, "data": {"app.conf": app_conf}})
    post(f"{ns}/secrets", {"metadata": {"name": "app"}, "type": "Opaque",
                           "data": {"password": base64.b64encode(b"not-a-secret").decode()}})


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "ready":
        ready(args[0], args[1], float(args[2]) if len(args) > 2 else 120.0)
    elif cmd == "objects":
        objects(*args)
    else:
        sys.exit(f"bench/apiserver.py: unknown command {cmd!r}")
